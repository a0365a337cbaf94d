"""One start cache per cell, shared by its modules (issue 30, row 5). The suite runs a cell's
measurements one after another (`collect.py`: cell by cell) and `configure_engine` runs for
each; a new static cache per module gave compiled graphs new addresses (CUDA graphs re-record)
and, where the cache is an `nn.Module` (transformers 4.4x), an identity guard that recompiles.
"""

from __future__ import annotations

import torch
import torch._dynamo

from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import load_model_spec
from benchmarks.harness.runmode.compiled import TimedWindow, compile_model
from benchmarks.harness.runmode.decide import build_cell_model, configure_engine

CPU = torch.device("cpu")


def _cell(prompt_len: int = 16) -> Cell:
    return Cell("tiny-llama", "cpu", "float32", 1, prompt_len, 4, 0, 1, 0, cache="static")


def test_the_modules_of_one_cell_share_its_static_cache_and_the_next_cell_gets_its_own() -> None:
    cell = _cell()
    engine = Engine(build_cell_model(load_model_spec("tiny-llama"), cell, CPU, torch.float32), CPU)
    configure_engine(engine, cell)  # test_prefill
    first = engine.start_cache_for(1)
    configure_engine(engine, cell)  # test_decode, then test_generate: the same cell
    assert engine.start_cache_for(1) is first
    configure_engine(engine, _cell(prompt_len=8))  # the next cell: other positions
    assert engine.start_cache_for(1) is not first


def test_a_compiled_cells_second_module_compiles_nothing() -> None:
    """On torch 2.13 this held with a cache per module too (no identity guard on it); it keeps
    the next torch honest, and CUDA graphs' re-records are the self-check's (`doctor`)."""
    cell = _cell()
    model = build_cell_model(load_model_spec("tiny-llama"), cell, CPU, torch.float32)
    compile_model(model, "default", backend="eager")
    engine = Engine(model, CPU)
    prompt = make_prompt(1, 16, 256, seed=0)
    torch._dynamo.reset()
    configure_engine(engine, cell)  # the first module: the warmup compiles every shape
    engine.generate(prompt, cell.new_tokens)
    configure_engine(engine, cell)  # the second module of the same cell
    with TimedWindow(cell.id, "default") as window:  # its warm round and timed rounds
        engine.generate(prompt, cell.new_tokens)
    assert window.extra_info() == {
        "compile_timed_frames": 0,
        "compile_timed_graph_breaks": 0,
        "compile_timed_cudagraph_skips": 0,
    }
    window.check()
