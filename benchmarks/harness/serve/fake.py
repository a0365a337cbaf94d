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

It is the server of the client's tests (exact, known times) and of the client-overhead
measurement (`benchmarks/suite/serve.py`: the client's figures against the scripted ones at the
matrix's highest load). `--slowdown` is its server-side calibration knob. It binds 127.0.0.1
only and generates nothing: the "tokens" are words `w0 w1 ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from benchmarks.harness.serve.launcher import FAKE_MODEL_ID as MODEL_ID


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

    def token_times(self, count: int, rng: random.Random) -> list[float]:
        """Seconds after arrival at which each of `count` tokens is due."""
        scale = 1.0 + self.slowdown
        times = [self.ttft_s * scale]
        for _ in range(count - 1):
            jitter = 1.0 + rng.uniform(-self.jitter, self.jitter) if self.jitter else 1.0
            times.append(times[-1] + self.itl_s * scale * jitter)
        return times


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
        if script.fail_status is not None:
            return web.json_response({"detail": "scripted failure"}, status=script.fail_status)
        asked = int(body.get("max_tokens") or 16)
        count = asked if script.short is None else min(script.short, asked)
        prompt = body.get("prompt") if kind == "completions" else body["messages"][-1]["content"]
        prompt_tokens = len(str(prompt).split())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if kind == "chat":
            role = {
                "id": f"fake-{index}",
                "choices": [{"index": 0, "delta": {"role": "assistant"}}],
            }
            await response.write(f"data: {json.dumps(role)}\n\n".encode())
        if script.sequential:
            async with self._lock:
                await self._tokens(
                    response,
                    kind,
                    index=index,
                    count=count,
                    prompt=prompt_tokens,
                    t0=time.perf_counter(),
                )
        else:
            await self._tokens(
                response, kind, index=index, count=count, prompt=prompt_tokens, t0=arrival
            )
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
        final = {
            "prompt_tokens": prompt,
            "completion_tokens": count,
            "total_tokens": prompt + count,
        }
        if script.usage != "none":
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
    )
    return script, args.port


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the script on 127.0.0.1 until terminated."""
    script, port = script_from_args(argv)
    web.run_app(FakeServer(script).app, host="127.0.0.1", port=port, print=None)


if __name__ == "__main__":
    main()
