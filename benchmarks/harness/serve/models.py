"""`GET /v1/models`: the model ids an OpenAI-compatible server lists (the `url` cells' first
question, and a server's liveness between passes).

`list_models(base_url, timeout_s)` raises ServeError with one line naming the URL, whatever went
wrong: nothing answers (refused, an unknown host), no answer in time, an HTTP error, or an answer
that is not an OpenAI model list. Never through a proxy (`trust_env=False`): the servers
measured are on the loopback or named by the user.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping

from benchmarks.harness.errors import ServeError

_BODY_CHARS = 200
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError)  # distinct classes before Python 3.11


async def _models(base_url: str, timeout_s: float) -> list[str]:
    import aiohttp  # noqa: PLC0415 - the `serve` group is optional; `pytest benchmarks` imports us

    url = base_url + "/v1/models"
    check = "is the server running? check --serve-url"
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        # trust_env=False: no proxy from the environment (run_pass).
        async with (
            aiohttp.ClientSession(timeout=timeout, trust_env=False) as session,
            session.get(url) as response,
        ):
            if response.status != 200:
                raise ServeError(
                    f"{url} answered HTTP {response.status}: is this an OpenAI-compatible "
                    "server? (check --serve-url, or the server's log)"
                )
            text = await response.text(errors="replace")
    except _TIMEOUTS:
        raise ServeError(f"{url} did not answer within {timeout_s:g} s: {check}") from None
    except aiohttp.ClientConnectorDNSError:
        raise ServeError(f"nothing answers at {url} (host name not resolved): {check}") from None
    except aiohttp.ClientConnectorError:
        raise ServeError(f"nothing answers at {url} (connection refused): {check}") from None
    except aiohttp.ClientError as error:
        why = f"{type(error).__name__}: {error}"
        raise ServeError(f"nothing answers at {url} ({why}): {check}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        document = None
    data = document.get("data") if isinstance(document, Mapping) else None
    if not isinstance(data, list):
        raise ServeError(
            f"{url} did not answer an OpenAI model list (a `data` list) but "
            f"{text[:_BODY_CHARS]!r}: is this an OpenAI-compatible server? check --serve-url"
        )
    return [str(m["id"]) for m in data if isinstance(m, Mapping) and "id" in m]


def list_models(base_url: str, timeout_s: float = 5.0) -> list[str]:
    """The model ids `GET /v1/models` lists; ServeError, one line naming the URL, when nothing
    answers in `timeout_s` or the answer is not an OpenAI model list."""
    return asyncio.run(_models(base_url, timeout_s))
