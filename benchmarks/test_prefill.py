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
peak; roofline figures against the device's peaks. The cell's engine (torch or MLX, DESIGN §14)
is its built model's (`CellModel`): the engine, the KV accounting and the memory counters are
its own, the rounds and the record the same.

The benchmark is `test_prefill_forward` (it replaced `test_prefill`, whose timed region also
held the id copies and the cache hand-over, so the two histories are different quantities).
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

    def prepare() -> tuple[Any, Any]:
        # Untimed: the H2D copy, and the start cache (a static cell's reset in place).
        return engine.to_device(run.prompt), engine.start_cache_for(cell.batch)

    def prefill(state: tuple[Any, Any]) -> tuple[Any, Any]:
        return engine.prefill_forward(*state)

    rounds = Rounds(prefill, prepare, loaded.memory_monitor())
    progress(f"{cell.id}: prefill, {rounds_text(cell)} ...")
    rounds.pedantic(benchmark, cell.rounds, min_timed_s=cell.min_timed_s)

    rounds_s = round_times(benchmark)
    prefill_s = median(rounds_s) if rounds_s else None
    # The cell's cache implementation decides the layout (static: allocated up front).
    kv = loaded.kv(cell)
    _, raw_cache = rounds.last
    point = kv.point(raw_cache, cell.prompt_len)
    info.update(
        {
            "prefill_s": prefill_s,
            "prefill_tok_per_s": None
            if prefill_s is None
            else cell.batch * cell.prompt_len / prefill_s,
            "kv_bytes_per_token": kv.bytes_per_token,
            "kv_analytic_after_prefill_bytes": point.analytic_bytes,
            "kv_measured_after_prefill_bytes": point.measured_bytes,
            "kv_storage_after_prefill_bytes": point.storage_bytes,
            **point.fields,
            **kv.extra_fields(None),
            **memory_fields(rounds.peaks, loaded.weights_fields()),
        }
    )
    if prefill_s is not None:
        progress(f"{cell.id}: prefill median {prefill_s * 1e3:.1f} ms")
    assert point.measured_bytes == point.analytic_bytes, (
        f"KV after prefill: analytic {point.analytic_bytes} bytes, "
        f"measured {point.measured_bytes} bytes"
    )
    assert not point.mismatches, f"after prefill: {'; '.join(point.mismatches)}"
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
