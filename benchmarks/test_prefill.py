"""Prefill: one forward over the prompt `[B, P]`, timed round after round (DESIGN §3).

Timed region (the synchronizing benchmark timer brackets it): `Engine.prefill` on the host
prompt: the ids' copy to the device, one forward with `use_cache=True` and last-position
logits, the greedy argmax, and token 1's copy back to the host. Between rounds the previous
round's cache is dropped (untimed `setup`), so rounds never stack their caches in memory.

Recorded: the benchmark statistic (seconds per round); `prefill_s`, the median of the engine's
model-side synchronized forward + argmax per round; `prefill_tok_per_s` = B * P / prefill_s;
`ttft_s`, the median client-observed time to first token (host ids -> token id on the host);
KV bytes of the prompt's cache, analytic and measured; weights and the phase's peak memory;
roofline figures against the device's peaks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.harness.devices import MemoryMonitor
from benchmarks.harness.engine import PrefillResult
from benchmarks.harness.kv import analytic_kv, kv_bytes_per_token, measure_kv
from benchmarks.harness.peaks import Peaks
from benchmarks.harness.records import median
from benchmarks.harness.roofline import roofline_extra_info
from benchmarks.suite import CellRun, memory_fields, roofline_confirmed, start_record

MEASUREMENT = "prefill"


def test_prefill(
    run: CellRun, peaks: Peaks, remeasure_peaks: Callable[[], Peaks], benchmark: Any
) -> None:
    """Time one prefill per round; record model-side prefill, TTFT, KV and memory."""
    info = start_record(benchmark, run, MEASUREMENT)
    cell, loaded, progress = run.cell, run.loaded, run.progress
    last: list[PrefillResult] = []
    prefill_s: list[float] = []
    ttft_s: list[float] = []

    def drop_previous() -> None:
        last.clear()

    def target() -> None:
        result = loaded.engine.prefill(run.prompt)
        last.append(result)
        prefill_s.append(result.prefill_s)
        ttft_s.append(result.ttft_s)

    monitor = MemoryMonitor(loaded.device)
    monitor.reset_peak()
    progress(f"{cell.id}: prefill, {cell.rounds} round(s) ...")
    benchmark.pedantic(target, setup=drop_previous, rounds=cell.rounds, warmup_rounds=0)
    memory = monitor.sample()

    median_prefill_s = median(prefill_s)
    config = loaded.config
    analytic = analytic_kv(config, dtype=loaded.dtype, batch=cell.batch, seq_len=cell.prompt_len)
    measured = measure_kv(last[-1].cache)
    info.update(
        {
            "prefill_s": median_prefill_s,
            "prefill_tok_per_s": cell.batch * cell.prompt_len / median_prefill_s,
            "ttft_s": median(ttft_s),
            "kv_bytes_per_token": kv_bytes_per_token(config, dtype=loaded.dtype, batch=cell.batch),
            "kv_analytic_after_prefill_bytes": analytic.total_bytes,
            "kv_measured_after_prefill_bytes": measured.logical_bytes,
            "kv_storage_after_prefill_bytes": measured.storage_bytes,
            **memory_fields(memory, loaded.weights_bytes),
        }
    )
    progress(f"{cell.id}: prefill median {median_prefill_s * 1e3:.1f} ms")
    assert measured.logical_bytes == analytic.total_bytes, (
        f"KV after prefill: analytic {analytic.total_bytes} bytes, "
        f"measured {measured.logical_bytes} bytes"
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
                prefill_s=median_prefill_s,
            ),
            peaks,
            remeasure_peaks,
        )
    )
