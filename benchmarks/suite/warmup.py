"""The `warmed` fixture: each cell's untimed warmup, run once per cell and shared by its tests.

Fixed (the matrix's `warmup` generations) or, with `--warmup-until-stable`, until the CV of the
last generations is under the bound; torch.compile's first calls (compile_s) come first. The
thermal state is sampled before it. Registered by `benchmarks/conftest.py`, which imports it.
Deliberately not here: the timed rounds (the `test_*.py` modules).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest
import torch

from benchmarks.harness.cellmodel import CellModel
from benchmarks.harness.device.devices import device_sync
from benchmarks.harness.device.fpstate import pin_fp_state
from benchmarks.harness.device.noise import thermal_state, warmup_until_stable
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.runmode.compiled import cuda_graphs_kept, first_calls
from benchmarks.suite.configure import STABLE, stable_policy_label
from benchmarks.suite.rounds import Progress, Warmup

WARMUPS = pytest.StashKey["dict[str, Warmup]"]()


@pytest.fixture
def warmed(
    pytestconfig: pytest.Config,
    cell: Cell,
    loaded: CellModel,
    prompt: torch.Tensor,
    progress: Progress,
) -> Warmup:
    """Run the matrix's warmup (whole generations of N tokens) once per cell, untimed.

    A whole generation warms every shape the cell's measurements use: the prefill at [B, P] and
    decode steps at every context length P..P+N-1 (allocator pools, kernel selection, lazy
    initialisation). The first generation is kept: for the first cell of a model it is the
    cold-start cost right after the build. Every measurement of the cell records the same figures.

    With `--warmup-until-stable` the count is not fixed: generations run until the CV of the
    last k generation times (their e2e) is under the bound, at least the cell's `warmup` (and
    one) and at most `--stable-max`. The thermal state is sampled before the warmup either way.
    """
    done = pytestconfig.stash.setdefault(WARMUPS, {})
    if cell.id in done:
        return done[cell.id]
    stable = pytestconfig.stash[STABLE]
    thermal_before = thermal_state(loaded.device)

    # torch.compile (DESIGN §9): dynamo reset, first calls timed (compile_s), shapes warmed.
    def say(line: str) -> None:
        progress(f"{cell.id}: {line}")

    run_mode = first_calls(loaded.engine, prompt, cell.new_tokens, cell.compile, say)
    # Loading compiled code may change FTZ/DAZ (a `-ffast-math` library does): warm up, as the
    # rounds run, in the pinned state.
    pin_fp_state()
    if stable is None and cell.warmup == 0:
        done[cell.id] = Warmup(
            generations=0,
            seconds=0.0,
            first_e2e_s=None,
            policy="fixed:0",
            final_cv=None,
            thermal_before=thermal_before,
            run_mode=run_mode,
        )
        return done[cell.id]
    e2e_s: list[float] = []

    def generation() -> float:
        # Keep figures only, never a generation's cache: a long matrix must not hold old caches.
        e2e_s.append(loaded.engine.client_generate(prompt, cell.new_tokens).e2e_s)  # the timed loop
        return e2e_s[-1]

    what = f"generation(s) of {cell.new_tokens} tokens"
    final_cv: float | None = None
    if stable is None:
        policy = f"fixed:{cell.warmup}"
        progress(f"{cell.id}: warmup, {cell.warmup} {what} ...")
    else:
        policy = stable_policy_label(stable)
        stable = replace(stable, min_rounds=max(1, cell.warmup))
        span = f"{stable.min_rounds}-{stable.max_rounds}"
        progress(f"{cell.id}: warmup until stable, {span} {what} ...")
    device_sync(loaded.device)
    started = time.perf_counter()
    summary = ""
    graphs = bool(run_mode.get("compile_cuda_graphs"))
    with cuda_graphs_kept(graphs, cell.compile, "warmup"):  # no fallback to eager on the way
        if stable is None:
            for _ in range(cell.warmup):
                generation()
        else:
            outcome = warmup_until_stable(generation, stable)
            # inf (a non-positive mean) is not JSON; None says "no usable CV".
            if outcome.final_cv is not None and math.isfinite(outcome.final_cv):
                final_cv = outcome.final_cv
            verdict = "stable" if outcome.stable else "NOT stable, stopped at --stable-max"
            cv = math.nan if outcome.final_cv is None else outcome.final_cv
            summary = f": {outcome.rounds} generation(s), last CV {cv:.3f}, {verdict}"
    seconds = time.perf_counter() - started
    progress(f"{cell.id}: warmup done in {seconds:.1f} s{summary}")
    done[cell.id] = Warmup(
        generations=len(e2e_s),
        seconds=seconds,
        first_e2e_s=e2e_s[0],
        policy=policy,
        final_cv=final_cv,
        thermal_before=thermal_before,
        run_mode=run_mode,
    )
    return done[cell.id]
