"""Synthetic suites with a host: what the gate must tell apart, machine or code (issue 41).

A suite of 36 benchmarks (12 each of `prefill_s`, `decode_step_s`, `e2e_s`), 20 baseline runs
and the current run (or pooled re-runs), on the log scale:

    log(round) = level_b + code(b, r) + h_r + g_r + u_rb + noise,

- `h_r`, the **host's state** of run r (CV `host_cv`; Student t(`host_tail_df`) for a
  heavy-tailed host), times `host(r)` for a host that moved; the probes see it: a memory probe
  fully, a compute probe at `COMPUTE_GAIN` of it, each point with noise `probe_cv`;
- `g_r`, a suite-wide run effect the probes do not see (CV `other_cv`);
- `u_rb`, the benchmark's own run effect (CV `run_cv`; Student t(`run_tail_df`));
- round noise of CV `round_cv`, t(`round_tail_df`), with `outlier_prob` of rounds preempted.

Re-runs of the current commit either share one host state (`shared_host`: one h and g for
all of them) or draw their own. Every suite is judged with the real code path: run effects
estimated as `metrics` does, probe evidence from `probes.host_evidence`, `judge.judge`.

Deliberately not here: the rows and their expectations (`reports.analysis.gate_rows`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from reports.analysis.levels import run_location
from reports.analysis.noise_model import estimate_run_effects
from reports.analysis.probes import HostEvidence, ProbeRun, host_evidence
from reports.analysis.series import MetricSeries

METRICS = ("prefill_s", "decode_step_s", "e2e_s")
#: How much of the host's state the compute probe sees (an in-cache GEMM moves less than a copy).
COMPUTE_GAIN = 0.5


def metric_of(b: int, benchmarks: int) -> str:
    """Benchmark b's primary metric among `benchmarks`: the first third prefill, then decode,
    then generate (both synthetic worlds)."""
    return METRICS[min(len(METRICS) - 1, b * len(METRICS) // benchmarks)]


#: benchmark index x run index -> the code's factor on that run's level (1.0 = unchanged)
Code = Callable[[int, int], float]
#: run index -> the host's factor in that run (1.0 = its usual state)
Host = Callable[[int], float]


@dataclass(frozen=True)
class HostWorld:
    """The synthetic world (module docstring)."""

    benchmarks: int = 36
    baseline_runs: int = 20
    rounds: int = 3
    round_cv: float = 0.03
    round_tail_df: float = math.inf
    run_cv: float = 0.02
    run_tail_df: float = math.inf
    host_cv: float = 0.01
    host_tail_df: float = math.inf
    other_cv: float = 0.003
    outlier_prob: float = 0.02
    probes: bool = True
    probe_points: int = 24
    probe_cv: float = 0.02
    reruns: int = 1
    shared_host: bool = False

    def metric(self, b: int) -> str:
        """Benchmark b's primary metric (`metric_of`)."""
        return metric_of(b, self.benchmarks)


def draw(rng: random.Random, cv: float, tail_df: float) -> float:
    """One log-scale draw of standard deviation log1p(cv): normal, or unit-variance Student t."""
    sd = math.log1p(cv)
    if math.isinf(tail_df):
        return rng.gauss(0.0, sd)
    t = rng.gauss(0.0, 1.0) / math.sqrt(2.0 * rng.gammavariate(tail_df / 2.0, 1.0) / tail_df)
    return sd * t * math.sqrt((tail_df - 2.0) / tail_df)


def unchanged(b: int, r: int) -> float:
    """The code of no change."""
    del b, r
    return 1.0


def steady(r: int) -> float:
    """A host in its usual state."""
    del r
    return 1.0


@dataclass(frozen=True)
class Suite:
    """One synthetic suite: its series and each machine's probe evidence."""

    series: list[MetricSeries]
    hosts: Mapping[str, HostEvidence | None]


def _rounds(rng: random.Random, world: HostWorld, level: float, effect: float) -> tuple[float, ...]:
    out = []
    for _ in range(world.rounds):
        value = level * math.exp(effect + draw(rng, world.round_cv, world.round_tail_df))
        if rng.random() < world.outlier_prob:
            value *= rng.uniform(1.5, 3.0)
        out.append(value)
    return tuple(out)


def _probe(rng: random.Random, world: HostWorld, state: float, gain: float) -> ProbeRun:
    return ProbeRun(
        tuple(
            0.05 * math.exp(gain * state + rng.gauss(0.0, math.log1p(world.probe_cv)))
            for _ in range(world.probe_points)
        )
    )


def make_suite(
    rng: random.Random, world: HostWorld, code: Code = unchanged, host: Host = steady
) -> Suite:
    """One suite (module docstring): run r < baseline_runs is a baseline run, the rest are the
    current run and its re-runs (the current run last)."""
    n, total = world.baseline_runs, world.baseline_runs + world.reruns
    states: list[tuple[float, float]] = []
    for r in range(total):
        if world.shared_host and r > n:
            states.append(states[n])
            continue
        h = draw(rng, world.host_cv, world.host_tail_df) + math.log(host(r))
        states.append((h, rng.gauss(0.0, math.log1p(world.other_cv))))
    levels = [math.exp(rng.uniform(math.log(1e-3), math.log(2.0))) for _ in range(world.benchmarks)]
    runs = [
        [
            _rounds(
                rng,
                world,
                level * code(b, r),
                h + g + draw(rng, world.run_cv, world.run_tail_df),
            )
            for r, (h, g) in enumerate(states)
        ]
        for b, level in enumerate(levels)
    ]
    table = [[math.log(run_location(runs[b][r])) for b in range(len(levels))] for r in range(n)]
    effects = estimate_run_effects(table)
    series = [
        MetricSeries(
            "sim",
            f"b{b}",
            world.metric(b),
            "timing",
            tuple(rs[:n]),
            rs[-1],
            tuple(rs[n:-1]),
            effects.offsets,
            effects.var,
        )
        for b, rs in enumerate(runs)
    ]
    if not world.probes:
        return Suite(series, {"sim": None})
    probes = [
        {"memory": _probe(rng, world, h, 1.0), "compute": _probe(rng, world, h, COMPUTE_GAIN)}
        for h, _ in states
    ]
    # No drift inside a run here: every benchmark's window reads the run's median point.
    seen = [
        {k: (level, p.point_var) for k, p in run.items() if (level := p.level) is not None}
        for run in probes
    ]
    series = [
        replace(s, baseline_probes=tuple(seen[:n]), current_probes=tuple(seen[n:])) for s in series
    ]
    evidence = host_evidence(probes[:n], effects.offsets, probes[n:])
    return Suite(series, {"sim": evidence})
