"""The timing protocol of a tensor-parallel round, on fakes and on a one-rank gloo group.

Every rank runs `[sync] barrier sync t0 call sync t1`, then gathers every rank's (t0, t1)
outside the timed region; the round's time is max(t1) - min(t0) on one clock (the processes of
a host share `time.perf_counter`: checked across two processes below); with NCCL the device is
drained before the barrier too (timing.py's docstring says why).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from benchmarks.harness.tp.timing import (
    RoundTime,
    TorchGroup,
    clock_domain,
    round_walls,
    same_clock,
    sync_before_barrier,
    threads_per_rank,
    timed_round,
)


class RecordingGroup:
    """One rank's group: records barrier/gather into a shared event log; the other ranks'
    (t0, t1) are given, this rank's is what `timed_round` passes to the gather."""

    def __init__(
        self, log: list[str], others: dict[int, tuple[float, float]], rank: int = 0
    ) -> None:
        self.log = log
        self.others = others
        self._rank = rank

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world(self) -> int:
        return len(self.others) + 1

    def barrier(self) -> None:
        self.log.append("barrier")

    def gather_times(self, t0: float, t1: float) -> list[tuple[float, float]]:
        self.log.append("gather")
        return [(t0, t1) if r == self._rank else self.others[r] for r in range(self.world)]


class Clock:
    """A fake clock: each read is logged; `advance` is what the timed call costs."""

    def __init__(self, log: list[str], start: float = 100.0) -> None:
        self.log = log
        self.now = start

    def __call__(self) -> float:
        self.log.append("clock")
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# The other ranks' (t0, t1) on the shared clock; this rank (0) starts at 100.0 (`Clock`).
OTHERS = {1: (100.125, 100.625), 2: (100.0625, 100.1875)}


def _recorded_round(
    *, sync_first: bool, call_s: float = 0.25, one_clock: bool = True
) -> tuple[list[str], RoundTime]:
    log: list[str] = []
    clock = Clock(log)

    def call() -> str:
        log.append("call")
        clock.advance(call_s)
        return "token"

    result, round_time = timed_round(
        call,
        RecordingGroup(log, OTHERS),
        lambda: log.append("sync"),
        clock=clock,
        sync_first=sync_first,
        one_clock=one_clock,
    )
    assert result == "token"
    return log, round_time


def test_gloo_order_is_barrier_sync_t0_call_sync_t1_then_the_gather() -> None:
    log, _ = _recorded_round(sync_first=False)
    assert log == ["barrier", "sync", "clock", "call", "sync", "clock", "gather"]


def test_nccl_syncs_the_device_before_the_barrier_too() -> None:
    assert sync_before_barrier("nccl") is True
    assert sync_before_barrier("gloo") is False
    log, _ = _recorded_round(sync_first=sync_before_barrier("nccl"))
    assert log == ["sync", "barrier", "sync", "clock", "call", "sync", "clock", "gather"]


def test_the_round_time_is_the_first_start_to_the_last_end_on_one_clock() -> None:
    _, round_time = _recorded_round(sync_first=False, call_s=0.25)
    assert round_time.t0_s == (100.0, 100.125, 100.0625)  # this rank's own at index 0
    assert round_time.t1_s == (100.25, 100.625, 100.1875)
    assert round_time.rank_s == (0.25, 0.5, 0.125)  # each rank's own t1 - t0: per-rank figures
    assert round_time.wall_s == 0.625  # max(t1) - min(t0), not the largest own time (0.5)
    assert round_time.start_skew_s == 0.125  # rank 1 left the barrier 125 ms after rank 0
    assert round_walls([round_time, RoundTime((0.0, 0.5), (1.0, 1.01))]) == [0.625, 1.01]


def test_a_late_rank_that_finishes_last_is_in_the_round_not_hidden_by_its_short_own_time() -> None:
    # Barrier-exit skew: rank 1 leaves the barrier 0.5 s late, its collective no longer waits,
    # and it finishes last. The step took 1.01 s; the largest own t1 - t0 says 1.0.
    late = RoundTime(t0_s=(0.0, 0.5), t1_s=(1.0, 1.01))
    assert max(late.rank_s) == 1.0
    assert late.wall_s == 1.01


