"""The timer and the synced-vs-unsynced check, on a fake device queue with a virtual clock."""

from __future__ import annotations

import pytest
import torch

from benchmarks.harness.doctor import timing
from benchmarks.harness.doctor.timing import TimerProbe


class FakeQueue:
    """A device whose ops take 1 ms each, launched in 10 us; `sync` waits for the queue."""

    def __init__(self, launch_s=10e-6, op_s=1e-3):
        self.now_s = 0.0
        self.done_at_s = 0.0
        self.launch_s, self.op_s = launch_s, op_s

    def clock(self):
        return self.now_s

    def work(self):
        self.now_s += self.launch_s
        self.done_at_s = max(self.done_at_s, self.now_s) + self.op_s

    def sync(self):
        self.now_s = max(self.now_s, self.done_at_s)

    def broken_sync(self):
        """A sync that returns at once: what the check exists to catch."""


def test_a_real_sync_makes_the_unsynced_time_much_shorter():
    queue = FakeQueue()
    busy = []
    timed = timing.time_sync(
        queue.work, queue.sync, clock=queue.clock, during=lambda: busy.append(queue.now_s)
    )
    assert timed.synced_s >= timing.SYNC_TARGET_S
    assert timed.unsynced_s < timed.synced_s / 10
    assert len(busy) == 1  # the busy clock is read once, while the queue still runs
    assert busy[0] < queue.done_at_s
    assert timing.judge_sync(torch.device("cuda", 0), timed).level == "ok"


def test_a_sync_that_does_not_wait_makes_the_machine_unfit():
    queue = FakeQueue()
    timed = timing.time_sync(queue.work, queue.broken_sync, clock=queue.clock)
    found = timing.judge_sync(torch.device("cuda", 0), timed)
    assert found.level == "bad"
    assert "sync does not wait" in found.message


def test_blocking_launches_make_the_machine_unfit_too():
    queue = FakeQueue(launch_s=1e-3, op_s=0.0)  # CUDA_LAUNCH_BLOCKING: launch = the whole op
    timed = timing.time_sync(queue.work, queue.sync, clock=queue.clock)
    assert timing.judge_sync(torch.device("mps"), timed).level == "bad"


def test_on_cpu_the_sync_check_is_skipped_and_says_why():
    found = timing.check_sync(torch.device("cpu"))
    assert found.level == "skip"
    assert "nothing is queued" in found.message


def test_a_coarse_timer_is_bad_a_slow_one_warns_and_this_machines_is_measured(tmp_path):
    source = tmp_path / "current_clocksource"
    source.write_text("jiffies\n")
    coarse = timing.check_timer(TimerProbe(tick_s=1e-3, read_s=50e-9), source)
    assert coarse.level == "bad"
    assert "clocksource jiffies" in coarse.message
    assert timing.check_timer(TimerProbe(tick_s=50e-9, read_s=2e-6), source).level == "warn"
    assert timing.check_timer(TimerProbe(tick_s=50e-9, read_s=50e-9), source).level == "ok"
    real = timing.probe_timer(reads=1000)
    assert 0 < real.tick_s < 1.0
    assert real.read_s > 0


def test_the_timer_probe_finds_the_tick_of_a_stepped_clock():
    ticks = iter(i // 4 * 1e-3 for i in range(100))  # a 1 ms clock read 4 times per tick
    assert timing.probe_timer(lambda: next(ticks), reads=100).tick_s == pytest.approx(1e-3)


def test_a_clock_that_never_moves_is_bad_and_its_json_has_no_infinity():
    stuck = timing.probe_timer(lambda: 1.0, reads=100)
    found = timing.check_timer(stuck)
    assert found.level == "bad"
    assert found.data["tick_s"] is None
