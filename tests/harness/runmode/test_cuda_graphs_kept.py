"""CUDA graphs must hold from the first calls through the warmup and the timed rounds (issue 30,
row 4): a later fallback (a mutated input, the re-record limit) counted in
`counters["inductor"]["cudagraph_skips"]` fails the cell, so eager code is never timed under a
`reduce-overhead` label. Fakes of the counter and of torch's own skip logger: no CUDA here.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

from benchmarks.harness.runmode.compiled import CudaGraphsSkippedError, cuda_graphs_kept
from benchmarks.suite.rounds import Rounds
from tests.suite.test_rounds import FakeBenchmark


def _silent_skip() -> None:
    counters["inductor"]["cudagraph_skips"] += 1


def test_a_skip_counted_in_the_block_fails_it_naming_where() -> None:
    with (
        pytest.raises(CudaGraphsSkippedError, match=r"skipped 1 time\(s\) in the warmup"),
        cuda_graphs_kept(True, "reduce-overhead", "warmup"),
    ):
        _silent_skip()


def test_a_skip_torch_logs_raises_its_reason_inside_the_block() -> None:
    with (
        pytest.raises(CudaGraphsSkippedError, match="mutated inputs"),
        cuda_graphs_kept(True, "reduce-overhead", "timed rounds"),
    ):
        log_cudagraph_skip_and_bump_counter(
            "skipping cudagraphs due to mutated inputs (1 instance)"
        )


def test_without_cuda_graphs_a_counted_skip_is_no_failure() -> None:
    with cuda_graphs_kept(False, "default", "warmup"):  # a CPU graph is counted silently
        _silent_skip()


def _record(graphs: bool) -> FakeBenchmark:
    benchmark = FakeBenchmark()
    benchmark.extra_info.update(
        {"cell_id": "c", "compile_mode": "reduce-overhead", "compile_cuda_graphs": graphs}
    )
    return benchmark


def test_a_fallback_during_the_timed_rounds_fails_the_cell() -> None:
    calls = {"n": 0}

    def step(_state: object) -> None:
        calls["n"] += 1
        if calls["n"] == 3:  # the second timed round: after the first calls and the warmup
            _silent_skip()

    with pytest.raises(CudaGraphsSkippedError, match="in the timed rounds"):
        Rounds(step, lambda: None, None).pedantic(_record(graphs=True), rounds=3)
    calls["n"] = 0
    info = _record(graphs=False)
    Rounds(step, lambda: None, None).pedantic(info, rounds=3)  # no CUDA graphs: nothing to keep
    assert info.extra_info["compile_timed_cudagraph_skips"] == 1  # still on record


def test_rounds_that_keep_their_graphs_record_zero_skips() -> None:
    info = _record(graphs=True)
    Rounds(lambda _state: torch.zeros(1), lambda: None, None).pedantic(info, rounds=2)
    assert info.extra_info["compile_timed_cudagraph_skips"] == 0
