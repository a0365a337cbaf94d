"""Measure the gate on synthetic suites: false alarms when nothing changed, detection of slowdowns.

`python -m reports simulate --seed 1` builds suites of `benchmarks` benchmarks with realistic
noise (log-normal round noise of CV `round_cv`, a run effect of CV `run_cv` shared by the
rounds of one run of one benchmark, a suite-wide run effect of CV `suite_run_cv` shared by every
benchmark of a run, occasional outlier rounds 1.5-3x slower), `baseline_runs` baseline runs and
`current_runs` current runs (re-runs of the PR commit, pooled by phasebench), then judges them
three ways:

- phasebench's verdicts (`analysis.judge_suite`, default configuration);
- pytest-benchmark's `--benchmark-compare-fail=mean:5%` and `mean:10%`: the current run's mean
  against the previous run's mean only (what `--benchmark-compare` does).

For the A/A scenario (nothing changed) it reports the share of suites with any `fail`; for each
slowdown (5, 10, 15 %, applied to `slowed` benchmarks per suite) the share of slowed benchmarks
that fail (detection) and the share of suites with a false `fail` among the unchanged ones.

The issue-13 scenarios (torch upgrade, +4.5 %, burst run, shard retry, two local runs) are
`reports.scenarios`; `python -m reports simulate` prints both tables.

Deterministic for a given seed. Pure apart from printing in `format_table`.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from reports.analysis.judge import judge_suite
from reports.analysis.levels import run_location
from reports.analysis.noise_model import estimate_run_effects
from reports.analysis.series import AnalysisConfig, MetricSeries


@dataclass(frozen=True)
class SimulationConfig:
    """The synthetic world: suite size, history length and noise."""

    benchmarks: int = 100
    baseline_runs: int = 20
    rounds: int = 5
    round_cv: float = 0.03
    run_cv: float = 0.02
    outlier_prob: float = 0.02
    suites: int = 200
    slowed: int = 10
    seed: int = 1
    current_runs: int = 1
    suite_run_cv: float = 0.01
    #: Degrees of freedom of the Student-t round noise (inf = log-normal; 3 = heavy tails);
    #: the run effects stay log-normal.
    round_tail_df: float = math.inf


@dataclass(frozen=True)
class ScenarioResult:
    """Outcome of one scenario for the three gates."""

    slowdown: float
    suites: int
    any_false_fail: dict[str, float]
    detection: dict[str, float]


GATES = ("phasebench", "compare-fail mean:5%", "compare-fail mean:10%")


def _noise(rng: random.Random, cv: float, tail_df: float) -> float:
    """One log-scale draw of standard deviation ~log1p(cv): normal, or Student t (heavy tails)."""
    sd = math.log1p(cv)
    if math.isinf(tail_df):
        return rng.gauss(0.0, sd)
    # t(df) scaled to unit variance: Z / sqrt(V / df) * sqrt((df - 2) / df)
    chi2 = 2.0 * rng.gammavariate(tail_df / 2.0, 1.0)
    t = rng.gauss(0.0, 1.0) / math.sqrt(chi2 / tail_df)
    return sd * t * math.sqrt((tail_df - 2.0) / tail_df) if tail_df > 2 else sd * t


def draw_run(
    rng: random.Random, level_s: float, sim: SimulationConfig, suite_effect: float
) -> tuple[float, ...]:
    """One run's rounds (seconds) of a benchmark at `level_s` in a run with `suite_effect`."""
    run_effect = suite_effect + rng.gauss(0.0, math.log1p(sim.run_cv))
    rounds = []
    for _ in range(sim.rounds):
        value = level_s * math.exp(run_effect + _noise(rng, sim.round_cv, sim.round_tail_df))
        if rng.random() < sim.outlier_prob:
            value *= rng.uniform(1.5, 3.0)
        rounds.append(value)
    return tuple(rounds)


