"""Spec of the process state around `benchmarks.suite.rounds.Rounds`' timed rounds.

Each benchmark's rounds run in the pinned floating-point state (FTZ/DAZ off) whatever ran before,
record what they ran with and how busy the rest of the machine was, and leave the pinned state
behind: a cell that turned flush-to-zero on (as a `-ffast-math` library does when torch.compile
loads it) must not speed up the cells after it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from benchmarks.harness.device import cpustate
from benchmarks.harness.device.fpstate import FpState, read_fp_state
from benchmarks.suite.rounds import Rounds
from tests.suite.test_rounds import FakeBenchmark

OFF = FpState(flush_to_zero=False, denormals_are_zero=False)


@pytest.fixture(autouse=True)
def restore_fp_state() -> Iterator[None]:
    yield
    torch.set_flush_denormal(False)


def test_rounds_after_a_cell_that_left_flush_to_zero_on_run_with_it_off():
    torch.set_flush_denormal(True)  # what an earlier compiled cell may leave behind
    seen: list[FpState] = []
    bench = FakeBenchmark()
    Rounds(lambda _: seen.append(read_fp_state())).pedantic(bench, rounds=2)
    assert seen == [OFF, OFF, OFF]  # the untimed warm round and both timed rounds
    assert bench.extra_info["flush_denormal"] is False


def test_a_cell_that_turns_flush_to_zero_on_in_its_rounds_leaves_it_off_and_says_so():
    bench = FakeBenchmark()
    Rounds(lambda _: torch.set_flush_denormal(True)).pedantic(bench, rounds=1)
    assert read_fp_state() == OFF  # nothing leaks to the next cell
    assert bench.extra_info["flush_denormal"] is True  # the record names what the rounds did


def test_other_processes_cpu_use_during_the_rounds_is_recorded_in_percent_of_the_machine(
    monkeypatch: pytest.MonkeyPatch,
):
    # 4 CPUs; over 2 s of rounds (8 CPU-s) the machine was idle 3 CPU-s, so busy 5, 1 of them
    # this process's: others used 4 CPU-s / (2 s x 4 CPUs) = 50 % of the machine.
    clock = iter([0.0, 2.0])
    idle = iter([100.0, 103.0])
    own = iter([10.0, 11.0])
    meter = cpustate.CpuUseMeter(
        cpus=[0, 1, 2, 3],
        idle_s=lambda _cpus: next(idle),
        own_s=lambda: next(own),
        clock=lambda: next(clock),
    )
    monkeypatch.setattr(cpustate, "machine_cpus", lambda: [0, 1, 2, 3])
    monkeypatch.setattr(cpustate, "CpuUseMeter", lambda **_: meter)
    bench = FakeBenchmark()
    Rounds(lambda _: None).pedantic(bench, rounds=3)
    assert bench.extra_info["other_cpu_pct"] == pytest.approx(50.0)
    assert bench.extra_info["others_cores"] == pytest.approx(2.0)
