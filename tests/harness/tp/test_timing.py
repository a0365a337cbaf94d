"""The timing protocol of a tensor-parallel round, on fakes and on a one-rank gloo group.

Every rank runs `[sync] barrier sync t0 call sync t1`, then gathers every rank's `t1 - t0`
outside the timed region; the round's time is the slowest rank's; with NCCL the device is
drained before the barrier too (timing.py's docstring says why).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from benchmarks.harness.tp.timing import (
    RoundTime,
    TorchGroup,
    round_max,
    sync_before_barrier,
    threads_per_rank,
    timed_round,
)


class RecordingGroup:
    """One rank's group: records barrier/gather into a shared event log; the other ranks'
    times are given, this rank's is what `timed_round` passes to the gather."""

    def __init__(self, log: list[str], others: dict[int, float], rank: int = 0) -> None:
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

    def gather_floats(self, value: float) -> list[float]:
        self.log.append("gather")
        return [value if r == self._rank else self.others[r] for r in range(self.world)]


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


def _recorded_round(*, sync_first: bool, call_s: float = 0.25) -> tuple[list[str], RoundTime]:
    log: list[str] = []
    clock = Clock(log)

    def call() -> str:
        log.append("call")
        clock.advance(call_s)
        return "token"

    result, round_time = timed_round(
        call,
        RecordingGroup(log, {1: 0.5, 2: 0.125}),
        lambda: log.append("sync"),
        clock=clock,
        sync_first=sync_first,
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


def test_the_round_time_is_the_max_over_ranks_and_names_the_slowest() -> None:
    _, round_time = _recorded_round(sync_first=False, call_s=0.25)
    assert round_time.rank_s == (0.25, 0.5, 0.125)  # this rank's own t1 - t0 at index 0
    assert round_time.max_s == 0.5
    assert round_time.slowest_rank == 1
    assert RoundTime((0.3, 0.3)).slowest_rank == 0  # a tie names the lowest rank
    assert round_max([round_time, RoundTime((0.1, 0.2))]) == [0.5, 0.2]


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
        self._slots: list[float] = [0.0] * world

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

    def gather_floats(self, value: float) -> list[float]:
        self._ranks._slots[self._rank] = value
        self._ranks._barrier.wait()  # every slot written
        out = list(self._ranks._slots)
        self._ranks._barrier.wait()  # every rank read before the next round writes
        return out


def test_every_rank_sees_the_same_round_whose_time_is_the_slowest_ranks() -> None:
    costs = {0: 0.010, 1: 0.030}  # rank 1's shard is slower
    ranks = ThreadRanks(2)
    seen: dict[int, list[RoundTime]] = {}
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        clock = Clock([], start=1000.0 * rank)  # unrelated clocks: only differences count

        def call() -> None:
            clock.advance(costs[rank])

        try:
            seen[rank] = [
                timed_round(call, ranks.group(rank), lambda: None, clock=clock)[1] for _ in range(3)
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
    assert [r.max_s for r in seen[0]] == pytest.approx([0.030] * 3)
    assert [r.slowest_rank for r in seen[0]] == [1, 1, 1]
    assert [r.rank_s for r in seen[0]] == [pytest.approx((0.010, 0.030))] * 3


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
        assert round_time.max_s >= 0.0
        assert group.gather_objects({"a": 1}) == [{"a": 1}]
    finally:
        torch.distributed.destroy_process_group()
