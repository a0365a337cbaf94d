"""A `FakeServer` (or any aiohttp app) running on its own event loop in a thread, for the
client's tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from benchmarks.harness.serve.fake import RUNNER_OPTIONS, FakeServer, Script


@contextmanager
def serve_app(app: web.Application) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 (a free port) until the block ends; yields the base URL."""
    loop = asyncio.new_event_loop()
    holder: dict[str, object] = {}

    async def start() -> None:
        # As the fake's own process does: a hung handler is cancelled when its client leaves.
        runner = web.AppRunner(app, **RUNNER_OPTIONS)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"] = runner
        holder["port"] = runner.addresses[0][1]

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    try:
        yield f"http://127.0.0.1:{holder['port']}"
    finally:
        runner = holder["runner"]
        assert isinstance(runner, web.AppRunner)
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextmanager
def fake_server(script: Script) -> Iterator[str]:
    """Serve `script` on 127.0.0.1 (a free port) until the block ends; yields the base URL."""
    with serve_app(FakeServer(script).app) as url:
        yield url
