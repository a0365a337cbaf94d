"""The self-check's CUDA-graph probe: `reduce-overhead` over two cells of one build (issue 30,
rows 4 and 5), through the suite's own path: `build_cell_model` (inductor, the cell's mode),
then per cell `configure_engine` (its one static cache), `first_calls` (dynamo reset, CUDA
graphs recorded, `cudagraph_or_error` on) and each module's rounds (prefill from the reset
cache, decode from a restored snapshot, whole generations) inside `cuda_graphs_kept` and
`TimedWindow`, as `suite.Rounds` runs them.

Counted per cell: graph breaks (dynamo's, in the first calls and the rounds: each one cuts the
step into several CUDA graphs with eager code and a sync between them), CUDA-graph skips
(`counters["inductor"]["cudagraph_skips"]`, which `cuda_graphs_kept` turns into
`CudaGraphsSkippedError`), recordings in the first calls and in the rounds, and re-records.
torch 2.13 has no counter for recordings: cudagraph trees log each one at DEBUG on the
`cudagraphs` artifact logger ("Recording function=...", and "Re-recording
function=..., reason=..." when a recorded graph's inputs no longer match;
`torch/_inductor/cudagraph_trees.py`, `record_function` and `_run`), so `GraphRecordings`
listens there for the probe's duration. A recording inside the rounds means the rounds time a
capture, a re-record means new addresses between rounds: both `bad`, like a skip.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch._dynamo

from benchmarks.harness.device.devices import device_sync
from benchmarks.harness.doctor.findings import Finding, JsonValue, ok, skip
from benchmarks.harness.doctor.selfcheck.compile import compile_probe_dtype
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import load_model_spec
from benchmarks.harness.runmode.compiled import (
    CompiledInTimedRoundsError,
    CudaGraphsSkippedError,
    DynamoCounts,
    TimedWindow,
    cuda_graphs_kept,
    first_calls,
)
from benchmarks.harness.runmode.decide import build_cell_model, configure_engine

MODE = "reduce-overhead"
PROMPT_LENS = (32, 64)  # two cells of one build: the reset / new cache / re-record path
NEW_TOKENS = 8
ROUNDS = 3
# `torch._logging.getArtifactLogger("torch._inductor.cudagraph_trees", "cudagraphs")`.
CUDAGRAPHS_LOGGER = "torch._inductor.cudagraph_trees.__cudagraphs"
_RECORDING = "Recording function="
_RERECORDING = "Re-recording function="


class GraphRecordings(logging.Handler):
    """CUDA-graph recordings and re-records, from cudagraph trees' DEBUG lines (module doc)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.recorded: list[str] = []  # the function of each recording
        self.rerecorded: list[str] = []  # "function: reason"

    def emit(self, record: logging.LogRecord) -> None:
        """Count one recording or re-record; ignore every other line."""
        message = str(record.msg)
        args = record.args if isinstance(record.args, tuple) else ()
        name = str(args[1]) if len(args) > 1 else "?"
        if _RERECORDING in message:
            reason = str(args[3]) if len(args) > 3 else "?"
            self.rerecorded.append(f"{name}: {reason}")
        elif _RECORDING in message:
            self.recorded.append(name)

    @contextmanager
    def listening(self) -> Iterator[GraphRecordings]:
        """Attach to the cudagraphs logger at DEBUG (it stays silent unless TORCH_LOGS says)."""
        logger = logging.getLogger(CUDAGRAPHS_LOGGER)
        level = logger.level
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self)
        try:
            yield self
        finally:
            logger.removeHandler(self)
            logger.setLevel(level)


@dataclass(frozen=True)
class CellGraphs:
    """One cell's CUDA-graph figures."""

    prompt_len: int
    recorded_first: int  # in first_calls (compile, capture, one generation)
    recorded_rounds: int  # in the warm and timed rounds of the three modules
    rerecorded: tuple[str, ...]
    skips: int
    error: str | None = None
    graph_breaks: int = 0  # dynamo's, first calls and rounds


def graph_cell(model: str, device: torch.device, prompt_len: int) -> Cell:
    """A `reduce-overhead` static-cache cell of the probe (the dtype the GPU matrices run)."""
    dtype = str(compile_probe_dtype(device)).removeprefix("torch.")
    return Cell(
        model, str(device), dtype, 1, prompt_len, NEW_TOKENS, 0, ROUNDS, 0,
        cache="static", compile=MODE,
    )  # fmt: skip


