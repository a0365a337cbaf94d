"""An OpenAI-compatible streaming server with scripted token times (aiohttp.web).

`python -m benchmarks.harness.serve.fake --port PORT [--ttft-s S] [--itl-s S] ...` serves
`GET /v1/models`, `POST /v1/completions` and `POST /v1/chat/completions`. A request asking for
`max_tokens` = N gets its tokens at exactly `arrival + ttft_s` and then every `itl_s` (times
`1 + slowdown`, and with a seeded jitter of +-`jitter` of each gap when asked), `tokens_per_event`
tokens in one event and `events_per_write` events in one write (a write leaves when its last
token is due: a server that joins queued events), then a final event with `usage`
(`--usage final`), usage on every event (`continuous`, vLLM's `continuous_usage_stats`) or
none. A chat stream opens with a role-only chunk at arrival, as `transformers serve` does.
`--short K` returns only K tokens; `--fail-status CODE` answers every request with that status;
`--sequential` serves one request at a time (a server without continuous batching).

Scripted failures, one per way a server lets a client down (the client's failure tests):
`--never-answer` reads the request and never sends headers; `--stall-after-headers` sends the
200 headers and the first token, then nothing; `--non-sse` answers a 200 `application/json`
completion, not streamed; `--drop-after K` closes the connection abruptly after K tokens (a
server that dies mid-response); `--error-event-after K` sends an SSE `{"error": ...}` event
after K tokens, then `[DONE]`; `--fail-every K` answers HTTP 500 to every K-th request (by
arrival), the others as usual; `--crash-after-requests K` exits the process with code 3 when
request K + 1 arrives. A handler whose client went away is cancelled (`handler_cancellation`),
so a hung request never holds up the server's shutdown.

It is the server of the client's tests (exact, known times) and of the client-overhead
measurement (`benchmarks/suite/serve.py`: the client's figures against the scripted ones at the
matrix's highest load). `--slowdown` is its server-side calibration knob. It binds 127.0.0.1
only and generates nothing: the "tokens" are words `w0 w1 ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from benchmarks.harness.serve.launcher import FAKE_MODEL_ID as MODEL_ID

# A hung handler (never-answer, stall) is cancelled when its client leaves, and a shutdown
# waits for the others briefly, not aiohttp's default minute.
RUNNER_OPTIONS: dict[str, Any] = {"handler_cancellation": True, "shutdown_timeout": 1.0}


@dataclass(frozen=True)
class Script:
    """How the fake answers (module docstring)."""

    ttft_s: float = 0.05
    itl_s: float = 0.01
    tokens_per_event: int = 1
    events_per_write: int = 1
    usage: str = "final"  # final | continuous | none
    short: int | None = None
    fail_status: int | None = None
    sequential: bool = False
    slowdown: float = 0.0
    jitter: float = 0.0
    seed: int = 0
    never_answer: bool = False
    stall_after_headers: bool = False
    non_sse: bool = False
    drop_after: int | None = None
    error_event_after: int | None = None
    fail_every: int | None = None
    crash_after_requests: int | None = None

    @property
    def cut(self) -> int | None:
        """The tokens sent before a scripted failure mid-stream; None: the stream completes."""
        if self.stall_after_headers:
            return 1
        return self.drop_after if self.drop_after is not None else self.error_event_after

    def token_times(self, count: int, rng: random.Random) -> list[float]:
        """Seconds after arrival at which each of `count` tokens is due."""
        scale = 1.0 + self.slowdown
        times = [self.ttft_s * scale]
        for _ in range(count - 1):
            jitter = 1.0 + rng.uniform(-self.jitter, self.jitter) if self.jitter else 1.0
            times.append(times[-1] + self.itl_s * scale * jitter)
        return times


def _completion(kind: str, index: int, count: int, prompt: int) -> dict[str, Any]:
    """A whole, non-streamed completion (`--non-sse`)."""
    text = " ".join(f"w{j}" for j in range(count))
    choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
    if kind == "chat":
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    usage = {"prompt_tokens": prompt, "completion_tokens": count, "total_tokens": prompt + count}
    return {"id": f"fake-{index}", "choices": [choice], "usage": usage}


def _event(kind: str, index: int, text: str, usage: dict[str, int] | None) -> str:
    if kind == "chat":
        choice: dict[str, Any] = {"index": 0, "delta": {"content": text} if text else {}}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text}
        obj = "text_completion"
    body: dict[str, Any] = {"id": f"fake-{index}", "object": obj, "choices": [choice]}
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n"


class FakeServer:
    """The aiohttp application of `Script` (module docstring)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests = 0
        self._lock = asyncio.Lock()
        self.app = web.Application()
        self.app.router.add_get("/v1/models", self._models)
        self.app.router.add_post("/v1/completions", self._completions)
        self.app.router.add_post("/v1/chat/completions", self._chat)

    async def _models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, "completions")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, "chat")

    async def _stream(self, request: web.Request, kind: str) -> web.StreamResponse:
        arrival = time.perf_counter()
        body = await request.json()
        self.requests += 1
        index = self.requests
        script = self.script
        if script.crash_after_requests is not None and index > script.crash_after_requests:
            os._exit(3)  # a crash: no cleanup, no response, the connections drop
        failing = script.fail_every is not None and index % script.fail_every == 0
        if script.fail_status is not None or failing:
            status = script.fail_status if script.fail_status is not None else 500
            return web.json_response({"detail": "scripted failure"}, status=status)
        if script.never_answer:
            await asyncio.Event().wait()  # until the client goes away (handler cancelled)
        asked = int(body.get("max_tokens") or 16)
        count = asked if script.short is None else min(script.short, asked)
        prompt = body.get("prompt") if kind == "completions" else body["messages"][-1]["content"]
        prompt_tokens = len(str(prompt).split())
        if script.non_sse:
            return web.json_response(_completion(kind, index, count, prompt_tokens))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if kind == "chat":
            role = {
                "id": f"fake-{index}",
                "choices": [{"index": 0, "delta": {"role": "assistant"}}],
            }
            await response.write(f"data: {json.dumps(role)}\n\n".encode())
        sent = count if script.cut is None else min(script.cut, count)
        if script.sequential:
            async with self._lock:
                await self._tokens(
                    response,
                    kind,
                    index=index,
                    count=sent,
                    prompt=prompt_tokens,
                    t0=time.perf_counter(),
                )
        else:
            await self._tokens(
                response, kind, index=index, count=sent, prompt=prompt_tokens, t0=arrival
            )
        if script.cut is None:
            await self._usage(response, kind, index=index, count=count, prompt=prompt_tokens)
        elif script.stall_after_headers:
            await asyncio.Event().wait()
        elif script.drop_after is not None:
            assert request.transport is not None
            request.transport.abort()  # no last chunk: the client sees a broken body
            return response
        else:
            error = {"message": "scripted error event", "type": "server_error", "code": 500}
            await response.write(f"data: {json.dumps({'error': error})}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _tokens(
        self,
        response: web.StreamResponse,
        kind: str,
        *,
        index: int,
        count: int,
        prompt: int,
        t0: float,
    ) -> None:
        script = self.script
        rng = random.Random(script.seed * 1_000_003 + index)
        times = script.token_times(count, rng)
        events: list[str] = []
        per_write = script.events_per_write
        for first in range(0, count, script.tokens_per_event):
            last = min(first + script.tokens_per_event, count)
            text = " ".join(f"w{j}" for j in range(first, last))
            usage = None
            if script.usage == "continuous":
                usage = {"prompt_tokens": prompt, "completion_tokens": last}
            events.append(_event(kind, index, text if first == 0 else " " + text, usage))
            if len(events) == per_write or last == count:
                await asyncio.sleep(max(t0 + times[last - 1] - time.perf_counter(), 0.0))
                await response.write("".join(events).encode())
                events = []

    async def _usage(
        self, response: web.StreamResponse, kind: str, *, index: int, count: int, prompt: int
    ) -> None:
        """The final usage event (unless `--usage none`) and `[DONE]`."""
        final = {
            "prompt_tokens": prompt,
            "completion_tokens": count,
            "total_tokens": prompt + count,
        }
        if self.script.usage != "none":
            await response.write(_event(kind, index, "", final).encode())
        await response.write(b"data: [DONE]\n\n")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.harness.serve.fake")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ttft-s", type=float, default=Script.ttft_s)
    p.add_argument("--itl-s", type=float, default=Script.itl_s)
    p.add_argument("--tokens-per-event", type=int, default=1)
    p.add_argument("--events-per-write", type=int, default=1)
    p.add_argument("--usage", choices=("final", "continuous", "none"), default="final")
    p.add_argument("--short", type=int, default=None)
    p.add_argument("--fail-status", type=int, default=None)
    p.add_argument("--sequential", action="store_true")
    p.add_argument("--slowdown", type=float, default=0.0)
    p.add_argument("--jitter", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--never-answer", action="store_true")
    p.add_argument("--stall-after-headers", action="store_true")
    p.add_argument("--non-sse", action="store_true")
    p.add_argument("--drop-after", type=int, default=None, metavar="K")
    p.add_argument("--error-event-after", type=int, default=None, metavar="K")
    p.add_argument("--fail-every", type=int, default=None, metavar="K")
    p.add_argument("--crash-after-requests", type=int, default=None, metavar="K")
    return p


def script_from_args(argv: Sequence[str] | None = None) -> tuple[Script, int]:
    """The script and port of a command line (module docstring)."""
    args = _parser().parse_args(argv)
    script = Script(
        ttft_s=args.ttft_s,
        itl_s=args.itl_s,
        tokens_per_event=args.tokens_per_event,
        events_per_write=args.events_per_write,
        usage=args.usage,
        short=args.short,
        fail_status=args.fail_status,
        sequential=args.sequential,
        slowdown=args.slowdown,
        jitter=args.jitter,
        seed=args.seed,
        never_answer=args.never_answer,
        stall_after_headers=args.stall_after_headers,
        non_sse=args.non_sse,
        drop_after=args.drop_after,
        error_event_after=args.error_event_after,
        fail_every=args.fail_every,
        crash_after_requests=args.crash_after_requests,
    )
    return script, args.port


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the script on 127.0.0.1 until terminated."""
    script, port = script_from_args(argv)
    web.run_app(FakeServer(script).app, host="127.0.0.1", port=port, print=None, **RUNNER_OPTIONS)


if __name__ == "__main__":
    main()
