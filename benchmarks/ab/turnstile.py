"""pytest plugin of an A/B side: each timed round of a benchmark waits for its turn.

Loaded with `-p benchmarks.ab.turnstile` by `python -m benchmarks.ab`; it is
inert unless `PHASEBENCH_AB_SOCKET` (the coordinator's UNIX socket) and `PHASEBENCH_AB_SIDE`
(`base` or `head`) are set. It then

* connects at configure time and, after collection, sends the run's test order;
* replaces `benchmark.pedantic` of every test that uses the `benchmark` fixture with a version
  that announces the benchmark (`enter`), asks for a turn before every round (its `setup` runs
  inside the turn, so a cache restore happens while the other side waits), and says when its
  rounds are over (`leave`, also after an exception), so the coordinator can alternate the two
  sides' rounds (see `coordinator`). A `stop` answer (the benchmark has its pairs) ends the
  rounds early; what was timed so far is the benchmark's record.

What is timed does not change: pytest-benchmark's own timer still brackets only the target, and
each side writes ordinary pytest-benchmark JSON. Waiting happens in `setup`, outside the timed
region. A benchmark the coordinator lets run `alone` calls the original `pedantic` untouched.

With `PHASEBENCH_AB_PAIRS` set, every benchmark's `pedantic` is asked for that many timed
rounds instead of the matrix's `rounds` (also when running without a coordinator, one side
after the other): only the timed rounds get the pairs, while whatever else the suite derives
from `rounds` stays as in a plain run.

With `PHASEBENCH_AB_CPUS` set (`--cpus`, Linux), every thread of the side is pinned to those
CPUs for a benchmark's timed rounds only, and let free again when they are over: the two sides'
timed rounds share the same cores (other work there hits both alike), while their untimed work
(model builds, torch.compile, warmups, checks) runs side by side on all the machine's cores.

It deliberately does not decide anything; the coordinator does.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

SOCKET_VAR = "PHASEBENCH_AB_SOCKET"
SIDE_VAR = "PHASEBENCH_AB_SIDE"
CPUS_VAR = "PHASEBENCH_AB_CPUS"  # e.g. "1" or "2,3": where the timed rounds run
PAIRS_VAR = "PHASEBENCH_AB_PAIRS"  # the timed rounds of every benchmark (the most pairs)
# The turn protocol, read from this file's text by `sides.turnstile_protocol` (keep the line's
# form): 2 understands "stop" and pins the timed rounds itself; 1 (no line) did neither.
PROTOCOL = 2
_CLIENT = pytest.StashKey["TurnClient"]()
_PAIRS = pytest.StashKey[int]()


class TurnstileError(RuntimeError):
    """The coordinator went away or answered something unexpected."""


class _Enough(Exception):  # noqa: N818 - a signal, not an error: the coordinator said "stop"
    """Raised from a round's setup to end `pedantic` early; the rounds so far are kept."""


class TurnClient:
    """One side's connection to the coordinator: send a line, optionally wait for the reply."""

    def __init__(self, path: str, side: str, pinning: Pinning | None = None) -> None:
        self.side = side
        self.pinning = pinning if pinning is not None else Pinning(None)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.connect(path)
        self._lines = self._socket.makefile("r", encoding="utf-8")
        self.send({"op": "hello", "side": side, "pid": os.getpid()})

    def send(self, message: dict[str, Any]) -> None:
        """Send one message without waiting."""
        self._socket.sendall((json.dumps(message) + "\n").encode())

    def ask(self, message: dict[str, Any], *expected: str) -> str:
        """Send one message and block until the coordinator answers; return the answer's op."""
        self.send(message)
        line = self._lines.readline()
        if not line:
            raise TurnstileError(f"A/B coordinator closed the connection ({self.side} side)")
        op = str(json.loads(line).get("op"))
        if op not in expected:
            raise TurnstileError(f"A/B coordinator answered {op!r}, expected one of {expected}")
        return op

    def close(self) -> None:
        """Close the connection (the coordinator then treats this side as gone)."""
        self._lines.close()
        self._socket.close()


class Pinning:
    """Moves every thread of this process onto the rounds' CPUs and back (Linux only)."""

    def __init__(self, cpus: frozenset[int] | None) -> None:
        self.cpus = cpus
        self.free = frozenset(os.sched_getaffinity(0)) if cpus is not None else None

    @classmethod
    def from_env(cls) -> Pinning:
        """The CPUs of `PHASEBENCH_AB_CPUS`; nothing is pinned when it is unset or empty."""
        raw = os.environ.get(CPUS_VAR, "").strip()
        if not raw:
            return cls(None)
        try:
            return cls(frozenset(int(part) for part in raw.split(",")))
        except ValueError:
            raise pytest.UsageError(f"{CPUS_VAR}={raw!r}: use CPU numbers, e.g. 1 or 2,3") from None

    def pin(self) -> None:
        """Every thread onto the rounds' CPUs (threads started later inherit it from theirs)."""
        if self.cpus is not None:
            _set_all_threads(self.cpus)

    def unpin(self) -> None:
        """Every thread back onto the CPUs the process started with."""
        if self.free is not None:
            _set_all_threads(self.free)

    def __enter__(self) -> Pinning:
        self.pin()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unpin()