def run_cell(engine: Engine, cell: Cell, recordings: GraphRecordings) -> CellGraphs:
    """first_calls, then the three modules' rounds, counting recordings and skips."""
    configure_engine(engine, cell)
    vocab = int(engine.model.config.get_text_config().vocab_size)
    prompt = make_prompt(cell.batch, cell.prompt_len, vocab, cell.seed)
    skips_before = DynamoCounts.now().cudagraph_skips
    first_count, rerecords_before = len(recordings.recorded), len(recordings.rerecorded)
    error: str | None = None
    rounds_start = first_count
    breaks = 0
    window = TimedWindow(cell.id, cell.compile)
    try:
        compiled = first_calls(engine, prompt, cell.new_tokens, cell.compile)
        breaks = int(compiled.get("compile_graph_breaks", 0))
        rounds_start = len(recordings.recorded)
        with cuda_graphs_kept(True, cell.compile, "rounds"), window:
            module_rounds(engine, cell, prompt)
        window.check()
    except (CudaGraphsSkippedError, CompiledInTimedRoundsError) as failed:
        error = str(failed)
    breaks += int(window.extra_info().get("compile_timed_graph_breaks", 0))
    return CellGraphs(
        prompt_len=cell.prompt_len,
        recorded_first=rounds_start - first_count,
        recorded_rounds=len(recordings.recorded) - rounds_start,
        rerecorded=tuple(recordings.rerecorded[rerecords_before:]),
        skips=DynamoCounts.now().cudagraph_skips - skips_before,
        error=error,
        graph_breaks=breaks,
    )


def module_rounds(engine: Engine, cell: Cell, prompt: torch.Tensor) -> None:
    """test_prefill's, test_decode's and test_generate's rounds (one warm round each included)."""
    device = engine.device
    for _ in range(ROUNDS + 1):  # prefill: ids on the device, the reset start cache
        ids, start = prompt.to(device), engine.start_cache_for(cell.batch)
        engine.prefill_forward(ids, start)
        device_sync(device)
    prefill = engine.prefill(prompt)
    snapshot = engine.snapshot(prefill.cache)
    for _ in range(ROUNDS + 1):  # decode: restored to P, one step at P
        engine.decode_step(prefill.next_token, engine.restore(snapshot), snapshot.seq_len)
        device_sync(device)
    for _ in range(ROUNDS + 1):  # generate: whole generations
        engine.client_generate(prompt, cell.new_tokens)


def judge_graphs(what: str, cells: list[CellGraphs]) -> Finding:
    """`bad` on any graph break, skip, re-record, recording inside the rounds, or error; else
    `ok`."""
    check = "selfcheck.cuda_graphs"
    per_cell = "; ".join(
        f"P={c.prompt_len}: {c.graph_breaks} graph break(s), {c.recorded_first} recording(s) "
        f"in the first calls, {c.recorded_rounds} in the rounds, {len(c.rerecorded)} "
        f"re-record(s), {c.skips} skip(s)"
        for c in cells
    )
    data: dict[str, JsonValue] = {
        "compile_graph_breaks": sum(c.graph_breaks for c in cells),
        "cudagraph_skips": sum(c.skips for c in cells),
        "cudagraph_rerecords": sum(len(c.rerecorded) for c in cells),
        "cudagraph_recordings_in_rounds": sum(c.recorded_rounds for c in cells),
        "cudagraph_recordings_first_calls": sum(c.recorded_first for c in cells),
    }
    text = f"{what}: {per_cell}"
    problems = [c.error for c in cells if c.error]
    problems += [f"re-recorded {r}" for c in cells for r in c.rerecorded]
    if any(c.skips for c in cells) and not problems:
        problems.append("CUDA graphs were skipped (counters['inductor']['cudagraph_skips'])")
    if any(c.recorded_rounds for c in cells):
        problems.append("a graph was recorded inside the rounds, which then time a capture")
    if any(c.graph_breaks for c in cells):
        problems.append(
            "graph breaks cut each step into several CUDA graphs with eager code and a sync "
            "between them (TORCH_LOGS=graph_breaks shows where)"
        )
    if problems:
        return Finding(
            check,
            "bad",
            f"{text}: {problems[0]}",
            "rerun with TORCH_LOGS=cudagraphs,perf_hints and report this line; reduce-overhead "
            "cells would time eager code or captures here",
            data,
        )
    if not any(c.recorded_first for c in cells):
        return Finding(
            check,
            "warn",
            f"{text}: no recording was seen, so re-records could not be counted (torch's "
            "cudagraph trees log no 'Recording function=' line here)",
            "rerun with TORCH_LOGS=cudagraphs and read the log",
            data,
        )
    return ok(check, f"{text}: graphs kept", **data)


def probe_cuda_graphs(model_name: str, device: torch.device) -> Finding:
    """Two reduce-overhead cells of one build on CUDA (module docstring)."""
    if device.type != "cuda":
        return skip("selfcheck.cuda_graphs", f"{device.type}: CUDA graphs are CUDA's")
    cells = [graph_cell(model_name, device, p) for p in PROMPT_LENS]
    spec = load_model_spec(model_name)
    dtype = compile_probe_dtype(device)
    model: Any = build_cell_model(spec, cells[0], device, dtype)
    engine = Engine(model, device)
    found: list[CellGraphs] = []
    with GraphRecordings().listening() as recordings:
        for cell in cells:  # the cells of one build, one after another, as the suite runs them
            found.append(run_cell(engine, cell, recordings))
    torch._dynamo.reset()
    what = f"{model_name} {cells[0].dtype} {MODE}, static cache, two cells of one build"
    return judge_graphs(what, found)