def test_across_hosts_the_round_is_the_largest_ranks_own_time_and_no_skew() -> None:
    _, round_time = _recorded_round(sync_first=False, call_s=0.25, one_clock=False)
    assert round_time.wall_s == 0.5  # per rank: the clocks cannot be compared
    assert round_time.start_skew_s is None


def _child_reads(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


@pytest.mark.parametrize("clock", ["perf_counter", "monotonic"])
def test_the_processes_of_a_host_read_one_clock(clock: str) -> None:
    """Two processes: the child's reading lies between the parent's before and after, so they
    read one clock (a per-process clock would start near 0 in the child). Clock seconds since
    boot here, so a per-process start would be far outside the window."""
    read = getattr(time, clock)
    before = read()
    child = float(_child_reads(f"import time; print(repr(time.{clock}()))"))
    after = read()
    info = time.get_clock_info(clock)
    assert before < child < after, f"{clock} ({info.implementation}) is not shared"
    assert after - before < 60


def test_the_processes_of_a_host_name_the_same_clock_domain() -> None:
    code = "from benchmarks.harness.tp.timing import clock_domain; print(clock_domain())"
    assert _child_reads(code) == clock_domain()


def test_a_failing_call_raises_on_its_rank_before_the_gather() -> None:
    log: list[str] = []

    def call() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        timed_round(call, RecordingGroup(log, {1: 0.1}), lambda: log.append("sync"))
    assert "gather" not in log  # its peers then block until the launcher ends the group


class ThreadRanks:
    """`world` ranks as threads: a real barrier and an all-gather through shared slots."""

    def __init__(self, world: int) -> None:
        self.world_size = world
        self._barrier = threading.Barrier(world, timeout=10)
        self._slots: list[tuple[float, float]] = [(0.0, 0.0)] * world

    def group(self, rank: int) -> ThreadGroup:
        return ThreadGroup(self, rank)


class ThreadGroup:
    def __init__(self, ranks: ThreadRanks, rank: int) -> None:
        self._ranks = ranks
        self._rank = rank

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world(self) -> int:
        return self._ranks.world_size

    def barrier(self) -> None:
        self._ranks._barrier.wait()

    def gather_times(self, t0: float, t1: float) -> list[tuple[float, float]]:
        self._ranks._slots[self._rank] = (t0, t1)
        self._ranks._barrier.wait()  # every slot written
        out = list(self._ranks._slots)
        self._ranks._barrier.wait()  # every rank read before the next round writes
        return out


def test_every_rank_sees_the_same_round_timed_on_the_one_clock_they_share() -> None:
    costs = {0: 0.010, 1: 0.030}  # rank 1's shard is slower (real sleeps, real perf_counter)
    ranks = ThreadRanks(2)
    seen: dict[int, list[RoundTime]] = {}
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            seen[rank] = [
                timed_round(lambda: time.sleep(costs[rank]), ranks.group(rank), lambda: None)[1]
                for _ in range(3)
            ]
        except BaseException as error:  # surfaced below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert errors == []
    assert seen[0] == seen[1]
    for round_time in seen[0]:
        assert round_time.wall_s >= 0.030  # the slower shard's sleep at least
        assert round_time.wall_s >= max(round_time.rank_s)  # first start to last end
        assert round_time.start_skew_s == max(round_time.t0_s) - min(round_time.t0_s)


@pytest.mark.parametrize(
    ("cores", "world", "threads"), [(2, 2, 1), (16, 4, 4), (15, 4, 3), (2, 4, 0), (8, 0, 0)]
)
def test_threads_per_rank_share_the_cores(cores: int, world: int, threads: int) -> None:
    assert threads_per_rank(cores, world) == threads


def test_torch_group_on_a_one_rank_gloo_group(tmp_path: Path) -> None:
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        group = TorchGroup()
        assert (group.rank, group.world) == (0, 1)
        result, round_time = timed_round(lambda: 7, group, lambda: None)
        assert result == 7
        assert len(round_time.rank_s) == 1
        assert round_time.wall_s == round_time.rank_s[0] >= 0.0
        assert group.gather_objects({"a": 1}) == [{"a": 1}]
        assert same_clock(group) is True
    finally:
        torch.distributed.destroy_process_group()
