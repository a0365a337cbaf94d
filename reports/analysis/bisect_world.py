"""Simulated bisections with this host's paired noise (issue 52): the rates `bisection` is held to.

A range of `commits` commits after the good one; each commit moves the timing by its own true
log-ratio: `culprits` of them by `effect` (e.g. +20 %), every other one by a small change of
`background_cv` (text-only commits still move layouts and caches a little). A comparison of
commit lo with commit hi draws `BASE_PAIRS * 2**look` pairs, each

    log(hi_i / lo_i) = level[hi] - level[lo] + offset + e_i,

`e_i` AR(1) over the pairs (lag-1 correlation `rho`: a slow minute spans several pairs) with
Student t(`tail_df`) innovations of scale `pair_cv`, `offset` the comparison's own
between-process term (`process_cv`, which pairing cannot cancel), judged with the bisection's
`BISECT_PROCESS_CV`. The defaults are this 2-core VM's: a tiny-llama decode step's pairs
scatter ~10 % (121 pairs gave ±1.7 %, docs/ab.md), and identical sides in one bisection read
x0.960, x0.978 and x1.008 with ±1-4 % intervals (docs/bisect.md): a between-process term of
~2 %.

`python -m reports.analysis.bisect_world` prints the rates of the test module's scenarios.

Deliberately not here: the search (`bisection`), the real runner (`benchmarks.bisect`).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

from reports.analysis.bisection import (
    BISECT_PROCESS_CV,
    Estimate,
    Plan,
    Result,
    bisect,
    estimate_from_pairs,
)
from reports.analysis.worlds import draw

#: Pairs of a comparison's first look (the driver's A/B minimum); each look doubles them.
BASE_PAIRS = 40


@dataclass(frozen=True)
class RangeWorld:
    """The world (module docstring)."""

    commits: int = 64
    culprits: int = 1
    effect: float = 0.20
    background_cv: float = 0.002
    pair_cv: float = 0.10
    tail_df: float = 3.0
    rho: float = 0.3
    process_cv: float = 0.02
    drift: float = 0.0  # a true move of every commit (a slow creep below any threshold)


@dataclass(frozen=True)
class Outcome:
    """One simulated search: the true culprits, what it said, and how much it measured."""

    truth: frozenset[int]
    result: Result
    pairs: int


def simulate(rng: random.Random, world: RangeWorld, plan: Plan | None = None) -> Outcome:
    """One search over a freshly drawn range."""
    truth = frozenset(rng.sample(range(1, world.commits + 1), world.culprits))
    steps = [
        math.log1p(world.effect)
        if i in truth
        else world.drift + rng.gauss(0.0, world.background_cv)
        for i in range(1, world.commits + 1)
    ]
    level = [0.0]
    for s in steps:
        level.append(level[-1] + s)
    spent = [0]

    def measure(lo: int, hi: int, look: int) -> Estimate:
        n = BASE_PAIRS * 2**look
        spent[0] += n
        offset = rng.gauss(0.0, world.process_cv)
        e, diffs = 0.0, []
        for _ in range(n):
            e = world.rho * e + math.sqrt(1 - world.rho**2) * draw(
                rng, world.pair_cv, world.tail_df
            )
            diffs.append(level[hi] - level[lo] + offset + e)
        return estimate_from_pairs(diffs, process_cv=BISECT_PROCESS_CV)

    result = bisect(world.commits, measure, plan)
    return Outcome(truth, result, spent[0])


@dataclass(frozen=True)
class Rates:
    """Over `runs` searches: how often each verdict, how often a named commit was not a true
    culprit under an exit-0 verdict (`wrong`), how often every true culprit was named
    (`complete`), the mean comparisons per search and the mean pairs per comparison."""

    runs: int
    verdicts: dict[str, float]
    wrong: float
    complete: float
    comparisons: float
    pairs_per_step: float

    def text(self) -> str:
        shares = ", ".join(f"{k} {v:.0%}" for k, v in sorted(self.verdicts.items()) if v)
        return (
            f"{shares}; wrong culprit {self.wrong:.0%}; all found {self.complete:.0%}; "
            f"{self.comparisons:.1f} comparisons of {self.pairs_per_step:.0f} pairs on average"
        )


def rates(world: RangeWorld, runs: int, seed: str, plan: Plan | None = None) -> Rates:
    """`runs` seeded searches of `world`."""
    rng = random.Random(seed)
    outcomes = [simulate(rng, world, plan) for _ in range(runs)]
    counts = dict.fromkeys(("culprit", "not-reproducible", "inconclusive"), 0)
    wrong = complete = 0
    for o in outcomes:
        counts[o.result.verdict] += 1
        named = {c.index for c in o.result.culprits}
        wrong += o.result.verdict == "culprit" and not named <= o.truth
        complete += o.result.verdict == "culprit" and named == o.truth
    steps = [len(o.result.steps) for o in outcomes]
    looks = sum(len(s.looks) for o in outcomes for s in o.result.steps)
    return Rates(
        runs,
        {k: v / runs for k, v in counts.items()},
        wrong / runs,
        complete / runs,
        statistics.fmean(steps),
        sum(o.pairs for o in outcomes) / max(1, sum(steps)) if looks else 0.0,
    )


#: The scenarios issue 52 names (and the test module asserts), by label.
SCENARIOS = {
    "one culprit +20 % among 64 commits": RangeWorld(),
    "two culprits +20 % each among 64 commits": RangeWorld(culprits=2),
    "nothing changed (64 commits of text)": RangeWorld(culprits=0, background_cv=0.0),
    "no culprit: 64 commits of +0.5 % each (+38 % in all)": RangeWorld(
        culprits=0, background_cv=0.0, drift=0.005
    ),
    "one culprit +8 % (near the 5 % threshold)": RangeWorld(effect=0.08),
}


def main(runs: int = 100) -> None:
    """Print every scenario's rates."""
    for label, world in SCENARIOS.items():
        print(f"{label}: {rates(world, runs, label).text()}")


if __name__ == "__main__":
    main()
