"""The issue-17 rows on synthetic suites: heavy tails, few rounds, a recent step, a recurring
state, drift, process interleave. Each row judges seeded suites with the real verdict code
(`judge_suite`, the run effects and `flags.drift`; A/B's paired judgement for the
process-interleave rows) and reports realised rates, so a reader sees what the defaults give.

The history world: 36 benchmarks, 20 baseline runs, Student-t(3) round noise (heavy tails),
round CV 3 %, run CV 2 % per benchmark + 1 % suite-wide, and 2 % of rounds preempted (1.5-3x
slower); the A/B world is in `process_run`. `python -m reports simulate` prints the table.

Deliberately not here: the CLI-level scenarios (`reports.scenarios`), the generic grid
(`simulate`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from reports.analysis.changepoints import detect_steps_detrended
from reports.analysis.flags import drift
from reports.analysis.judge import judge_suite
from reports.analysis.levels import run_location
from reports.analysis.noise_model import estimate_run_effects
from reports.analysis.paired import (
    PROCESS_INTERLEAVE_CV,
    judge_pairs,
    judge_process_run,
    process_run_term,
)
from reports.analysis.series import AnalysisConfig, MetricSeries
from reports.analysis.simulate import SimulationConfig, draw_run

#: Per-pair noise of the process-interleave rows (the 2-core VM's tiny-model pairs).
PAIR_CV = 0.13
#: Benchmark index x run index -> the factor on that run's true level (1.0 = unchanged).
Factor = Callable[[int, int], float]


@dataclass(frozen=True)
class World:
    """The synthetic suite (module docstring)."""

    benchmarks: int = 36
    baseline_runs: int = 20
    rounds: int = 3
    tail_df: float = 3.0
    current_rounds: int | None = None  # the current run's rounds (None: `rounds`)

    def sim(self, rounds: int | None = None) -> SimulationConfig:
        """The same world in `simulate`'s terms (its round and run generator)."""
        return SimulationConfig(
            benchmarks=self.benchmarks,
            baseline_runs=self.baseline_runs,
            rounds=rounds or self.rounds,
            round_tail_df=self.tail_df,
        )


def make_suite(
    rng: random.Random,
    world: World,
    factor: Factor,
    host: Callable[[int], float] | None = None,
) -> list[MetricSeries]:
    """One suite: `factor(b, r)` scales benchmark b's level in run r (r = baseline_runs is the
    current run), `host(r)` every benchmark of run r (a whole-run shift: a burst, the host's
    level); run effects estimated as the gate does."""
    sim = world.sim()
    current = world.sim(world.current_rounds)
    sd = math.log1p(sim.suite_run_cv)
    n = world.baseline_runs
    effects = [rng.gauss(0.0, sd) + (math.log(host(r)) if host else 0.0) for r in range(n + 1)]
    levels = [math.exp(rng.uniform(math.log(1e-3), math.log(2.0))) for _ in range(sim.benchmarks)]
    runs = [
        [
            draw_run(rng, lv * factor(b, r), sim if r < n else current, effects[r])
            for r in range(n + 1)
        ]
        for b, lv in enumerate(levels)
    ]
    table = [[math.log(run_location(runs[b][r])) for b in range(len(levels))] for r in range(n)]
    fx = estimate_run_effects(table)
    return [
        MetricSeries(
            "sim", f"b{b}", "time_s", "timing", tuple(rs[:n]), rs[n], (), fx.offsets, fx.var
        )
        for b, rs in enumerate(runs)
    ]


def fails(series: Sequence[MetricSeries], config: AnalysisConfig | None = None) -> list[bool]:
    """Which benchmarks of a suite fail."""
    return [v.verdict == "fail" for v in judge_suite(series, config or AnalysisConfig())]


@dataclass(frozen=True)
class Row:
    """One row of the table: what it simulates, what a reader expects, what it measured."""

    name: str
    expected: str
    measured: str


def _false_and_caught(
    rng: random.Random, world: World, suites: int, slowdown: float
) -> tuple[float, float]:
    false = caught = total = 0
    for _ in range(suites):
        slowed = set(rng.sample(range(world.benchmarks), 6)) if slowdown else set()
        n = world.baseline_runs

        def factor(b: int, r: int, s: set[int] = slowed, last: int = n) -> float:
            return 1.0 + slowdown if b in s and r == last else 1.0

        f = fails(make_suite(rng, world, factor))
        false += any(x for b, x in enumerate(f) if b not in slowed)
        caught += sum(f[b] for b in slowed)
        total += len(slowed)
    return false / suites, (caught / total if total else math.nan)