def _set_all_threads(cpus: frozenset[int]) -> None:
    # sched_setaffinity(0, ...) moves the calling thread only; torch's worker threads are
    # separate tasks of the process.
    try:
        tasks = [int(entry.name) for entry in Path("/proc/self/task").iterdir()]
    except OSError:
        tasks = [0]
    for task in tasks:
        with contextlib.suppress(OSError):  # a thread that ended since the listing
            os.sched_setaffinity(task, cpus)


def pairs_from_env() -> int | None:
    """`PHASEBENCH_AB_PAIRS` as a count of rounds; None when unset or empty."""
    raw = os.environ.get(PAIRS_VAR, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise pytest.UsageError(f"{PAIRS_VAR}={raw!r}: use a positive number of rounds")
    return int(raw)


def pytest_configure(config: pytest.Config) -> None:
    """Connect to the coordinator when this pytest process is an A/B side."""
    pairs = pairs_from_env()
    if pairs is not None:  # also a side running alone (process-level interleaving)
        config.stash[_PAIRS] = pairs
    path, side = os.environ.get(SOCKET_VAR), os.environ.get(SIDE_VAR)
    if not path or not side:
        return
    if side not in ("base", "head"):
        raise pytest.UsageError(f"{SIDE_VAR}={side!r}: use base or head")
    config.stash[_CLIENT] = TurnClient(path, side, Pinning.from_env())


def pytest_collection_finish(session: pytest.Session) -> None:
    """Tell the coordinator the order this side will run its tests in."""
    client = session.config.stash.get(_CLIENT, None)
    if client is not None:
        client.send({"op": "plan", "keys": [item.nodeid for item in session.items]})


def pytest_unconfigure(config: pytest.Config) -> None:
    """Disconnect: the coordinator stops waiting for this side."""
    client = config.stash.get(_CLIENT, None)
    if client is not None:
        client.close()


def turn_taking(
    pedantic: Callable[..., Any], client: TurnClient, key: str, fixture: Any
) -> Callable[..., Any]:
    """`pedantic` whose every round (warmup rounds included) first waits for its turn.

    `fixture` is the pytest-benchmark fixture `pedantic` belongs to: a `stop` clears the error
    flag pytest-benchmark sets on any exception out of `pedantic`, which would drop the record.
    """

    # Options by keyword, as the suite's modules pass them (pytest-benchmark's own order).
    def wrapped(
        target: Callable[..., Any],
        *,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        setup: Callable[[], Any] | None = None,
        rounds: int = 1,
        warmup_rounds: int = 0,
        iterations: int = 1,
        **more: Any,
    ) -> Any:
        call = {"args": args, "kwargs": kwargs, "rounds": rounds}
        call.update({"warmup_rounds": warmup_rounds, "iterations": iterations, **more})
        # iterations > 1 forbids a setup function (pytest-benchmark): such a benchmark runs alone.
        if iterations > 1:
            return pedantic(target, setup=setup, **call)
        total = warmup_rounds + rounds
        if client.ask({"op": "enter", "key": key, "rounds": total}, "paired", "alone") == "alone":
            with client.pinning:
                return pedantic(target, setup=setup, **call)
        counter: Iterator[int] = iter(range(1 << 30))

        def setup_in_turn() -> Any:
            if client.ask({"op": "turn", "round": next(counter)}, "go", "stop") == "stop":
                raise _Enough
            return None if setup is None else setup()

        with client.pinning:
            try:
                return pedantic(target, setup=setup_in_turn, **call)
            except _Enough:
                # pytest-benchmark adds each round to the benchmark's stats as it ends, so the
                # rounds timed so far are the record once the error flag the exception set is
                # cleared (tests/ab/test_e2e.py checks both); the suite ignores the result.
                fixture.has_error = False
                return None
            finally:
                client.ask({"op": "leave"}, "release")  # before unpinning: both leave together

    return wrapped


@pytest.fixture(autouse=True)
def _phasebench_ab_turns(request: pytest.FixtureRequest) -> None:
    """Make this test's `benchmark.pedantic` take turns and time the pairs (A/B sides only)."""
    client = request.config.stash.get(_CLIENT, None)
    pairs = request.config.stash.get(_PAIRS, None)
    if (client is None and pairs is None) or "benchmark" not in request.fixturenames:
        return
    benchmark = request.getfixturevalue("benchmark")
    if getattr(benchmark, "disabled", False):
        return  # --benchmark-disable: nothing is timed, nothing to alternate
    pedantic = benchmark.pedantic
    if client is not None:
        pedantic = turn_taking(pedantic, client, request.node.nodeid, benchmark)
    if pairs is not None:  # outermost: the turns announce the pairs, not the matrix's rounds
        pedantic = with_rounds(pedantic, pairs)
    benchmark.pedantic = pedantic


def with_rounds(pedantic: Callable[..., Any], rounds: int) -> Callable[..., Any]:
    """`pedantic` asked for `rounds` timed rounds whatever its caller asked."""

    def wrapped(target: Callable[..., Any], **options: Any) -> Any:
        options["rounds"] = rounds
        return pedantic(target, **options)

    return wrapped
