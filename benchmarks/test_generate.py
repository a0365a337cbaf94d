"""Generate: the whole owned loop of N tokens (1 prefill + N - 1 decode steps), per round.

Timed region (the synchronizing benchmark timer brackets it): `Engine.client_generate` on the
host prompt: per token the forward, the argmax, the syncs around the model-side step and the
token's copy to the host, nothing else. The benchmark statistic, `e2e_s`, `ttft_s`, `tpot_s`
and the ITL gaps are that client's view. Each round's untimed `setup` drops the previous
round's result (its cache) first and resets the memory peak; the round's peak is read in the
next setup (`benchmarks.suite.rounds.Rounds`), so the timed path reads no counter.

After the rounds, one untimed **asserting pass** (`Engine.generate`, the same loop with KV
bytes, memory counters and CPU time recorded at every phase boundary) gives the KV bytes after
prefill and after every step, the per-phase `resource_samples` and the state/static checks;
the cell's `test_kv_cache`, which runs next, asserts on the same pass (`suite.handoff`).
What that recording costs is measured, not estimated, and reported apart:
`bookkeeping_per_step_s` = the pass's median client gap minus the rounds' median gap.

Recorded (DESIGN §3, `records.generation_metrics`): `e2e_s` (the median of the benchmark's own
rounds), `ttft_s` (client-observed, median over rounds), `tpot_s` = (e2e - ttft) / (N - 1), ITL
percentiles `itl_p50_s` / `itl_p90_s` / `itl_p99_s` over the gaps of all rounds with
`itl_samples`, per-position medians of the model-side `step_s`, `decode_slope_s_per_ktok`, the
asserting pass's per-phase resource samples (memory, RSS, KV bytes, CPU %), the largest memory
peaks over the rounds and the pass (`memory.peak_fields`: MPS maxima of samples as
`peak_*_sampled_bytes`), and KV bytes after prefill and after every step. With `--profile DIR`,
one more generation runs under torch.profiler after the rounds and its trace is written to DIR
(that run saves no history; MLX cells skip it). Torch or MLX (DESIGN §14): the built model's
(`CellModel`) engine, KV accounting and memory counters.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.device.memory import peak_fields
from benchmarks.harness.engine import Generation
from benchmarks.harness.overhead import bookkeeping_per_step_s
from benchmarks.harness.profiling import profile_generation
from benchmarks.harness.records import GenerationFigures, generation_metrics, jsonable
from benchmarks.suite import handoff
from benchmarks.suite.rounds import (
    CellRun,
    Rounds,
    max_or_none,
    round_times,
    rounds_text,
    start_record,
)

MEASUREMENT = "generate"


def _timings(result: Generation) -> Generation:
    """What a round keeps: its times and ids, never its cache (the next round's peak would hold
    it)."""
    return replace(result, cache=None)


def test_generate(run: CellRun, pytestconfig: pytest.Config, benchmark: Any) -> None:
    """Time whole generations of N tokens; record client-observed latencies over all rounds."""
    info = start_record(benchmark, run, MEASUREMENT)
    cell, loaded, progress, prompt = run.cell, run.loaded, run.progress, run.prompt
    engine = loaded.engine

    def generate(_: None) -> Generation:
        return engine.client_generate(prompt, cell.new_tokens)

    rounds = Rounds(generate, monitor=loaded.memory_monitor())
    progress(f"{cell.id}: generate {cell.new_tokens} tokens, {rounds_text(cell)} ...")
    rounds.pedantic(benchmark, cell.rounds, keep=_timings, min_timed_s=cell.min_timed_s)
    timed: list[Generation] = rounds.outputs
    rounds.last = None  # no round's cache lives on into the asserting pass's peaks
    checked = engine.generate(prompt, cell.new_tokens)  # untimed: KV, memory, CPU per phase

    kv = loaded.kv(cell)
    final = kv.point(checked.cache, cell.final_positions)
    measured_final = (
        checked.kv_bytes_per_step[-1]
        if checked.kv_bytes_per_step
        else checked.kv_bytes_after_prefill
    )
    figures = [
        GenerationFigures(
            e2e_s=t.e2e_s,
            ttft_s=t.ttft_s,
            prefill_s=t.prefill_s,
            step_s=t.step_s,
            gap_s=t.gap_s,
            kv_bytes_after_prefill=checked.kv_bytes_after_prefill,
            kv_bytes_per_step=checked.kv_bytes_per_step,
        )
        for t in timed
    ]
    info.update(
        generation_metrics(figures, prompt_len=cell.prompt_len, e2e_rounds_s=round_times(benchmark))
    )
    memory = [*rounds.peaks, *checked.samples]
    info.update(
        {
            "bookkeeping_per_step_s": bookkeeping_per_step_s(
                checked.gap_s, [g for t in timed for g in t.gap_s]
            ),
            "kv_bytes_per_token": kv.bytes_per_token,
            "kv_analytic_after_prefill_bytes": kv.analytic_bytes(cell.prompt_len),
            "kv_measured_after_prefill_bytes": checked.kv_bytes_after_prefill,
            "kv_analytic_final_bytes": final.analytic_bytes,
            "kv_measured_final_bytes": measured_final,
            **final.fields,
            **kv.extra_fields(None),
            **loaded.weights_fields(),
            **peak_fields(memory),
            "peak_rss_bytes": max_or_none(m.rss_bytes for m in memory),
            "memory_labels": {
                **checked.memory_labels,
                "peak_rss": "largest process RSS sampled at the end of a round or at a phase "
                "boundary (a lower bound)",
            },
            "resource_samples": jsonable(checked.samples),
        }
    )
    progress(
        f"{cell.id}: e2e {info['e2e_s']:.3f} s, ttft {info['ttft_s'] * 1e3:.1f} ms, "
        f"tpot {(info['tpot_s'] or 0.0) * 1e3:.2f} ms, "
        f"bookkeeping {(info['bookkeeping_per_step_s'] or 0.0) * 1e3:.3f} ms/step (untimed)"
    )
    assert not final.mismatches, f"after {cell.new_tokens} tokens: {'; '.join(final.mismatches)}"

    profile_dir = pytestconfig.getoption("profile")
    if not profile_dir:
        # The cell's KV test asserts on this same pass (`suite.handoff`) rather than generate N
        # tokens again; kept only until that next test, never into another cell's peaks.
        handoff.keep(cell.id, checked)
    else:
        del checked  # the profiled generation's memory holds no other cache
        trace = Path(profile_dir) / f"{_file_safe(cell.id)}.trace.json"
        artifact = profile_generation(
            loaded.model, loaded.device, prompt, cell.new_tokens, trace, warmup_generations=0
        )
        info["profile_trace"] = str(artifact.trace_path)
        progress(f"{cell.id}: profile trace {artifact.trace_path}")


def _file_safe(cell_id: str) -> str:
    # `cuda:1` is a fine id but a poor file name on some filesystems.
    return cell_id.replace(":", "_")
