"""The load generator: an asyncio client of the OpenAI-compatible streaming API (aiohttp).

Modelled on vLLM's `benchmarks/lib/endpoint_request_func.py` and `vllm/benchmarks/serve.py`:

* `request_once` is the one request function, and it only records (`metrics.RequestRecord`):
  when the request was due and sent, the N it asked (its own `new_tokens_each` entry, else
  `new_tokens`), when each read carrying content arrived and how many tokens it carried, how
  many events came, when the body ended, the server's `usage`, or why it failed. A read holds
  every event the server wrote at once (`transformers serve` joins queued events); an event's
  tokens are the growth of its cumulative `usage.completion_tokens` where the server streams
  usage with every event (vLLM's `continuous_usage_stats`), else one per content event. Tokens
  are never counted by re-tokenizing text.
* It never raises for one request's failure (vLLM turns every per-request exception into an
  error row): the error reads "reason: detail" with one of the reasons `timeout` (no headers
  within `request_timeout_s`, no bytes for `read_timeout_s` once they came, or the whole
  response not done in time), `connection error` (refused, reset or dropped before the
  headers), `HTTP <code>`, `not an event stream` (a 200 that is not `text/event-stream`),
  `stream broken` (the connection dropped after the 200), `error event`, `malformed event`,
  `not sent` (no concurrency slot within the pass) or `exception` (anything else: a bug or a
  payload this client cannot read, "exception: TypeName: message"). Cancellation and Ctrl-C
  still propagate.
* `run_pass` sends one pass: the arrival schedule (`arrivals`) is made before anything is sent,
  each request waits for its scheduled time, then for a slot under `max_concurrency`, and only
  then is sent, so the send time and the scheduled time are both kept (unlike vLLM, whose clock
  starts after the semaphore). Every request of the pass is sent within `pass_timeout_s` or
  recorded as not sent; no request waits past its `request_timeout_s`. `PassResult` says
  whether every request timed out or was refused (a cell that can fail at once).
* Sessions never use HTTP_PROXY and the like (`trust_env=False`): the servers are on the
  loopback. (`models.list_models` reads `GET /v1/models`.)

It deliberately derives nothing (`metrics.calculate_metrics` does) and starts no server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchmarks.harness.errors import ServeError
from benchmarks.harness.serve.arrivals import arrival_offsets
from benchmarks.harness.serve.metrics import Chunk, RequestRecord, reason_key
from benchmarks.harness.serve.sse import SseParser

if TYPE_CHECKING:
    import aiohttp

APIS = ("completions", "chat")
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_DETAIL_CHARS = 300
_BODY_CHARS = 200  # of a body that is not an event stream, in its error
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError)  # distinct classes before Python 3.11


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
    request_timeout_s: float = 600.0  # the whole request: send -> body end
    pass_timeout_s: float = 3600.0
    # The longest wait for the next bytes once the response's headers came (aiohttp's
    # sock_read); None: only request_timeout_s bounds a stalled stream.
    read_timeout_s: float | None = None
    # One N per prompt (workloads whose output lengths vary); None: every request asks new_tokens.
    new_tokens_each: tuple[int, ...] | None = None

    def asked(self, index: int) -> int:
        """The N request `index` asks for."""
        return self.new_tokens if self.new_tokens_each is None else self.new_tokens_each[index]


@dataclass(frozen=True)
class PassResult:
    """One pass's records (in request order) and its wall time (pass start -> last response)."""

    records: tuple[RequestRecord, ...]
    duration_s: float

    def _every(self, *reasons: str) -> bool:
        return bool(self.records) and all(
            r.error is not None and reason_key(r.error) in reasons for r in self.records
        )

    @property
    def all_timed_out(self) -> bool:
        """Every request timed out or was never sent: the server hangs."""
        return self._every("timeout", "not sent")

    @property
    def all_refused(self) -> bool:
        """Every request failed to connect: no server (any more) at the URL."""
        return self._every("connection error")


def _check(spec: LoadSpec) -> None:
    """ServeError on a spec no request of it could be sent from (before the pass starts)."""
    if not spec.prompts:
        raise ServeError("a load pass needs at least one prompt (num_prompts >= 1)")
    if spec.api not in APIS:
        raise ServeError(f"api {spec.api!r} is not one of {', '.join(APIS)}")
    each = spec.new_tokens_each
    if each is not None and len(each) != len(spec.prompts):
        raise ServeError(
            f"new_tokens_each has {len(each)} N for {len(spec.prompts)} prompts; give one each"
        )


