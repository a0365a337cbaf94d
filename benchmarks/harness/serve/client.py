"""The load generator: an asyncio client of the OpenAI-compatible streaming API (aiohttp).

Modelled on vLLM's `benchmarks/lib/endpoint_request_func.py` and `vllm/benchmarks/serve.py`:

* `request_once` is the one request function, and it only records (`metrics.RequestRecord`):
  when the request was due and sent, when each read carrying content arrived and how many
  tokens it carried, when the response ended, the server's `usage`, or why it failed. A read
  holds every event the server wrote at once (`transformers serve` joins queued events); an
  event's tokens are the growth of its cumulative `usage.completion_tokens` where the server
  streams usage with every event (vLLM's `continuous_usage_stats`), else one per content event.
  Tokens are never counted by re-tokenizing text.
* `run_pass` sends one pass: the arrival schedule (`arrivals`) is made before anything is sent,
  each request waits for its scheduled time, then for a slot under `max_concurrency`, and only
  then is sent, so the send time and the scheduled time are both kept (unlike vLLM, whose clock
  starts after the semaphore). Every request of the pass is sent within `pass_timeout_s` or
  recorded as not sent; no request waits past its `request_timeout_s`.

It deliberately derives nothing (`metrics.calculate_metrics` does) and starts no server.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchmarks.harness.errors import ServeError
from benchmarks.harness.serve.arrivals import arrival_offsets
from benchmarks.harness.serve.metrics import Chunk, RequestRecord
from benchmarks.harness.serve.sse import SseParser

if TYPE_CHECKING:
    import aiohttp

APIS = ("completions", "chat")
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_DETAIL_CHARS = 300


@dataclass(frozen=True)
class LoadSpec:
    """One load pass: where, what (prompts of P tokens, N output tokens) and how fast."""

    base_url: str  # http://127.0.0.1:PORT, no trailing /v1
    model: str  # the model id the server lists
    prompts: tuple[str, ...]  # one per request (num_prompts)
    new_tokens: int
    request_rate: float = math.inf  # requests per second; inf: all at once
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    api: str = "completions"
    # vLLM (and SGLang) stream the cumulative usage with every event when asked: exact tokens
    # per chunk. transformers serve ignores the option; a strict OpenAI server may refuse it.
    continuous_usage: bool = False
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    request_timeout_s: float = 600.0
    pass_timeout_s: float = 3600.0


@dataclass(frozen=True)
class PassResult:
    """One pass's records (in request order) and its wall time (pass start -> last response)."""

    records: tuple[RequestRecord, ...]
    duration_s: float


def request_body(spec: LoadSpec, prompt: str) -> dict[str, Any]:
    """The streaming request's JSON body: OpenAI fields only (transformers serve answers 422 to
    any other, e.g. `ignore_eos`), then `extra_body` (a server's own options)."""
    if spec.api not in APIS:
        raise ServeError(f"api {spec.api!r} is not one of {', '.join(APIS)}")
    options: dict[str, Any] = {"include_usage": True}
    if spec.continuous_usage:
        options["continuous_usage_stats"] = True
    body: dict[str, Any] = {
        "model": spec.model,
        "max_tokens": spec.new_tokens,
        "stream": True,
        "temperature": 0.0,
        "stream_options": options,
    }
    if spec.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body.update(spec.extra_body)
    return body


def _content(event: Mapping[str, Any]) -> str:
    """The text an event carries: completions' `text`, chat's `content` or reasoning."""
    choices = event.get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        return ""
    choice = choices[0]
    if "text" in choice:
        return str(choice.get("text") or "")
    delta = choice.get("delta") or {}
    parts = (delta.get(key) for key in ("content", "reasoning_content", "reasoning"))
    return "".join(str(part) for part in parts if part)


class _Stream:
    """The state of one response being read: tokens per read, usage, an error event."""

    def __init__(self, continuous_usage: bool) -> None:
        self.continuous_usage = continuous_usage
        self.parser = SseParser()
        self.chunks: list[Chunk] = []
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.error: str | None = None

    def read(self, data: bytes, at_s: float) -> None:
        tokens = sum(self._event(payload) for payload in self.parser.feed(data))
        if tokens > 0:
            self.chunks.append(Chunk(at_s, tokens))

    def end(self, at_s: float) -> None:
        tokens = sum(self._event(payload) for payload in self.parser.close())
        if tokens > 0:
            self.chunks.append(Chunk(at_s, tokens))

    def _event(self, payload: str) -> int:
        """The tokens one event carries (module docstring)."""
        event = self._decode(payload)
        if event is None:
            return 0
        before = self.completion_tokens
        usage = event.get("usage")
        if isinstance(usage, Mapping):
            if isinstance(usage.get("completion_tokens"), int):
                self.completion_tokens = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                self.prompt_tokens = usage["prompt_tokens"]
        if not _content(event):
            return 0
        if self.continuous_usage and isinstance(usage, Mapping) and self.completion_tokens:
            return max(self.completion_tokens - (before or 0), 0)  # cumulative: the growth
        return 1

    def _decode(self, payload: str) -> Mapping[str, Any] | None:
        """The event's JSON object; None for `[DONE]`, and for a malformed or error event, whose
        reason is kept."""
        if payload.strip() == "[DONE]":
            return None
        try:
            event = json.loads(payload)
        except json.JSONDecodeError:
            self.error = self.error or "malformed event"
            return None
        if not isinstance(event, Mapping):
            return None
        if "error" in event:
            self.error = self.error or "error event"
            return None
        return event


