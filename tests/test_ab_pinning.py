"""A/B pinning: the sides' timed rounds share CPUs, their untimed work runs on all of them."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from benchmarks.harness.ab.run import side_environment
from benchmarks.harness.ab.sides import Side
from benchmarks.harness.ab.turnstile import CPUS_VAR, SIDE_VAR, SOCKET_VAR, Pinning

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
