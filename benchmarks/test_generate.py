"""Generate: the whole owned loop of N tokens (1 prefill + N - 1 decode steps), per round.

Timed region (the synchronizing benchmark timer brackets it): `Engine.generate` on the host
prompt, the whole instrumented loop: the engine samples resources (memory counters, KV bytes,
CPU time) between tokens, as any client's bookkeeping, so the benchmark statistic, `e2e_s`,
`tpot_s` and the ITL gaps all include it (test_overhead's `overhead_vs_bare` says how much it
costs); the model-side `step_s` exclude it. Each round's untimed `setup` drops the previous
round's result (its cache) first (`benchmarks.suite.Rounds`), so no round holds another's cache.

Recorded over every round (DESIGN §3, `records.generation_metrics`): `e2e_s` (the median of the
benchmark's own rounds), `ttft_s` (client-observed, median over rounds), `tpot_s` = (e2e - ttft) /
(N - 1), ITL percentiles `itl_p50_s` / `itl_p90_s` / `itl_p99_s` over the gaps of all rounds with
`itl_samples`, per-position medians of the model-side `step_s`, `decode_slope_s_per_ktok`, the
last round's per-phase resource samples (memory, RSS, KV bytes, CPU %), the largest per-phase
memory peaks over rounds, and KV bytes after prefill and after every step. With `--profile
DIR`, one more generation runs under torch.profiler after the rounds and its trace is written
to DIR (that run saves no history).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.cache.kv import kv_bytes_per_token
from benchmarks.harness.cache.measure import measure_kv
from benchmarks.harness.cache.state import state_fields, state_mismatch
from benchmarks.harness.engine import DecodeResult
from benchmarks.harness.profiling import profile_generation
from benchmarks.harness.records import GenerationFigures, generation_metrics, jsonable
from benchmarks.harness.runmode.kvlayout import (
    analytic_layout,
    static_fields,
    static_fields_mismatch,
)
from benchmarks.suite import CellRun, Rounds, max_or_none, round_times, start_record

MEASUREMENT = "generate"


@dataclass(frozen=True)
class _Kept:
    """What a round keeps of its `DecodeResult`: figures and samples, never the cache."""

    figures: GenerationFigures
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    peak_rss_bytes: int
    samples: tuple[Any, ...]
    memory_labels: dict[str, str]

    @classmethod
    def of(cls, result: DecodeResult) -> _Kept:
        figures = GenerationFigures(
            e2e_s=result.e2e_s,
            ttft_s=result.ttft_s,
            prefill_s=result.prefill_s,
            step_s=result.step_s,
            gap_s=result.gap_s,
            kv_bytes_after_prefill=result.kv_bytes_after_prefill,
            kv_bytes_per_step=result.kv_bytes_per_step,
        )
        return cls(
            figures,
            result.peak_allocated_bytes,
            result.peak_reserved_bytes,
            result.peak_rss_bytes,
            result.samples,
            dict(result.memory_labels),
        )


def test_generate(run: CellRun, pytestconfig: pytest.Config, benchmark: Any) -> None:
    """Time whole generations of N tokens; record client-observed latencies over all rounds."""
    info = start_record(benchmark, run, MEASUREMENT)
    cell, loaded, progress, prompt = run.cell, run.loaded, run.progress, run.prompt
    engine = loaded.engine

    def generate(_: None) -> DecodeResult:
        return engine.generate(prompt, cell.new_tokens)

    rounds = Rounds(generate)  # the engine resets and reads memory peaks per phase itself
    progress(f"{cell.id}: generate {cell.new_tokens} tokens, {cell.rounds} round(s) ...")
    rounds.pedantic(benchmark, cell.rounds, keep=_Kept.of)
    kept: list[_Kept] = rounds.outputs
    last: DecodeResult = rounds.last

    config = loaded.config
    final = analytic_layout(
        cell, config, dtype=loaded.dtype, seq_len=cell.final_positions
    ).total_bytes
    measured_final = (
        last.kv_bytes_per_step[-1] if last.kv_bytes_per_step else last.kv_bytes_after_prefill
    )
    info.update(
        generation_metrics(
            [k.figures for k in kept],
            prompt_len=cell.prompt_len,
            e2e_rounds_s=round_times(benchmark),
        )
    )
    info.update(
        {
            "kv_bytes_per_token": kv_bytes_per_token(config, dtype=loaded.dtype, batch=cell.batch),
            "kv_analytic_after_prefill_bytes": analytic_layout(
                cell, config, dtype=loaded.dtype, seq_len=cell.prompt_len
            ).total_bytes,
            "kv_measured_after_prefill_bytes": last.kv_bytes_after_prefill,
            "kv_analytic_final_bytes": final,
            "kv_measured_final_bytes": measured_final,
            **state_fields(config, loaded.dtype, cell.batch, measure_kv(last.cache).state_bytes),
            **static_fields(cell, config, loaded.dtype, last.cache, cell.final_positions),
            "weights_bytes": loaded.weights_bytes,
            "peak_allocated_bytes": max_or_none(k.peak_allocated_bytes for k in kept),
            "peak_reserved_bytes": max_or_none(k.peak_reserved_bytes for k in kept),
            "peak_rss_bytes": max_or_none(k.peak_rss_bytes for k in kept),
            "memory_labels": {
                **kept[-1].memory_labels,
                "peak_rss": "largest process RSS sampled at a phase boundary (a lower bound)",
            },
            "resource_samples": jsonable(kept[-1].samples),
        }
    )
    del last
    rounds.last = None  # the final cache is not needed past here (profiling builds its own)
    progress(
        f"{cell.id}: e2e {info['e2e_s']:.3f} s, ttft {info['ttft_s'] * 1e3:.1f} ms, "
        f"tpot {(info['tpot_s'] or 0.0) * 1e3:.2f} ms"
    )
    assert state_mismatch(info) is None, f"after {cell.new_tokens} tokens: {state_mismatch(info)}"
    assert static_fields_mismatch(info) is None, f"static cache: {static_fields_mismatch(info)}"

    profile_dir = pytestconfig.getoption("profile")
    if profile_dir:
        trace = Path(profile_dir) / f"{_file_safe(cell.id)}.trace.json"
        artifact = profile_generation(
            loaded.model, loaded.device, prompt, cell.new_tokens, trace, warmup_generations=0
        )
        info["profile_trace"] = str(artifact.trace_path)
        progress(f"{cell.id}: profile trace {artifact.trace_path}")


def _file_safe(cell_id: str) -> str:
    # `cuda:1` is a fine id but a poor file name on some filesystems.
    return cell_id.replace(":", "_")
