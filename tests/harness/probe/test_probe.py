"""benchmarks.harness.probe: the host probes are fixed, code-independent, synchronized kernels,
sized past the last-level cache, that leave nothing allocated; and the suite's schedule and
records (benchmarks/suite/hostprobe.py) with a fake clock and fake kernels."""

from __future__ import annotations

import pytest
import torch

from benchmarks.harness.device.cpustate import last_level_cache
from benchmarks.harness.probe import kernels as probe_kernels
from benchmarks.harness.probe.kernels import MIN_COPY_BYTES, ProbeKernel, copy_bytes_cpu
from benchmarks.harness.probe.timing import CALLS, time_calls, time_point
from benchmarks.suite.hostprobe import MAX_SHARE, MIN_GAP_S, ProbeLog


def test_the_cpu_probes_copy_past_the_last_level_cache_and_run_a_fixed_gemm():
    found = probe_kernels.kernels(torch.device("cpu"))
    assert [k.kind for k in found] == ["memory", "compute"]
    llc = last_level_cache()
    nbytes = copy_bytes_cpu()
    assert nbytes >= min(MIN_COPY_BYTES, nbytes)  # capped only by free memory
    if llc is not None:
        assert nbytes >= min(2 * llc.total_bytes, nbytes)
    for kernel in found:
        calls = time_calls(kernel)
        assert len(calls) == CALLS
        assert all(c > 0 for c in calls)


def test_an_accelerator_adds_its_own_probes_named_by_its_type():
    # nothing is allocated until a point is taken: the list is what a CUDA run would time
    kinds = [k.kind for k in probe_kernels.kernels(torch.device("cuda"))]
    assert kinds == ["memory", "compute", "cuda-memory", "cuda-compute"]


def test_a_point_is_the_median_of_synchronized_calls_after_a_warm_one():
    calls: list[int] = []

    def prepare():
        def call() -> None:
            calls.append(1)

        return call

    kernel = ProbeKernel("fake", torch.device("cpu"), "a fake", prepare)
    assert time_point(kernel, 5) >= 0.0
    assert len(calls) == 6  # one untimed, five timed


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _log(clock: _Clock) -> ProbeLog:
    def prepare():
        def call() -> None:
            clock.now += 0.1  # each call of a probe costs 0.1 s of the run

        return call

    kernel = ProbeKernel("memory", torch.device("cpu"), "fake", prepare)
    return ProbeLog([kernel], threads=torch.get_num_threads(), clock=clock, started=0.0)


def test_points_come_at_the_start_then_when_due_and_the_records_carry_them():
    clock = _Clock()
    log = _log(clock)
    assert log.due()  # the start
    log.probe("start")
    clock.now += MIN_GAP_S / 2
    assert not log.due()  # too soon
    clock.now += MIN_GAP_S
    assert log.due()
    log.probe("before t")
    # between tests, the probes' cost stays within MAX_SHARE of the run: one untimed call and
    # CALLS timed ones of 0.1 s each
    cost = 0.1 * (CALLS + 1)
    assert log.cost_s == pytest.approx(cost)
    clock.now = cost / MAX_SHARE - 0.5
    assert clock.now - log.points[-1].session_s > MIN_GAP_S  # due by the gap ...
    assert not log.due()  # ... but the probes took more than MAX_SHARE of the run so far
    clock.now = cost / MAX_SHARE + 0.01
    assert log.due()
    (record,) = log.records()
    assert record["extra_info"]["host_probe"] == "memory"
    # a kernel given to the log runs in this process (the suite gives it the accelerator's)
    assert record["extra_info"]["process"] == "in-run"
    assert record["extra_info"]["dtype"] == "float32"
    assert record["extra_info"]["threads"] == torch.get_num_threads()
    assert [p["at"] for p in record["extra_info"]["points"]] == ["start", "before t"]
    assert record["stats"]["rounds"] == 2
    assert len(record["stats"]["data"]) == 2
    assert all(len(p["calls_s"]) == CALLS for p in record["extra_info"]["points"])
