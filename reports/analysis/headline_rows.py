"""The issue-28 rows: does the headline claim only what the data support?

Each row judges seeded suites of `robustness.World` (36 benchmarks, 20 baseline runs, t(3)
round noise, 2 % preempted rounds) with the real judgement (`judge.judge`) and reports how
often the headline would read PASS, FAIL or INCONCLUSIVE (`SuiteJudgement.outcome`), so that
a reader sees what the defaults give:

- six of 36 benchmarks 10 % slower at 3 rounds, each undecided: not PASS (the lean);
- every timing 10 % slower in the current run, no host probe: no fail, not PASS (machine or
  code, `reports.analysis.gate_rows` has the worlds with probes);
- round counts that differ (3 against 60): no fail from the count alone, the interval's
  coverage, slowdowns still caught;
- main's newest run a whole-suite burst: it does not become the level the PR matches.

`python -m reports simulate` prints the table.

Deliberately not here: the rules themselves (`judge`, `shift`, `levels`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from reports.analysis.judge import judge
from reports.analysis.robustness import Factor, Row, World, make_suite
from reports.analysis.robustness import rows as robustness_rows
from reports.analysis.series import AnalysisConfig

CONFIG = AnalysisConfig()


def _outcomes(
    rng: random.Random,
    world: World,
    suites: int,
    factor_for: Callable[[random.Random], Factor],
    host: Callable[[int], float] | None = None,
) -> dict[str, float]:
    counts = dict.fromkeys(("fail", "shift", "lean", "undecided", "pass"), 0)
    for _ in range(suites):
        judged = judge(make_suite(rng, world, factor_for(rng), host), CONFIG)
        counts[judged.outcome(CONFIG.threshold)] += 1
    return {k: v / suites for k, v in counts.items()}


def _some(count: int, change: float, world: World) -> Callable[[random.Random], Factor]:
    """`count` random benchmarks `change` slower in the current run only."""

    def factor_for(rng: random.Random) -> Factor:
        chosen = set(rng.sample(range(world.benchmarks), count))
        last = world.baseline_runs
        return lambda b, r: 1.0 + change if b in chosen and r == last else 1.0

    return factor_for


def _text(rates: dict[str, float]) -> str:
    inconclusive = rates["shift"] + rates["lean"] + rates["undecided"]
    return (
        f"PASS {rates['pass']:.0%}, FAIL {rates['fail']:.0%}, INCONCLUSIVE {inconclusive:.0%} "
        f"(shift {rates['shift']:.0%}, lean {rates['lean']:.0%})"
    )


def lean_rows(suites: int, seed: int) -> list[Row]:
    """Unchanged and 6 x +10 % at 3 rounds."""
    world = World()
    same = _outcomes(random.Random(f"{seed}-lean-aa"), world, suites, _some(0, 0.0, world))
    slow = _outcomes(random.Random(f"{seed}-lean-10"), world, suites, _some(6, 0.10, world))
    return [
        Row(
            "3 rounds, nothing changed",
            "no FAIL, lean or shift in >= 18 of 20 suites (PASS only with most timings decided)",
            _text(same),
        ),
        Row("3 rounds, 6 of 36 benchmarks 10 % slower", "PASS in <= 1 of 20", _text(slow)),
    ]


def host_row(suites: int, seed: int) -> Row:
    """Every benchmark 10 % slower in the current run only, no probe: machine or code."""
    world = World()
    last = world.baseline_runs
    rates = _outcomes(
        random.Random(f"{seed}-host"),
        world,
        suites,
        _some(0, 0.0, world),
        lambda r: 1.10 if r == last else 1.0,
    )
    return Row(
        "every timing 10 % slower in the current run, no host probe (machine or code)",
        "FAIL in <= 1 of 20, PASS in <= 1 of 20",
        _text(rates),
    )


def round_rows(suites: int, seed: int) -> list[Row]:
    """Baseline 3 rounds, PR 60 (12 x +4.5 %, and coverage); baseline 60, PR 3 (6 x +25 %)."""
    few_then_many = replace(World(), rounds=3, current_rounds=60)
    rates = _outcomes(
        random.Random(f"{seed}-rounds-45"), few_then_many, suites, _some(12, 0.045, few_then_many)
    )
    rng = random.Random(f"{seed}-rounds-cover")
    covered = total = 0
    for _ in range(suites):
        for v in judge(make_suite(rng, few_then_many, lambda b, r: 1.0), CONFIG).verdicts:
            total += 1
            covered += (v.ci_low or 0.0) <= 1.0 <= (v.ci_high or 0.0)
    many_then_few = replace(World(), rounds=60, current_rounds=3)
    rng = random.Random(f"{seed}-rounds-25")
    caught = slowed = 0
    for _ in range(suites):
        chosen = set(rng.sample(range(36), 6))
        last = many_then_few.baseline_runs

        def factor(b: int, r: int, s: set[int] = chosen, n: int = last) -> float:
            return 1.25 if b in s and r == n else 1.0

        verdicts = judge(make_suite(rng, many_then_few, factor), CONFIG).verdicts
        caught += sum(verdicts[b].verdict == "fail" for b in chosen)
        slowed += len(chosen)
    return [
        Row(
            "baseline 3 rounds, current run 60; 12 benchmarks 4.5 % slower (threshold 5 %)",
            "FAIL in <= 1 of 20; unchanged: 95 % intervals cover the true ratio",
            f"{_text(rates)}; unchanged: {covered / total:.1%} of intervals cover 1",
        ),
        Row(
            "baseline 60 rounds, current run 3; 6 benchmarks 25 % slower",
            ">= 80 % caught",
            f"{caught / slowed:.1%} caught",
        ),
    ]


def burst_rows(suites: int, seed: int) -> list[Row]:
    """Main's newest run a whole-suite +20 % burst; the PR +20 % everywhere, or on 6."""
    world = World()
    last = world.baseline_runs

    def burst(r: int) -> float:
        return 1.2 if r == last - 1 else 1.0

    def burst_and_pr(r: int) -> float:
        return 1.2 if r >= last - 1 else 1.0

    everywhere = _outcomes(
        random.Random(f"{seed}-burst-all"), world, suites, _some(0, 0.0, world), burst_and_pr
    )
    six = _outcomes(random.Random(f"{seed}-burst-six"), world, suites, _some(6, 0.20, world), burst)
    return [
        Row(
            "main's newest run a +20 % burst; the PR's run +20 % everywhere",
            "PASS in <= 1 of 10 (one run never becomes the level)",
            _text(everywhere),
        ),
        Row(
            "main's newest run a +20 % burst; the PR 20 % slower on 6 benchmarks",
            "PASS in <= 1 of 10",
            _text(six),
        ),
    ]


def rows(suites: int = 40, seed: int = 1) -> list[Row]:
    """Every row, `suites` seeded suites each."""
    return [
        *lean_rows(suites, seed),
        host_row(suites, seed),
        *round_rows(suites, seed),
        *burst_rows(suites, seed),
    ]


#: The tables `python -m reports simulate` prints after its own: (title, rows(suites, seed)).
TABLES = (
    (
        "Issue-17 rows (heavy tails, few rounds, recent step, recurring state, drift, "
        "process interleave)",
        robustness_rows,
    ),
    ("Issue-28 rows (does the headline claim only what the data support?)", rows),
)