async def request_once(
    session: aiohttp.ClientSession,
    spec: LoadSpec,
    index: int,
    *,
    scheduled_s: float,
    clock: Callable[[], float],
    timeout_s: float,
) -> RequestRecord:
    """Send request `index` now and record its stream (module docstring); never raises."""
    import aiohttp  # noqa: PLC0415 - the `serve` group is optional; `pytest benchmarks` imports us

    body = request_body(spec, spec.prompts[index])
    stream = _Stream(spec.continuous_usage)
    sent_s = clock()
    base = RequestRecord(index=index, scheduled_s=scheduled_s, sent_s=sent_s)
    try:
        timeout = aiohttp.ClientTimeout(total=max(timeout_s, 0.001))
        async with session.post(spec.base_url + PATHS[spec.api], json=body, timeout=timeout) as r:
            if r.status != 200:
                detail = (await r.text())[:_DETAIL_CHARS]
                return _failed(base, f"HTTP {r.status}", detail)
            async for data in r.content.iter_any():
                stream.read(data, clock())
            done_s = clock()
            stream.end(done_s)
    except TimeoutError:
        return _failed(base, "timeout", f"no complete response within {timeout_s:.3g} s")
    except aiohttp.ClientError as error:
        return _failed(base, "connection error", f"{type(error).__name__}: {error}")
    return RequestRecord(
        index=index,
        scheduled_s=scheduled_s,
        sent_s=sent_s,
        chunks=tuple(stream.chunks),
        done_s=done_s,
        output_tokens=stream.completion_tokens,
        prompt_tokens=stream.prompt_tokens,
        error=stream.error,
    )


def _failed(base: RequestRecord, reason: str, detail: str) -> RequestRecord:
    return RequestRecord(
        index=base.index,
        scheduled_s=base.scheduled_s,
        sent_s=base.sent_s,
        error=f"{reason}: {detail}" if detail else reason,
    )


async def run_pass(spec: LoadSpec, offsets: Sequence[float] | None = None) -> PassResult:
    """Send every prompt of `spec` on its schedule (module docstring) and record the pass.

    `offsets` overrides the seeded schedule (tests); otherwise `arrivals.arrival_offsets`.
    """
    if not spec.prompts:
        raise ServeError("a load pass needs at least one prompt (num_prompts >= 1)")
    if offsets is None:
        offsets = arrival_offsets(len(spec.prompts), spec.request_rate, spec.burstiness, spec.seed)
    start = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - start

    import aiohttp  # noqa: PLC0415 - optional group (request_once)

    slots = asyncio.Semaphore(spec.max_concurrency) if spec.max_concurrency else None
    # The connector's own default cap (100 connections) would be a second, silent concurrency
    # limit: the pass's only limit is `max_concurrency`.
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(index: int, due_s: float) -> RequestRecord:
            await asyncio.sleep(max(due_s - clock(), 0.0))
            if slots is not None:
                try:
                    await asyncio.wait_for(slots.acquire(), spec.pass_timeout_s - clock())
                except TimeoutError:
                    return _failed(
                        RequestRecord(index, due_s, clock()),
                        "not sent",
                        f"no concurrency slot within the pass's {spec.pass_timeout_s:g} s",
                    )
            try:
                left = min(spec.request_timeout_s, spec.pass_timeout_s - clock())
                return await request_once(
                    session, spec, index, scheduled_s=due_s, clock=clock, timeout_s=left
                )
            finally:
                if slots is not None:
                    slots.release()

        records = await asyncio.gather(*(one(i, t) for i, t in enumerate(offsets)))
        duration_s = clock()
    return PassResult(tuple(records), duration_s)


def run_load(spec: LoadSpec, offsets: Sequence[float] | None = None) -> PassResult:
    """`run_pass` in a fresh event loop (the suite's synchronous entry)."""
    return asyncio.run(run_pass(spec, offsets))


async def _models(base_url: str, timeout_s: float) -> list[str]:
    import aiohttp  # noqa: PLC0415 - optional group (request_once)

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(base_url + "/v1/models") as response,
    ):
        if response.status != 200:
            raise ServeError(
                f"{base_url}/v1/models answered HTTP {response.status}: is this an "
                "OpenAI-compatible server? (check --serve-url, or the server's log)"
            )
        document = await response.json(content_type=None)
    data = document.get("data") if isinstance(document, Mapping) else None
    return [str(m["id"]) for m in data or [] if isinstance(m, Mapping) and "id" in m]


def list_models(base_url: str, timeout_s: float = 5.0) -> list[str]:
    """The model ids `GET /v1/models` lists; ServeError when the server answers otherwise,
    aiohttp.ClientError or TimeoutError when it does not answer."""
    return asyncio.run(_models(base_url, timeout_s))