def heavy_tail_rows(suites: int, seed: int) -> list[Row]:
    """A/A and 25 % slowdowns (6 of 36) at 2 and 3 rounds."""
    out = []
    for rounds in (2, 3):
        world = World(rounds=rounds)
        aa, _ = _false_and_caught(random.Random(f"{seed}-aa-{rounds}"), world, suites, 0.0)
        fa, det = _false_and_caught(random.Random(f"{seed}-25-{rounds}"), world, suites, 0.25)
        out.append(
            Row(
                f"heavy tails, {rounds} rounds: A/A; 6 benchmarks 25 % slower",
                "<= 1 in 20 suites with a false fail; >= 80 % caught at 3 rounds",
                f"A/A {aa:.1%} suites with a false fail; 25 %: {det:.1%} caught, "
                f"{fa:.1%} suites with a false fail",
            )
        )
    return out


def recent_step_row(suites: int, seed: int) -> Row:
    """Main merged +15 % on 6 benchmarks 1-4 runs before an unchanged PR."""
    rng = random.Random(f"{seed}-step")
    world, false = World(), 0
    for t in range(suites):
        ago = 1 + t % 4
        start = world.baseline_runs - ago
        stepped = set(rng.sample(range(world.benchmarks), 6))

        def factor(b: int, r: int, s: set[int] = stepped, at: int = start) -> float:
            return 1.15 if b in s and r >= at else 1.0

        false += any(fails(make_suite(rng, world, factor)))
    return Row(
        "main stepped +15 % (6 benchmarks) 1-4 runs before an unchanged PR",
        "no fail",
        f"{false / suites:.1%} suites with a fail",
    )


def recurring_row(suites: int, seed: int) -> Row:
    """One benchmark 1.25x slow in 15 % of runs; the PR's run is in that state.

    Reported by how often the 20-run window saw the state: a state the window never saw (4 %
    of windows) is, by any rule that learns from history, indistinguishable from a regression;
    once (14 %) it is a lone burst, which the issue allows to be set aside; twice or more, it
    is the baseline's own spread, and the promise is <= alpha.
    """
    rng = random.Random(f"{seed}-recurring")
    world = World(rounds=5, tail_df=math.inf)
    total = [0, 0, 0]  # suites whose window saw the state 0, 1, >= 2 times
    failed = [0, 0, 0]
    for _ in range(suites):
        states = [rng.random() < 0.15 for _ in range(world.baseline_runs)] + [True]

        def factor(b: int, r: int, st: list[bool] = states) -> float:
            return 1.25 if b == 0 and st[r] else 1.0

        seen = min(sum(states[:-1]), 2)
        total[seen] += 1
        failed[seen] += fails(make_suite(rng, world, factor))[0]
    rates = [f"{f / max(n, 1):.1%} of {n}" for f, n in zip(failed, total, strict=True)]
    return Row(
        "one benchmark 1.25x slow in 15 % of runs; the PR's run is in it",
        "<= alpha (1 %) fail where the baseline saw the state",
        f"{sum(failed) / suites:.1%} fail; by sightings in the window: twice or more "
        f"{rates[2]}, once {rates[1]}, never {rates[0]}",
    )


def drift_row(suites: int, seed: int) -> Row:
    """0.5 % per run over 60 runs: is it named, and how many steps are found?"""
    rng = random.Random(f"{seed}-drift")
    world = replace(World(rounds=5, tail_df=math.inf), baseline_runs=59)
    named = steps = total = 0
    for _ in range(suites):
        series = make_suite(rng, world, lambda b, r: 1.005**r)
        for s in series[:12]:
            logs = [math.log(run_location(v)) for v in (*s.baseline, s.current or ())]
            named += drift(logs, 0.05) is not None
            steps += len(detect_steps_detrended(logs))
            total += 1
    return Row(
        "slow drift, +0.5 % per run over 60 runs (+35 %)",
        "named as drift; no fictitious steps",
        f"drift named for {named / total:.0%} of benchmarks; "
        f"{steps / total:.1f} steps per benchmark",
    )


