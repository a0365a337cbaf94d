"""Generate: the whole owned loop of N tokens (1 prefill + N - 1 decode steps), per round.

Timed region (the synchronizing benchmark timer brackets it): `Engine.generate` on the host
prompt. The engine samples resources at phase boundaries outside its own timed regions, so
the client-observed figures below exclude instrumentation; the benchmark statistic (wall time
of the whole call) includes it and is therefore a little above `e2e_s`.

Recorded from the last round's `DecodeResult` (DESIGN §3): `e2e_s`, `ttft_s` (client-observed),
`tpot_s` = (e2e - ttft) / (N - 1), ITL percentiles `itl_p50_s` / `itl_p90_s` / `itl_p99_s` over the
client-observed gaps between token ids, per-step model-side times `step_s`,
`decode_slope_s_per_ktok`, per-phase resource samples (memory, RSS, KV bytes, CPU %), and KV
bytes after prefill and after every step. With `--profile DIR`, one more generation runs under
torch.profiler after the rounds and its trace is written to DIR (that run saves no history).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.kv import analytic_kv, kv_bytes_per_token
from benchmarks.harness.profiling import profile_generation
from benchmarks.harness.records import GenerationFigures, generation_metrics, jsonable
from benchmarks.suite import CellRun, start_record

MEASUREMENT = "generate"


def test_generate(run: CellRun, pytestconfig: pytest.Config, benchmark: Any) -> None:
    """Time whole generations of N tokens; record the client-observed latencies of the last."""
    info = start_record(benchmark, run, MEASUREMENT)
    cell, loaded, progress, prompt = run.cell, run.loaded, run.progress, run.prompt
    engine = loaded.engine
    progress(f"{cell.id}: generate {cell.new_tokens} tokens, {cell.rounds} round(s) ...")
    result = benchmark.pedantic(
        engine.generate, args=(prompt, cell.new_tokens), rounds=cell.rounds, warmup_rounds=0
    )

    config = loaded.config
    final = analytic_kv(
        config, dtype=loaded.dtype, batch=cell.batch, seq_len=cell.final_positions
    ).total_bytes
    figures = GenerationFigures(
        e2e_s=result.e2e_s,
        ttft_s=result.ttft_s,
        prefill_s=result.prefill_s,
        step_s=result.step_s,
        gap_s=result.gap_s,
        kv_bytes_after_prefill=result.kv_bytes_after_prefill,
        kv_bytes_per_step=result.kv_bytes_per_step,
    )
    measured_final = (
        result.kv_bytes_per_step[-1] if result.kv_bytes_per_step else result.kv_bytes_after_prefill
    )
    info.update(generation_metrics(figures, prompt_len=cell.prompt_len))
    info.update(
        {
            "kv_bytes_per_token": kv_bytes_per_token(config, dtype=loaded.dtype, batch=cell.batch),
            "kv_analytic_after_prefill_bytes": analytic_kv(
                config, dtype=loaded.dtype, batch=cell.batch, seq_len=cell.prompt_len
            ).total_bytes,
            "kv_measured_after_prefill_bytes": result.kv_bytes_after_prefill,
            "kv_analytic_final_bytes": final,
            "kv_measured_final_bytes": measured_final,
            "weights_bytes": loaded.weights_bytes,
            "peak_allocated_bytes": result.peak_allocated_bytes,
            "peak_reserved_bytes": result.peak_reserved_bytes,
            "peak_rss_bytes": result.peak_rss_bytes,
            "memory_labels": {
                **result.memory_labels,
                "peak_rss": "largest process RSS sampled at a phase boundary (a lower bound)",
            },
            "resource_samples": jsonable(result.samples),
        }
    )
    progress(
        f"{cell.id}: e2e {result.e2e_s:.3f} s, ttft {result.ttft_s * 1e3:.1f} ms, "
        f"tpot {(info['tpot_s'] or 0.0) * 1e3:.2f} ms"
    )

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