def request_body(spec: LoadSpec, prompt: str, new_tokens: int | None = None) -> dict[str, Any]:
    """The streaming request's JSON body asking `new_tokens` (default `spec.new_tokens`): OpenAI
    fields only (transformers serve answers 422 to any other, e.g. `ignore_eos`), then
    `extra_body` (a server's own options)."""
    if spec.api not in APIS:
        raise ServeError(f"api {spec.api!r} is not one of {', '.join(APIS)}")
    options: dict[str, Any] = {"include_usage": True}
    if spec.continuous_usage:
        options["continuous_usage_stats"] = True
    body: dict[str, Any] = {
        "model": spec.model,
        "max_tokens": spec.new_tokens if new_tokens is None else new_tokens,
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
    """The state of one response being read: tokens per read, events, usage, an error event."""

    def __init__(self, continuous_usage: bool) -> None:
        self.continuous_usage = continuous_usage
        self.parser = SseParser()
        self.chunks: list[Chunk] = []
        self.events = 0
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
        reason is kept (the first one)."""
        if payload.strip() == "[DONE]":
            return None
        self.events += 1
        try:
            event = json.loads(payload)
        except json.JSONDecodeError:
            self.error = self.error or f"malformed event: {payload[:_DETAIL_CHARS]!r}"
            return None
        if not isinstance(event, Mapping):
            return None
        if "error" in event:
            error = event["error"]
            message = error.get("message", error) if isinstance(error, Mapping) else error
            self.error = self.error or f"error event: {str(message)[:_DETAIL_CHARS]}"
            return None
        return event

    def record(self, base: RequestRecord, error: str | None, done_s: float | None) -> RequestRecord:
        """`base` with what this stream read, ended at `done_s`, failed with `error` if any."""
        return dataclasses.replace(
            base, chunks=tuple(self.chunks), done_s=done_s, output_tokens=self.completion_tokens,
            prompt_tokens=self.prompt_tokens, error=error, events=self.events,
        )  # fmt: skip


def _arm_read_timeout(response: aiohttp.ClientResponse, read_timeout_s: float | None) -> None:
    """Start aiohttp's sock_read now that the headers came (as its `ws_connect` resets it): in
    the request's ClientTimeout it would bound the wait for the headers too, i.e. the server's
    queue. Never on a body already ended: the timer would fail the pooled connection's next use.
    """
    connection = response.connection
    protocol = connection.protocol if connection is not None else None
    if read_timeout_s is None or protocol is None or response.content.at_eof():
        return
    protocol.read_timeout = read_timeout_s
    protocol.start_timeout()


async def _read_stream(
    response: aiohttp.ClientResponse, stream: _Stream, clock: Callable[[], float]
) -> str | None:
    """Read a 200's body into `stream`; the error of a body that is not an event stream."""
    if response.content_type != "text/event-stream":
        kind = response.headers.get("Content-Type", "(none)")
        body = (await response.text(errors="replace"))[:_BODY_CHARS]
        return (
            f"not an event stream: HTTP 200 with Content-Type {kind}; the server does not "
            f"stream (is `stream: true` supported on this endpoint?) {body}"
        )
    async for data in response.content.iter_any():
        stream.read(data, clock())
    return None


async def request_once(
    session: aiohttp.ClientSession,
    spec: LoadSpec,
    index: int,
    *,
    scheduled_s: float,
    clock: Callable[[], float],
    timeout_s: float,
) -> RequestRecord:
    """Send request `index` now and record its stream (module docstring); never raises for the
    request's own failure."""
    import aiohttp  # noqa: PLC0415 - the `serve` group is optional; `pytest benchmarks` imports us

    asked = spec.asked(index)
    stream = _Stream(spec.continuous_usage)
    base = RequestRecord(index, scheduled_s, clock(), asked_tokens=asked)
    began = False  # the response's headers came
    try:
        body = request_body(spec, spec.prompts[index], asked)
        timeout = aiohttp.ClientTimeout(total=max(timeout_s, 0.001))
        async with session.post(spec.base_url + PATHS[spec.api], json=body, timeout=timeout) as r:
            began = True
            if r.status != 200:
                detail = (await r.text(errors="replace"))[:_DETAIL_CHARS]
                return stream.record(base, f"HTTP {r.status}: {detail}", None)
            _arm_read_timeout(r, spec.read_timeout_s)
            error = await _read_stream(r, stream, clock)
            if error is not None:
                return stream.record(base, error, clock())
            done_s = clock()
            stream.end(done_s)
    except _TIMEOUTS as error:
        if not began:
            detail = f"no response within {timeout_s:.3g} s"
        elif isinstance(error, aiohttp.SocketTimeoutError):
            detail = f"no bytes for {spec.read_timeout_s:.3g} s after the response began"
        else:
            detail = f"the response did not end within {timeout_s:.3g} s"
        return stream.record(base, f"timeout: {detail}", None)
    except aiohttp.ClientError as error:
        reason = "stream broken" if began else "connection error"
        detail = f"{type(error).__name__}: {error}"
        if began:
            detail += f" (after {sum(c.tokens for c in stream.chunks)} tokens)"
        return stream.record(base, f"{reason}: {detail}", None)
    except Exception as error:  # one request's failure is its row, never the pass's end
        return stream.record(base, f"exception: {type(error).__name__}: {error}", None)
    return stream.record(base, stream.error, done_s)


async def run_pass(spec: LoadSpec, offsets: Sequence[float] | None = None) -> PassResult:
    """Send every prompt of `spec` on its schedule (module docstring) and record the pass.

    `offsets` overrides the seeded schedule (tests); otherwise `arrivals.arrival_offsets`.
    """
    _check(spec)
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
    # trust_env=False (aiohttp's default, said aloud): a proxy from the environment must never
    # carry the bench's loopback requests.
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:

        async def one(index: int, due_s: float) -> RequestRecord:
            await asyncio.sleep(max(due_s - clock(), 0.0))
            if slots is not None:
                try:
                    await asyncio.wait_for(slots.acquire(), spec.pass_timeout_s - clock())
                except _TIMEOUTS:
                    why = f"no concurrency slot within the pass's {spec.pass_timeout_s:g} s"
                    return RequestRecord(
                        index,
                        due_s,
                        clock(),
                        error=f"not sent: {why}",
                        asked_tokens=spec.asked(index),
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
