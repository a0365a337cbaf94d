"""The CUDA-graph probe's counting on this CPU: the suite's path (configure_engine, first_calls,
the modules' rounds in cuda_graphs_kept and TimedWindow) runs eagerly on a real tiny model,
while fakes play cudagraph trees: a skip counted in `counters["inductor"]`, and recordings and
re-records logged where torch 2.13 logs them."""

from __future__ import annotations

import inspect
import logging
from typing import Any

import pytest
import torch
from torch._dynamo.utils import counters

from benchmarks.harness.doctor.selfcheck import graphs as sgr
from benchmarks.harness.engine import Engine
from benchmarks.harness.model.models import build_model, load_model_spec

CPU = torch.device("cpu")
LOG = logging.getLogger(sgr.CUDAGRAPHS_LOGGER)


def record(name: str) -> None:
    """The line cudagraph trees log for a recording (CUDAGraphTreeManager.record_function)."""
    LOG.debug(
        "[%s] Recording function=%s, mode=%s, cuda_graph_id=%d, inputs: %s",
        "0/0", name, "INFERENCE", 0, "...",
    )  # fmt: skip


def rerecord(name: str, reason: str) -> None:
    """The line cudagraph trees log before a re-record (CUDAGraphTreeManager._run)."""
    LOG.debug("[%s] Re-recording function=%s, mode=%s, reason=%s", "0/0", name, "INFERENCE", reason)


@pytest.fixture(scope="module")
def model() -> Any:
    return build_model(load_model_spec("tiny-llama"), CPU, torch.float32)


def run_cells(model: Any, on_prefill=None, on_step=None) -> Any:
    """Both probe cells through `run_cell`; the hooks play cudagraph trees. Per cell, calls
    1-2 of prefill and 1-8 of decode_step are first_calls' (N = 8); the rest are the rounds'."""
    engine = Engine(model, CPU)
    prefill, decode_step = engine.prefill, engine.decode_step
    found = []
    with sgr.GraphRecordings().listening() as recordings:
        for prompt_len in sgr.PROMPT_LENS:
            prefills, steps = [0], [0]

            def counted_prefill(*args: Any, prefills=prefills) -> Any:
                prefills[0] += 1
                if on_prefill is not None:
                    on_prefill(prefills[0])
                return prefill(*args)

            def counted_step(*args: Any, steps=steps) -> Any:
                steps[0] += 1
                if on_step is not None:
                    on_step(steps[0])
                return decode_step(*args)

            engine.prefill = counted_prefill  # type: ignore[method-assign]
            engine.decode_step = counted_step  # type: ignore[method-assign]
            cell = sgr.graph_cell("tiny-llama", CPU, prompt_len)
            found.append(sgr.run_cell(engine, cell, recordings))
    torch._dynamo.reset()
    return found


def first_calls_record(count: int) -> None:
    if count == 1:  # first_calls' first prefill: a capture, as on a GPU
        record("forward")


def test_graphs_recorded_in_the_first_calls_only_are_kept(model):
    cells = run_cells(model, on_prefill=first_calls_record)
    assert [(c.recorded_first, c.recorded_rounds, c.skips) for c in cells] == [(1, 0, 0)] * 2
    found = sgr.judge_graphs("tiny", cells)
    assert found.level == "ok", found.message
    assert found.data["cudagraph_recordings_first_calls"] == 2


def test_a_cudagraph_skip_counted_in_the_rounds_is_bad(model):
    def skip_once(count: int) -> None:
        if count == 10:  # in test_decode's rounds
            counters["inductor"]["cudagraph_skips"] += 1

    cells = run_cells(model, on_prefill=first_calls_record, on_step=skip_once)
    assert cells[0].skips == 1
    assert cells[0].error is not None
    assert "skipped 1 time(s) in the rounds" in cells[0].error
    found = sgr.judge_graphs("tiny", cells)
    assert found.level == "bad"
    assert found.data["cudagraph_skips"] == 2  # one in each cell's rounds


def test_a_graph_break_in_the_first_calls_or_the_rounds_is_bad(model):
    """A break cuts a reduce-overhead step into several CUDA graphs with eager code between
    them: the probe counts dynamo's breaks per cell (first calls and rounds) and says so."""

    def break_at_first_prefill(count: int) -> None:
        first_calls_record(count)
        if count == 1:
            counters["graph_break"]["a data-dependent branch"] += 1

    def break_in_the_rounds(count: int) -> None:
        if count == 10:
            counters["graph_break"]["a data-dependent branch"] += 1

    cells = run_cells(model, on_prefill=break_at_first_prefill, on_step=break_in_the_rounds)
    assert [c.graph_breaks for c in cells] == [2, 2]
    found = sgr.judge_graphs("tiny", cells)
    assert found.level == "bad"
    assert found.data["compile_graph_breaks"] == 4
    assert "P=32: 2 graph break(s)" in found.message
    assert "graph breaks cut each step into several CUDA graphs" in found.message


def test_a_recording_inside_the_rounds_is_bad(model):
    def record_late(count: int) -> None:
        if count == 10:
            record("forward")

    cells = run_cells(model, on_prefill=first_calls_record, on_step=record_late)
    found = sgr.judge_graphs("tiny", cells)
    assert cells[0].recorded_rounds == 1
    assert found.level == "bad"
    assert "recorded inside the rounds" in found.message


def test_a_re_record_is_bad_with_torchs_reason(model):
    def moved(count: int) -> None:
        if count == 1:
            record("forward")
            rerecord("forward", "static input data pointer changed")

    cells = run_cells(model, on_prefill=moved)
    found = sgr.judge_graphs("tiny", cells)
    assert found.level == "bad"
    assert "re-recorded forward: static input data pointer changed" in found.message


def test_no_recording_seen_is_a_warning_not_a_pass(model):
    found = sgr.judge_graphs("tiny", run_cells(model))
    assert found.level == "warn"


def test_the_listener_follows_torchs_logger_and_messages_and_leaves_it_as_it_was():
    trees = pytest.importorskip("torch._inductor.cudagraph_trees")
    assert trees.log.name == sgr.CUDAGRAPHS_LOGGER
    manager = trees.CUDAGraphTreeManager
    assert sgr._RECORDING in inspect.getsource(manager.record_function)
    assert sgr._RERECORDING in inspect.getsource(manager._run)
    level = LOG.level
    with sgr.GraphRecordings().listening() as recordings:
        record("f1")
        LOG.debug("[%s] Running warmup function=%s, mode=%s", "0/0", "f1", "INFERENCE")
    record("f2")  # after the probe: not counted
    assert recordings.recorded == ["f1"]
    assert LOG.level == level