def simulate_suite(
    rng: random.Random, sim: SimulationConfig, slowdown: float
) -> tuple[list[MetricSeries], list[bool]]:
    """One synthetic suite: its series and which benchmarks were slowed by `slowdown`."""
    slowed = set(rng.sample(range(sim.benchmarks), sim.slowed)) if slowdown > 0 else set()
    sd = math.log1p(sim.suite_run_cv)
    base_effects = [rng.gauss(0.0, sd) for _ in range(sim.baseline_runs)]
    cur_effects = [rng.gauss(0.0, sd) for _ in range(sim.current_runs)]
    levels = [math.exp(rng.uniform(math.log(1e-3), math.log(2.0))) for _ in range(sim.benchmarks)]
    baselines = [tuple(draw_run(rng, lv, sim, e) for e in base_effects) for lv in levels]
    # the gate removes each baseline run's suite-wide effect, estimated over all benchmarks
    currents = [
        [draw_run(rng, lv * (1.0 + slowdown if b in slowed else 1.0), sim, e) for e in cur_effects]
        for b, lv in enumerate(levels)
    ]
    effects = estimate_run_effects(
        [[math.log(run_location(b[r])) for b in baselines] for r in range(sim.baseline_runs)]
    )
    series: list[MetricSeries] = []
    for b in range(len(levels)):
        runs = currents[b]
        series.append(
            MetricSeries(
                "sim",
                f"bench_{b}",
                "time_s",
                "timing",
                baselines[b],
                runs[-1],
                tuple(runs[:-1]),
                effects.offsets,
                effects.var,
            )
        )
    return series, [b in slowed for b in range(sim.benchmarks)]


def compare_fail(series: MetricSeries, pct: float) -> bool:
    """pytest-benchmark `--benchmark-compare-fail=mean:PCT%` against the previous run only."""
    if series.current is None or not series.baseline:
        return False
    previous = statistics.fmean(series.baseline[-1])
    return (statistics.fmean(series.current) - previous) / previous * 100.0 > pct


def run_scenario(
    sim: SimulationConfig, slowdown: float, config: AnalysisConfig | None = None
) -> ScenarioResult:
    """Judge `sim.suites` suites with every benchmark in `slowed` slowed by `slowdown`."""
    cfg = config or AnalysisConfig()
    rng = random.Random(f"{sim.seed}-{slowdown}")
    any_false = dict.fromkeys(GATES, 0)
    detected = dict.fromkeys(GATES, 0)
    slowed_total = 0
    for _ in range(sim.suites):
        series, slowed = simulate_suite(rng, sim, slowdown)
        ours = [v.verdict == "fail" for v in judge_suite(series, cfg)]
        flags = {
            GATES[0]: ours,
            GATES[1]: [compare_fail(s, 5.0) for s in series],
            GATES[2]: [compare_fail(s, 10.0) for s in series],
        }
        slowed_total += sum(slowed)
        for gate, fails in flags.items():
            if any(f and not s for f, s in zip(fails, slowed, strict=True)):
                any_false[gate] += 1
            detected[gate] += sum(f and s for f, s in zip(fails, slowed, strict=True))
    return ScenarioResult(
        slowdown=slowdown,
        suites=sim.suites,
        any_false_fail={g: any_false[g] / sim.suites for g in GATES},
        detection={g: (detected[g] / slowed_total if slowed_total else math.nan) for g in GATES},
    )


def run_all(
    sim: SimulationConfig,
    slowdowns: Sequence[float] = (0.0, 0.05, 0.10, 0.15),
    config: AnalysisConfig | None = None,
) -> list[ScenarioResult]:
    """Every scenario, A/A first."""
    return [run_scenario(sim, s, config) for s in slowdowns]


def format_table(
    sim: SimulationConfig, results: Sequence[ScenarioResult], config: AnalysisConfig | None = None
) -> str:
    """A Markdown table of the results, with the simulated world in a header line."""
    cfg = config or AnalysisConfig()
    lines = [
        f"{sim.suites} suites x {sim.benchmarks} benchmarks; {sim.baseline_runs} baseline runs "
        f"x {sim.rounds} rounds; {sim.current_runs} current run(s); round CV "
        f"{sim.round_cv:.0%}, run-to-run CV {sim.run_cv:.0%} per benchmark + "
        f"{sim.suite_run_cv:.0%} suite-wide, "
        f"outlier rounds {sim.outlier_prob:.0%} (1.5-3x); {sim.slowed} benchmarks slowed per "
        f"suite; seed {sim.seed}; phasebench threshold {cfg.threshold:.0%}, Holm level {cfg.alpha}",
        "",
        "| scenario | gate | suites with a false fail | slowed benchmarks detected |",
        "| --- | --- | ---: | ---: |",
    ]
    for r in results:
        name = "A/A (no change)" if r.slowdown == 0 else f"{r.slowdown:.0%} slowdown"
        for gate in GATES:
            det = "-" if math.isnan(r.detection[gate]) else f"{r.detection[gate]:.1%}"
            lines.append(f"| {name} | {gate} | {r.any_false_fail[gate]:.1%} | {det} |")
    return "\n".join(lines)
