"""Overhead: what the owned engine costs over a bare forward loop and over HF `generate`.

The benchmark statistic is the **bare** decode step at context P (`model(...)` + argmax, nothing
else), timed round after round like `test_decode` times the engine's step (the cache is restored
to P in each round's untimed `setup`): the floor the engine is compared to.

After the rounds, `harness.overhead.measure_overhead` runs the interleaved comparison of whole
loops of N tokens (a bare prefill; the bare loop, which syncs and copies every token to the host
as a client does; the engine's client loop `Engine.client_generate`, which test_generate times;
the instrumented `Engine.generate`, the untimed pass the suite asserts KV bytes on; HF
`model.generate` with exactly N tokens, warmed by one untimed call first; ABCDE EDCBA ... over
the cell's rounds, medians) and records in `extra_info`: `bare_generate_token_s`,
`engine_generate_token_s`, `instrumented_generate_token_s`, `hf_generate_token_s`,
`overhead_vs_bare`, `overhead_vs_hf_generate` (None when N = 1), `bookkeeping_per_step_s` (the
instrumented loop's median gap minus the client loop's: the per-step cost of the resource
recording, kept out of every timed figure), `overhead_prefill_s`, `overhead_rounds`,
`overhead_new_tokens`. See docs/measurement.md for the method.
"""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.harness.overhead import BareLoop, measure_overhead
from benchmarks.harness.records import median
from benchmarks.suite.rounds import CellRun, Rounds, round_times, start_record

MEASUREMENT = "overhead"
# The harness's overhead is a property of the model and device, not of P, N or B: once per
# (model, device, dtype) keeps its HF-generate comparison from dominating a long matrix.
ONE_CELL_PER_BUILD = True


def test_overhead(run: CellRun, benchmark: Any) -> None:
    """Time the bare decode step at context P; record the engine's overhead ratios."""
    info = start_record(benchmark, run, MEASUREMENT)
    cell, loaded, progress = run.cell, run.loaded, run.progress
    engine = loaded.engine
    bare = BareLoop(loaded.model, loaded.device)
    prefill = engine.prefill(run.prompt)
    snapshot = engine.snapshot(prefill.cache)
    token = prefill.next_token
    del prefill

    def restore() -> tuple[torch.Tensor, Any]:
        return token, engine.restore(snapshot)

    def step(state: tuple[torch.Tensor, Any]) -> tuple[torch.Tensor, Any]:
        return bare.decode_step(*state)

    progress(f"{cell.id}: bare decode step at context {cell.prompt_len}, {cell.rounds} round(s)")
    Rounds(step, restore).pedantic(benchmark, cell.rounds)
    rounds_s = round_times(benchmark)

    progress(
        f"{cell.id}: bare vs engine vs instrumented vs HF generate, "
        f"{cell.rounds} interleaved round(s) ..."
    )
    # The cell is warm (the `run` fixture ran its warmup generations); measure_overhead runs
    # every loop once untimed anyway, for HF generate's own first-call costs.
    result = measure_overhead(
        loaded.model,
        loaded.device,
        run.prompt,
        cell.new_tokens,
        rounds=cell.rounds,
        warmup_rounds=0,
    )
    info.update(
        {
            "context_len": cell.prompt_len,
            "bare_decode_step_s": median(rounds_s) if rounds_s else None,
            **result.to_extra_info(),
        }
    )
    ratios = (result.overhead_vs_bare, result.overhead_vs_hf_generate)
    progress(
        f"{cell.id}: overhead vs bare {ratios[0]}, vs HF generate {ratios[1]}, "
        f"bookkeeping {result.bookkeeping_per_step_s} s/step (untimed)"
    )
