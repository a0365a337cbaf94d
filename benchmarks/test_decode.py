"""Decode: one decode step at context length P, timed round after round (DESIGN §3).

Before the rounds, one untimed prefill builds the prompt's cache and the engine snapshots it
(on the host when the device is an accelerator, so no spare cache sits in device memory).
Each round's untimed `setup` drops the previous round's cache and restores a fresh cache of
exactly P positions from the snapshot (`benchmarks.suite.rounds.Rounds`), so every round times the
same step: `Engine.decode_step`, one forward of `[B, 1]` token ids with the cache, plus the
greedy argmax, and its memory peak is its own. The synchronizing benchmark timer brackets it.

Recorded: the benchmark statistic; `decode_step_s` (median of the same rounds) and
`decode_tok_per_s` = B / decode_step_s; KV bytes at P (after prefill) and at P + 1 (after the
step), analytic and measured, and the fixed recurrent/conv state (hybrid models); weights and
the largest per-round memory peak; roofline figures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.records import median
from benchmarks.harness.roofline.peaks import Peaks
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

MEASUREMENT = "decode"
# Tensor-parallel cells are this test's, not `test_decode`'s (`benchmarks/suite/collect.py`).
TP_TEST = "test_decode_tp"


def test_decode(
    run: CellRun, peaks: Peaks, remeasure_peaks: Callable[[], Peaks], benchmark: Any
) -> None:
    """Time one decode step at context P per round; the cache is restored to P in setup."""
    info = start_record(benchmark, run, MEASUREMENT)
    cell, loaded, progress = run.cell, run.loaded, run.progress
    engine = loaded.engine
    prefill = engine.prefill(run.prompt)
    snapshot = engine.snapshot(prefill.cache)
    token = prefill.next_token
    del prefill

    def restore() -> tuple[Any, Any]:
        return token, engine.restore(snapshot)

    def step(state: tuple[Any, Any]) -> tuple[Any, Any]:
        return engine.decode_step(*state, snapshot.seq_len)

    rounds = Rounds(step, restore, loaded.memory_monitor())
    progress(f"{cell.id}: decode step at context {cell.prompt_len}, {rounds_text(cell)} ...")
    rounds.pedantic(benchmark, cell.rounds, min_timed_s=cell.min_timed_s)
    _, cache = rounds.last

    rounds_s = round_times(benchmark)
    step_s = median(rounds_s) if rounds_s else None
    # The cell's cache implementation decides the layout (static: allocated up front).
    kv = loaded.kv(cell)
    at_p = kv.analytic_bytes(cell.prompt_len)
    after = kv.point(cache, cell.prompt_len + 1)
    info.update(
        {
            "decode_step_s": step_s,
            "decode_tok_per_s": None if step_s is None else cell.batch / step_s,
            "context_len": cell.prompt_len,
            "kv_bytes_per_token": kv.bytes_per_token,
            "kv_analytic_after_prefill_bytes": at_p,
            "kv_measured_after_prefill_bytes": snapshot.kv_bytes,
            "kv_analytic_final_bytes": after.analytic_bytes,
            "kv_measured_final_bytes": after.measured_bytes,
            "kv_storage_final_bytes": after.storage_bytes,
            **after.fields,
            **kv.extra_fields(cell.prompt_len),
            **memory_fields(rounds.peaks, loaded.weights_fields()),
        }
    )
    if step_s is not None:
        progress(f"{cell.id}: decode step median {step_s * 1e3:.2f} ms")
    assert (snapshot.kv_bytes, after.measured_bytes) == (at_p, after.analytic_bytes), (
        f"KV bytes at P / P+1: analytic {at_p} / {after.analytic_bytes}, measured "
        f"{snapshot.kv_bytes} / {after.measured_bytes}"
    )
    assert not after.mismatches, f"after the decode step: {'; '.join(after.mismatches)}"
    # Last: a RooflineError (an achieved rate above the device's peak) is a bug signal that fails
    # the test, but must not cost the record its other metrics.
    info.update(cell_roofline(run, peaks, remeasure_peaks, decode_step_s=step_s))


def test_decode_tp(
    cell: Cell, tp_run: TPRun, progress: Progress, peaks: Peaks, benchmark: Any
) -> None:
    """A tensor-parallel cell's decode step at context P: the ranks' own rounds (each the max
    over ranks) from the cell's one torchrun, replayed into the record (`tp_record`)."""
    tp_measurement(benchmark, cell, tp_run, MEASUREMENT, progress, peaks=peaks)
