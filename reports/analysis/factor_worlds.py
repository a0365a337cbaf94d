"""Synthetic suites on a host like the ones users have (issue 51): several host factors, each
benchmark feeling them by its own sensitivities, drift inside a run, heavy tails, and code that
can leak into the probes.

A suite of `benchmarks` timings (a third each `prefill_s`, `decode_step_s`, `e2e_s`),
`baseline_runs` baseline runs and the current run, on the log scale:

    log(round of b in run r) = level_b + code(b, r)
                               + sum_f s_bf * (h_rf + drift_rf * (t_b - 1/2)) + u_rb + noise

- `h_rf`: host factor f's state in run r (`Factor.cv`, Student t(`Factor.tail_df`)), times
  `host(f, r)` for a host that moved; `drift_rf` moves it across the run (`drift_cv`), so a
  benchmark early in the run and one late feel different hosts;
- `s_bf`: benchmark b's sensitivity to factor f, drawn per suite from its metric's range
  (`SENSITIVITY`: decode steps feel memory bandwidth, prefill the cores, generation both);
- `t_b`: the middle of b's window, in run time (0..1); benchmarks run in a shuffled order;
- `u_rb`: the benchmark's own run effect (`run_cv`, t(`run_tail_df`)), round noise `round_cv`;
- probe kind f ("memory", "compute") follows factor f at `probe_points` evenly spaced times of
  each run, each point within `probe_cv`; `leak` of the code's mean log move reaches every probe
  point (a process-wide change by the code, set at its import, felt by in-process probes; 0
  for probes in a process of their own).

Each benchmark's series carries the probe levels of its own window (`timeline.Timeline.at`), as
`metrics.comparison_series` builds them from history; the host's evidence is
`probes.host_evidence` as in `worlds`. Judged with the real code path (`judge.judge`).

Deliberately not here: the rows (`gate_rows`), the issue-41 one-factor world (`worlds`).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from reports.analysis.levels import run_location
from reports.analysis.noise_model import estimate_run_effects
from reports.analysis.probes import ProbeRun, host_evidence
from reports.analysis.series import MetricSeries
from reports.analysis.timeline import Timeline
from reports.analysis.worlds import Suite, draw, metric_of

#: Each metric's sensitivity range to (memory, compute), drawn uniformly per benchmark.
SENSITIVITY = {
    "prefill_s": ((0.0, 0.3), (0.7, 1.0)),
    "decode_step_s": ((0.8, 1.0), (0.0, 0.2)),
    "e2e_s": ((0.5, 0.9), (0.1, 0.4)),
}
KINDS = ("memory", "compute")
#: benchmark index x run index -> the code's factor (1.0 = unchanged)
Code = Callable[[int, int], float]
#: factor index x run index -> the host factor's multiplier in that run (1.0 = usual)
FactorHost = Callable[[int, int], float]


@dataclass(frozen=True)
class Factor:
    """One host factor: its run-to-run spread (CV) and tail."""

    cv: float
    tail_df: float = math.inf


@dataclass(frozen=True)
class FactorWorld:
    """The world (module docstring); defaults: issue 51's two-factor host."""

    benchmarks: int = 36
    baseline_runs: int = 20
    rounds: int = 5
    round_cv: float = 0.02
    run_cv: float = 0.01
    run_tail_df: float = math.inf
    factors: tuple[Factor, ...] = (Factor(0.08), Factor(0.03))
    drift_cv: float = 0.02
    probe_points: int = 10
    probe_cv: float = 0.01
    leak: float = 0.0
    outlier_prob: float = 0.0

    def metric(self, b: int) -> str:
        """Benchmark b's metric (`worlds.metric_of`)."""
        return metric_of(b, self.benchmarks)


def unchanged(b: int, r: int) -> float:
    """The code of no change."""
    del b, r
    return 1.0


def usual(f: int, r: int) -> float:
    """Every host factor in its usual state."""
    del f, r
    return 1.0