def process_run(
    rng: random.Random,
    spread: float,
    shifts: Sequence[float],
    term: float | None = None,
    common: float = 0.0,
) -> list[str]:
    """One `--interleave process` A/B run judged as `reports.ab` judges it: verdicts per timing.

    Each timing has 100 pairs of log-ratios: the two processes' level difference at that time
    (normal, SD `spread`, one draw per timing shared by its pairs), the timing's own change, and
    t(3) pair noise of 13 % (the VM's tiny-model pairs). In the VM's 20 A/A process runs the 49
    levels lay within 1.8-3.4 robust SDs of their median but for two timings (2.2x and 2.3x,
    5.5 and 6.7 SDs out), both unstable (the ratio shifted mid-run) and so inconclusive; the
    pairs here are stationary, so this row tests the term alone. The term is the run's own
    spread across its timings, at least `PROCESS_INTERLEAVE_CV` (`term` replaces it: the fixed
    3 % of the issue, to show what it did). `common` moves every timing of the head together
    (a job during the head process's window).
    """

    def t3() -> float:  # unit-variance Student t(3), drawn as the rows' seeds were calibrated
        return rng.gauss(0, 1) / math.sqrt(rng.gammavariate(1.5, 2.0) / 3) / math.sqrt(3)

    timings = []
    for shift in shifts:
        level = math.log1p(shift) + math.log1p(common) + rng.gauss(0.0, spread)
        timings.append([level + PAIR_CV * t3() for _ in range(100)])
    if term is None:
        found = process_run_term(timings, PROCESS_INTERLEAVE_CV, 0.01)
        judged = judge_process_run(timings, [0.05] * len(timings), found, 0.01)
    else:
        judged = judge_pairs(timings, [0.05] * len(timings), term, alpha=0.01)
    return ["inconclusive" if unstable else d.outcome for _, d, unstable in judged]


def process_interleave_rows(suites: int, seed: int) -> list[Row]:
    """`--interleave process`, 49 timings (the smoke matrix's): A/A, and 6 timings 25 % slower,
    where the processes' levels spread 30 % (the 2-core VM) and 2 % (a quiet machine)."""
    out = []
    for spread in (0.30, 0.02):
        rng = random.Random(f"{seed}-process-{spread}")
        aa = sum("fail" in process_run(rng, spread, [0.0] * 49) for _ in range(suites))
        caught = false = 0
        for _ in range(suites):
            verdicts = process_run(rng, spread, [0.25] * 6 + [0.0] * 43)
            caught += verdicts[:6].count("fail")
            false += "fail" in verdicts[6:]
        out.append(
            Row(
                f"A/B `--interleave process`, processes' levels spread {spread:.0%}: A/A; "
                "6 of 49 timings 25 % slower",
                "A/A <= 1 in 20 runs with a fail",
                f"A/A {aa / suites:.1%} runs with a fail; 25 %: {caught / (6 * suites):.1%} "
                f"caught, {false / suites:.1%} runs with a false fail",
            )
        )
    rng = random.Random(f"{seed}-process-job")
    job = sum("fail" in process_run(rng, 0.02, [0.0] * 49, common=0.3) for _ in range(suites))
    out.append(
        Row(
            "A/B `--interleave process`, A/A, a job during the head's window: every head timing "
            "x1.3",
            "fails (nothing is re-centred in A/B mode; the shift is said)",
            f"{job / suites:.1%} runs with a fail",
        )
    )
    return out


def rows(suites: int = 40, seed: int = 1) -> list[Row]:
    """Every row, `suites` seeded suites each."""
    return [
        *heavy_tail_rows(suites, seed),
        recent_step_row(suites, seed),
        recurring_row(suites * 3, seed),
        drift_row(max(2, suites // 10), seed),
        *process_interleave_rows(suites, seed),
    ]


def format_rows(table: Sequence[Row], suites: int, world: str = "") -> str:
    """A Markdown table of the rows; `world` describes their synthetic world (default: this
    module's)."""
    lines = [
        f"{suites} suites per row; "
        + (
            world
            or "36 benchmarks, 20 baseline runs; t(3) round noise, CV 3 %, run CV 2 % + 1 % "
            "suite-wide, 2 % of rounds preempted 1.5-3x"
        ),
        "",
        "| scenario | a reader expects | measured |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {r.name} | {r.expected} | {r.measured} |" for r in table]
    return "\n".join(lines)
