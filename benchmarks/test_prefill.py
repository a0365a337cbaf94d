"""Prefill: the model-side prefill forward over the prompt `[B, P]`, round after round (DESIGN §3).

Timed region (the synchronizing benchmark timer brackets it): `Engine.prefill_forward`, exactly
what `prefill_s` names: one forward with `use_cache=True` and last-position logits on prompt ids
already on the device, plus the greedy argmax. Each round's untimed `setup` drops the previous
round's cache, copies the host prompt to the device and makes the start cache
(`Engine.start_cache_for`: a static cell's reset in place) (`benchmarks.suite.rounds.Rounds`),
so rounds never stack caches and each round's memory peak is its own. The client-observed time
to first token (H2D, D2H included) is `test_generate`'s `ttft_s`, measured over its rounds.

Recorded: the benchmark statistic; `prefill_s`, the median of those same rounds;
`prefill_tok_per_s` = B * P / prefill_s; KV bytes of the prompt's cache, analytic and measured,
and its fixed recurrent/conv state (hybrid models); weights and the largest per-round memory
peak; roofline figures against the device's peaks.

The benchmark is `test_prefill_forward` (it replaced `test_prefill`, whose timed region also
held the id copies and the cache hand-over, so the two histories are different quantities).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from benchmarks.harness.cache.kv import kv_bytes_per_token
from benchmarks.harness.cache.measure import measure_kv
from benchmarks.harness.cache.state import state_fields, state_mismatch
from benchmarks.harness.device.memory import MemoryMonitor
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model import compat
from benchmarks.harness.records import median
from benchmarks.harness.roofline.peaks import Peaks
from benchmarks.harness.runmode.kvlayout import (
    analytic_layout,
    kv_quant_fields,
    static_fields,
    static_fields_mismatch,
)
from benchmarks.suite.roofline import cell_roofline
from benchmarks.suite.rounds import (
    CellRun,
    Progress,
    Rounds,
    memory_fields,
    round_times,
    rounds_text,
    start_record,
)
from benchmarks.suite.tp.cells import TPRun
from benchmarks.suite.tp.record import tp_measurement

MEASUREMENT = "prefill"
# Tensor-parallel cells are this test's, not `test_prefill_forward`'s
# (`benchmarks/suite/collect.py`).
TP_TEST = "test_prefill_forward_tp"


def test_prefill_forward(
    run: CellRun, peaks: Peaks, remeasure_peaks: Callable[[], Peaks], benchmark: Any
) -> None:
    """Time the model-side prefill forward per round; record prefill_s, KV and memory."""
    info = start_record(benchmark, run, MEASUREMENT)
    cell, loaded, progress = run.cell, run.loaded, run.progress
    engine = loaded.engine

    def prepare() -> tuple[torch.Tensor, Any]:
        # Untimed: the H2D copy, and the start cache (a static cell's reset in place).
        return run.prompt.to(loaded.device), engine.start_cache_for(cell.batch)

    def prefill(state: tuple[torch.Tensor, Any]) -> tuple[torch.Tensor, Any]:
        return engine.prefill_forward(*state)

    rounds = Rounds(prefill, prepare, MemoryMonitor(loaded.device))
    progress(f"{cell.id}: prefill, {rounds_text(cell)} ...")
    rounds.pedantic(benchmark, cell.rounds, min_timed_s=cell.min_timed_s)

    rounds_s = round_times(benchmark)
    prefill_s = median(rounds_s) if rounds_s else None
    config = loaded.config
    # The cell's cache implementation decides the layout (static: allocated up front).
    analytic = analytic_layout(cell, config, dtype=loaded.dtype, seq_len=cell.prompt_len)
    _, raw_cache = rounds.last
    cache = compat.adopt_cache(loaded.model, raw_cache)
    measured = measure_kv(cache)
    info.update(
        {
            "prefill_s": prefill_s,
            "prefill_tok_per_s": None
            if prefill_s is None
            else cell.batch * cell.prompt_len / prefill_s,
            "kv_bytes_per_token": kv_bytes_per_token(config, dtype=loaded.dtype, batch=cell.batch),
            "kv_analytic_after_prefill_bytes": analytic.total_bytes,
            "kv_measured_after_prefill_bytes": measured.logical_bytes,
            "kv_storage_after_prefill_bytes": measured.storage_bytes,
            **state_fields(config, loaded.dtype, cell.batch, measured.state_bytes),
            **static_fields(cell, config, loaded.dtype, cache, cell.prompt_len),
            **kv_quant_fields(cell, config, loaded.dtype),
            **memory_fields(rounds.peaks, loaded.weights_fields()),
        }
    )
    if prefill_s is not None:
        progress(f"{cell.id}: prefill median {prefill_s * 1e3:.1f} ms")
    assert measured.logical_bytes == analytic.total_bytes, (
        f"KV after prefill: analytic {analytic.total_bytes} bytes, "
        f"measured {measured.logical_bytes} bytes"
    )
    assert state_mismatch(info) is None, f"after prefill: {state_mismatch(info)}"
    assert static_fields_mismatch(info) is None, f"static cache: {static_fields_mismatch(info)}"
    # Last: a RooflineError (an achieved rate above the device's peak) is a bug signal that fails
    # the test, but must not cost the record its other metrics.
    if prefill_s is not None:
        info.update(cell_roofline(run, peaks, remeasure_peaks, prefill_s=prefill_s))


def test_prefill_forward_tp(
    cell: Cell, tp_run: TPRun, progress: Progress, peaks: Peaks, benchmark: Any
) -> None:
    """A tensor-parallel cell's prefill forward: the ranks' own rounds (each the max over ranks)
    from the cell's one torchrun, replayed into the record (`benchmarks/suite/tp/record.py`)."""
    tp_measurement(benchmark, cell, tp_run, MEASUREMENT, progress, peaks=peaks)