def _sensitivities(rng: random.Random, world: FactorWorld) -> list[list[float]]:
    out = []
    for b in range(world.benchmarks):
        ranges = SENSITIVITY[world.metric(b)]
        out.append(
            [rng.uniform(*ranges[f]) if f < len(ranges) else 0.0 for f in range(len(world.factors))]
        )
    return out


def make_factor_suite(
    rng: random.Random, world: FactorWorld, code: Code = unchanged, host: FactorHost = usual
) -> Suite:
    """One suite (module docstring): runs 0..baseline_runs-1 are the baseline, the last the
    current run."""
    n = world.baseline_runs
    total = n + 1
    m = world.benchmarks
    sens = _sensitivities(rng, world)
    levels = [math.exp(rng.uniform(math.log(1e-3), math.log(2.0))) for _ in range(m)]
    runs: list[list[tuple[float, ...]]] = [[] for _ in range(m)]
    window_levels: list[list[dict[str, tuple[float, float]]]] = [[] for _ in range(m)]
    probe_runs: list[dict[str, ProbeRun]] = []
    for r in range(total):
        state = [
            draw(rng, f.cv, f.tail_df) + math.log(host(i, r)) for i, f in enumerate(world.factors)
        ]
        drift = [rng.gauss(0.0, math.log1p(world.drift_cv)) for _ in world.factors]
        order = list(range(m))
        rng.shuffle(order)
        slot = {b: i for i, b in enumerate(order)}

        def factor_at(f: int, t: float, st: list[float] = state, dr: list[float] = drift) -> float:
            return st[f] + dr[f] * (t - 0.5)

        # a process-wide change by the code (threads, default dtype) set when it is imported:
        # in-process probes feel `leak` of the code's mean move at every point of the run
        leaked = world.leak * statistics.fmean(math.log(code(b, r)) for b in range(m))
        times = [i / (world.probe_points - 1) for i in range(world.probe_points)]
        points: dict[str, list[tuple[float, float]]] = {k: [] for k in KINDS}
        for t in times:
            for f, kind in enumerate(KINDS[: len(world.factors)]):
                value = factor_at(f, t) + leaked + rng.gauss(0.0, math.log1p(world.probe_cv))
                points[kind].append((t * m, math.log(0.05) + value))
        line = Timeline(
            {k: tuple(v) for k, v in points.items() if v},
            {k: math.log1p(world.probe_cv) for k in points},
        )
        probe_runs.append(
            {k: ProbeRun(tuple(math.exp(v) for _, v in pts)) for k, pts in points.items() if pts}
        )
        for b in range(m):
            t = (slot[b] + 0.5) / m
            host_move = sum(sens[b][f] * factor_at(f, t) for f in range(len(world.factors)))
            effect = host_move + draw(rng, world.run_cv, world.run_tail_df)
            rounds = []
            for _ in range(world.rounds):
                value = (
                    levels[b] * code(b, r) * math.exp(effect + draw(rng, world.round_cv, math.inf))
                )
                if rng.random() < world.outlier_prob:
                    value *= rng.uniform(1.5, 3.0)
                rounds.append(value)
            runs[b].append(tuple(rounds))
            window = (float(slot[b]), float(slot[b] + 1))
            window_levels[b].append(line.levels(window))
    table = [[math.log(run_location(runs[b][r])) for b in range(m)] for r in range(n)]
    effects = estimate_run_effects(table)
    series = [
        MetricSeries(
            "sim",
            f"b{b}",
            world.metric(b),
            "timing",
            tuple(runs[b][:n]),
            runs[b][-1],
            (),
            effects.offsets,
            effects.var,
            baseline_probes=tuple(window_levels[b][:n]),
            current_probes=(window_levels[b][-1],),
        )
        for b in range(m)
    ]
    evidence = host_evidence(probe_runs[:n], effects.offsets, probe_runs[n:])
    return Suite(series, {"sim": evidence})
