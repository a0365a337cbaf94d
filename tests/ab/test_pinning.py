"""A/B pinning: the sides' timed rounds share CPUs, their untimed work runs on all of them."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from benchmarks.ab.run import side_environment
from benchmarks.ab.sides import TURNSTILE, Side, turnstile_protocol
from benchmarks.ab.turnstile import (
    CPUS_VAR,
    PAIRS_VAR,
    PROTOCOL,
    SIDE_VAR,
    SOCKET_VAR,
    Pinning,
    pairs_from_env,
    with_rounds,
)

linux_only = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or not Path("/proc/self/task").is_dir(),
    reason="CPU affinity is Linux-only (os.sched_setaffinity, /proc/self/task)",
)


@linux_only
def test_pin_moves_every_thread_and_unpin_restores_them() -> None:
    """A thread started before pinning is moved too (torch's workers are such threads)."""
    allowed = frozenset(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs 2 CPUs to tell a pinned mask from the free one")
    target = frozenset({max(allowed)})
    started, stop = threading.Event(), threading.Event()
    native: list[int] = []

    def worker() -> None:
        native.append(threading.get_native_id())
        started.set()
        stop.wait(10)

    thread = threading.Thread(target=worker)
    thread.start()
    started.wait(10)
    pinning = Pinning(target)
    try:
        pinning.pin()
        assert os.sched_getaffinity(0) == target
        assert os.sched_getaffinity(native[0]) == target
        pinning.unpin()
        assert os.sched_getaffinity(0) == allowed
        assert os.sched_getaffinity(native[0]) == allowed
    finally:
        os.sched_setaffinity(0, allowed)
        stop.set()
        thread.join()


def test_pinning_reads_its_cpus_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset: nothing is pinned (pin/unpin are no-ops); a bad list is a usage error."""
    monkeypatch.delenv(CPUS_VAR, raising=False)
    assert Pinning.from_env().cpus is None
    Pinning.from_env().pin()  # a no-op, never an error
    if hasattr(os, "sched_getaffinity"):
        monkeypatch.setenv(CPUS_VAR, "0")
        assert Pinning.from_env().cpus == frozenset({0})
    monkeypatch.setenv(CPUS_VAR, "one")
    with pytest.raises(pytest.UsageError, match=CPUS_VAR):
        Pinning.from_env()


def test_interleaved_sides_get_the_cpus_and_process_level_sides_do_not(tmp_path: Path) -> None:
    """Interleaved, the turnstile pins the rounds; one side at a time, `run` pins the process
    and the turnstile is not loaded, so the variable is not set (nor leaked from outside)."""
    side = Side("head", "working tree", None, tmp_path, Path("python"), {"X": "1"}, {})
    env = side_environment(side, tmp_path / "sock", frozenset({3, 1}))
    assert (env[CPUS_VAR], env[SIDE_VAR], env["X"]) == ("1,3", "head", "1")
    os.environ[CPUS_VAR] = "0"
    try:
        alone = side_environment(side, None, frozenset({1}))
    finally:
        del os.environ[CPUS_VAR]
    assert CPUS_VAR not in alone
    assert SOCKET_VAR not in alone


def test_the_turnstile_protocol_is_read_from_the_apparatus_source(tmp_path: Path) -> None:
    """This tree's plugin speaks PROTOCOL; one without the line is the first release's (1)."""
    root = Path(__file__).resolve().parents[2]
    assert turnstile_protocol(root) == PROTOCOL == 2
    old = tmp_path / TURNSTILE
    old.parent.mkdir(parents=True)
    old.write_text('"""an A/B plugin"""\nSOCKET_VAR = "PHASEBENCH_AB_SOCKET"\n', encoding="utf-8")
    assert turnstile_protocol(tmp_path) == 1


def test_only_the_timed_rounds_get_the_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """PHASEBENCH_AB_PAIRS replaces the rounds pedantic is asked for, nothing else."""
    asked: list[dict[str, object]] = []

    def pedantic(target: object, **options: object) -> str:
        asked.append(options)
        return "result"

    assert with_rounds(pedantic, 100)(len, setup=None, rounds=2, warmup_rounds=0) == "result"
    assert asked == [{"setup": None, "rounds": 100, "warmup_rounds": 0}]
    monkeypatch.setenv(PAIRS_VAR, "40")
    assert pairs_from_env() == 40
    monkeypatch.setenv(PAIRS_VAR, "0")
    with pytest.raises(pytest.UsageError, match=PAIRS_VAR):
        pairs_from_env()
    monkeypatch.delenv(PAIRS_VAR)
    assert pairs_from_env() is None
