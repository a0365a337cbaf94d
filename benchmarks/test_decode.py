"""Decode: one decode step at context length P, timed round after round (DESIGN §3).

Before the rounds, one untimed prefill builds the prompt's cache and the engine snapshots it.
Each round's untimed `setup` restores a fresh cache of exactly P positions from that snapshot,
so every round times the same step: `Engine.decode_step`, one forward of `[B, 1]` token ids
with the cache, plus the greedy argmax. The synchronizing benchmark timer brackets it.

Recorded: the benchmark statistic; `decode_step_s` (median of the rounds) and
`decode_tok_per_s` = B / decode_step_s; KV bytes at P (after prefill) and at P + 1 (after the
step), analytic and measured; weights and the phase's peak memory; roofline figures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from benchmarks.harness.devices import MemoryMonitor
from benchmarks.harness.kv import analytic_kv, kv_bytes_per_token, measure_kv
from benchmarks.harness.peaks import Peaks
from benchmarks.harness.records import median
from benchmarks.harness.roofline import roofline_extra_info
from benchmarks.suite import CellRun, memory_fields, roofline_confirmed, round_times, start_record

MEASUREMENT = "decode"


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

    def restore() -> tuple[tuple[torch.Tensor, Any], dict[str, Any]]:
        return (token, engine.restore(snapshot)), {}

    monitor = MemoryMonitor(loaded.device)
    monitor.reset_peak()
    progress(f"{cell.id}: decode step at context {cell.prompt_len}, {cell.rounds} round(s) ...")
    _, cache = benchmark.pedantic(
        engine.decode_step, setup=restore, rounds=cell.rounds, warmup_rounds=0
    )
    memory = monitor.sample()

    config = loaded.config
    rounds_s = round_times(benchmark)
    step_s = median(rounds_s) if rounds_s else None
    at_p = analytic_kv(config, dtype=loaded.dtype, batch=cell.batch, seq_len=cell.prompt_len)
    after = analytic_kv(config, dtype=loaded.dtype, batch=cell.batch, seq_len=cell.prompt_len + 1)
    measured_after = measure_kv(cache)
    info.update(
        {
            "decode_step_s": step_s,
            "decode_tok_per_s": None if step_s is None else cell.batch / step_s,
            "context_len": cell.prompt_len,
            "kv_bytes_per_token": kv_bytes_per_token(config, dtype=loaded.dtype, batch=cell.batch),
            "kv_analytic_after_prefill_bytes": at_p.total_bytes,
            "kv_measured_after_prefill_bytes": snapshot.kv_bytes,
            "kv_analytic_final_bytes": after.total_bytes,
            "kv_measured_final_bytes": measured_after.logical_bytes,
            "kv_storage_final_bytes": measured_after.storage_bytes,
            **memory_fields(memory, loaded.weights_bytes),
        }
    )
    if step_s is not None:
        progress(f"{cell.id}: decode step median {step_s * 1e3:.2f} ms")
    assert (snapshot.kv_bytes, measured_after.logical_bytes) == (
        at_p.total_bytes,
        after.total_bytes,
    ), (
        f"KV bytes at P / P+1: analytic {at_p.total_bytes} / {after.total_bytes}, measured "
        f"{snapshot.kv_bytes} / {measured_after.logical_bytes}"
    )
    # Last: a RooflineError (an achieved rate above the device's peak) is a bug signal that fails
    # the test, but must not cost the record its other metrics.
    info.update(
        roofline_confirmed(
            lambda known: roofline_extra_info(
                loaded.model,
                batch=cell.batch,
                prompt_len=cell.prompt_len,
                peaks=known,
                decode_step_s=step_s,
            ),
            peaks,
            remeasure_peaks,
        )
    )
