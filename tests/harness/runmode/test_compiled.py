"""torch.compile as a measurement (DESIGN §9) on CPU with a tiny model: compile cost recorded,
timed rounds at compiled shapes compile nothing, and a deliberate recompilation fails the cell.

Slow (inductor generates and builds C++ for the tiny model, ~20 s), so kept to one model test.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import load_model_spec
from benchmarks.harness.runmode.compiled import (
    CompiledInTimedRoundsError,
    DynamoCounts,
    TimedWindow,
    first_calls,
)
from benchmarks.harness.runmode.decide import build_cell_model

CPU = torch.device("cpu")


def test_compile_cost_then_quiet_timed_rounds_then_a_deliberate_recompilation_fails():
    cell = Cell("tiny-llama", "cpu", "float32", 1, 16, 4, 0, 1, 0, compile="default")
    engine = Engine(build_cell_model(load_model_spec("tiny-llama"), cell, CPU, torch.float32), CPU)
    prompt = make_prompt(1, 16, 256, seed=0)

    info = first_calls(engine, prompt, cell.new_tokens, cell.compile)
    assert info["compile_mode"] == "default"
    assert info["compile_s"] == pytest.approx(
        info["compile_prefill_first_call_s"] + info["compile_decode_first_call_s"]
    )
    # The first prefill and first decode step each compiled the forward for their shapes.
    assert info["compile_first_calls_frames"] >= 2
    assert info["compile_graphs"] >= 2
    assert info["compile_graph_breaks"] == 0  # the tiny Llama traces into whole graphs
    # Every graph of the first calls was either compiled now or found in inductor's disk cache.
    assert info["compile_fx_cache_hits"] + info["compile_fx_cache_misses"] >= 2

    prefill = engine.prefill(prompt)
    snapshot = engine.snapshot(prefill.cache)
    with TimedWindow(cell.id, cell.compile) as window:
        for _ in range(3):  # the decode measurement's rounds: context P every time
            engine.decode_step(prefill.next_token, engine.restore(snapshot), snapshot.seq_len)
    assert window.extra_info() == {
        "compile_timed_frames": 0,
        "compile_timed_graph_breaks": 0,
        "compile_timed_cudagraph_skips": 0,
    }
    window.check()

    # A batch of 2 was never compiled: dynamo's guards fail and it would recompile.
    with (
        pytest.raises(CompiledInTimedRoundsError, match=r"recompiled during the timed rounds"),
        TimedWindow(cell.id, cell.compile),
    ):
        engine.prefill(make_prompt(2, 16, 256, seed=0))


def test_a_frame_first_compiled_inside_the_window_fails_the_check():
    compiled = torch.compile(lambda x: torch.sin(x) + 1, backend="eager")
    with TimedWindow("cell", "default") as window:
        compiled(torch.ones(3))
    assert window.extra_info()["compile_timed_frames"] == 1
    with pytest.raises(CompiledInTimedRoundsError, match="compiled 1 frame"):
        window.check()


def test_eager_cells_record_nothing_and_never_fail():
    with TimedWindow("cell", "none") as window:
        torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2))
    assert window.extra_info() == {}
    window.check()
    assert first_calls(SimpleNamespace(device=CPU), torch.ones(1), 1, "none") == {}


def test_counts_are_differences_of_dynamo_counters():
    before = DynamoCounts.now()
    torch.compile(lambda x: x - 1, backend="eager")(torch.ones(4))
    added = DynamoCounts.now().since(before)
    assert (added.frames, added.graphs) == (1, 1)
