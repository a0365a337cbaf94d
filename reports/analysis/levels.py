"""One rule for what a run is and which runs are noise: the run's location, outliers, a new level.

Pure functions on plain numbers; `tests/reports/analysis/test_levels.py` checks them on
synthetic series over many seeds. The same rules apply to the baseline's runs and to the
current run, so neither side is judged by a rule the other escapes:

- **The run's location** (`run_location`) is a low order statistic of its rounds, the
  `floor((n - 1) / 3)`-th smallest: the minimum of 2 or 3 rounds, the 2nd of 4-6, the 4th of
  10. A preempted round (another process took the core: 1.5-3x slower) only ever makes a round
  slower, so a low order statistic ignores up to `n - 1 - index` of them (1 of 2, 2 of 3, 3 of
  5), where the median of 2 rounds is their mean and the median of 3 moves with two preempted
  rounds. Every run of a benchmark is summarised so, baseline and current; its run-to-run
  spread is learned from the baseline, so the statistic's own variance needs no formula.
- **Outliers** (`keep_mask`): a baseline run more than `OUTLIER_SDS` robust standard
  deviations from the benchmark's median is set aside only when it is a *lone burst*: at most
  `max(1, 5 % of the runs)` runs lie that far out on its side. A state seen repeatedly (a
  benchmark 1.25x slow in 15 % of runs) is noise: kept, so the variance includes it and a
  current run in that state is judged against it. Two or more of the newest `RECENT_RUNS`
  runs beyond the limit on one side are never set aside: they may be main's new level
  (`recent_level_start` decides); one alone is a burst like any other.
- **A short new level** (`recent_level_start`): when the newest 2-4 runs all lie more than 3
  robust SDs beyond the older runs, on the same side, they are main's current level, and the
  baseline level is theirs alone: the interval widens with the few runs behind it rather than
  comparing with the level before the step. **One run alone never becomes the level**: the
  newest run far off the older level may be a burst, and the run being judged must not decide
  which (a PR slowed 20 % everywhere would otherwise match main's one burst run and pass).
- **A state is not a step** (`level_start`): where main's level began, by segment medians, so
  that a recurring state clustered in the window does not cut the baseline.
- **The machine's noise** (`suite_run_var`): the typical run-to-run variance of the suite's
  benchmarks on this machine, a floor for each benchmark's prior, so that a machine noisier
  than the configured prior is not judged with the prior's optimism when few runs exist.

Deliberately not here: the variance model (`noise_model`), the decision rule (`decision`).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence

from reports.analysis.changepoints import Step

# 1 / Phi^-1(3/4): turns a median absolute deviation into a normal standard deviation.
MAD_TO_SIGMA = 1.482602218505602
#: Degrees of freedom per value of a MAD-based variance (its efficiency at the normal, 37 %).
MAD_EFFICIENCY = 0.37
#: A baseline run this many robust standard deviations from a benchmark's median is far out.
OUTLIER_SDS = 5.0
#: A level of two or more newest runs counts as new when all lie this many robust SDs out.
RECENT_LEVEL_SDS = 3.0
#: The newest runs that may form main's new level (two or more of them far out on one side are
#: never set aside as outliers).
RECENT_RUNS = 4
#: Runs a new level needs: one run alone is a burst until another confirms it.
MIN_LEVEL_RUNS = 2
#: Share of runs (beyond one) that may be set aside as lone bursts on one side.
BURST_SHARE = 0.05
# A floor for the robust SD so that a series of identical values does not drop every other run.
_SD_FLOOR = 1e-4


def run_location(values: Sequence[float]) -> float:
    """The run's location: its `floor((n - 1) / 3)`-th smallest round (module docstring)."""
    if not values:
        raise ValueError("run_location needs at least one round")
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 3]


def location_at(values: Sequence[float], rounds: int) -> float:
    """The run's location as if it had `rounds` rounds: the expected `run_location` of a random
    `rounds`-subset of its rounds (exact, by counting subsets; `run_location` itself when
    `rounds` is the run's own count).

    A low order statistic's expectation depends on the round count (the minimum of 3 normal
    rounds lies 0.85 SD below their median, the 27th of 80 only 0.43 SD), so runs with different
    round counts are compared at the smaller count (`common_rounds`): the summary of each run
    then has one expectation whatever the round count, for any round distribution (preempted
    rounds included), and a run with more rounds only gets a steadier summary.
    """
    n = len(values)
    if not 1 <= rounds <= n:
        raise ValueError(f"location_at needs 1 <= rounds <= {n}, got {rounds}")
    if rounds == n:
        return run_location(values)
    k = (rounds - 1) // 3  # the order statistic run_location takes from `rounds` rounds
    total = math.comb(n, rounds)
    # P(the j-th smallest of all n is the k-th smallest of the subset), j = k .. n - rounds + k
    return sum(
        v * (math.comb(j, k) * math.comb(n - 1 - j, rounds - 1 - k) / total)
        for j, v in enumerate(sorted(values))
        if k <= j <= n - rounds + k
    )


def common_rounds(runs: Sequence[Sequence[float]]) -> int:
    """The round count every run is summarised at: the smallest among `runs` (0 when empty)."""
    return min((len(r) for r in runs if r), default=0)


def round_mismatch(
    baseline: Sequence[Sequence[float]], current: Sequence[Sequence[float]], rounds: int
) -> str:
    """A note when the runs' round counts differ ("" when they agree)."""
    if len({len(r) for r in (*baseline, *current) if r}) <= 1:
        return ""

    def span(runs: Sequence[Sequence[float]]) -> str:
        if not runs:
            return "-"
        lo, hi = min(len(r) for r in runs), max(len(r) for r in runs)
        return str(lo) if lo == hi else f"{lo}-{hi}"

    return (
        f"round counts differ (baseline {span(baseline)}, current {span(current)}): every run "
        f"summarised at {rounds} rounds"
    )


def robust_sd(values: Sequence[float]) -> float:
    """MAD * 1.4826 (0.0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    return statistics.median(abs(v - med) for v in values) * MAD_TO_SIGMA


#: Degrees of freedom per value of a biweight midvariance (its efficiency at the normal, 86 %).
BIWEIGHT_EFFICIENCY = 0.86


def biweight_var(values: Sequence[float]) -> float:
    """Tukey's biweight midvariance (tuning constant 9 MADs): robust like the MAD (a value
    beyond 9 MADs has no weight) and 86 % efficient at the normal, where the MAD is 37 %; a
    variance of twenty runs' effects is then worth ~16 degrees of freedom, not 7. 0.0 for
    fewer than two values; the MAD-based variance when the MAD is 0."""
    n = len(values)
    if n < 2:
        return 0.0
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    if mad <= 0:
        return robust_sd(values) ** 2
    top = bottom = 0.0
    for v in values:
        u = (v - med) / (9.0 * mad)
        if abs(u) < 1.0:
            w = 1.0 - u * u
            top += (v - med) ** 2 * w**4
            bottom += w * (1.0 - 5.0 * u * u)
    return n * top / (bottom * bottom) if bottom else robust_sd(values) ** 2


def keep_mask(values: Sequence[float]) -> list[bool]:
    """Which runs to keep (log locations, oldest first): all but lone bursts (module docstring).

    Below 5 values everything is kept. A value beyond `OUTLIER_SDS` robust SDs is dropped when
    at most `max(1, floor(BURST_SHARE * n))` values lie beyond on its side, unless it is one
    of at least `MIN_LEVEL_RUNS` such values among the newest `RECENT_RUNS` on that side (a
    possible new level).
    """
    n = len(values)
    if n < 5:
        return [True] * n
    med = statistics.median(values)
    limit = OUTLIER_SDS * max(robust_sd(values), _SD_FLOOR)
    high = [v - med > limit for v in values]
    low = [med - v > limit for v in values]
    allowed = max(1, math.floor(BURST_SHARE * n))
    drop_high, drop_low = sum(high) <= allowed, sum(low) <= allowed
    recent = n - RECENT_RUNS
    level_high = sum(high[recent:]) >= MIN_LEVEL_RUNS
    level_low = sum(low[recent:]) >= MIN_LEVEL_RUNS
    return [
        not (
            (h and drop_high and not (i >= recent and level_high))
            or (lo and drop_low and not (i >= recent and level_low))
        )
        for i, (h, lo) in enumerate(zip(high, low, strict=True))
    ]


def recent_level_start(values: Sequence[float]) -> int | None:
    """Index of the first run of a short new level among the newest 2-4 runs, or None.

    `values` are log locations, oldest first. For j = 4 down to `MIN_LEVEL_RUNS`: the newest j
    runs form a new level when at least 5 older runs exist and every one of the j lies more
    than `RECENT_LEVEL_SDS` robust SDs of the older runs from their median, all on the same
    side. The longest such j wins. A single newest run is never a level (module docstring).
    """
    n = len(values)
    for j in range(min(RECENT_RUNS, n - 5), MIN_LEVEL_RUNS - 1, -1):
        older, newest = values[: n - j], values[n - j :]
        med = statistics.median(older)
        limit = RECENT_LEVEL_SDS * max(robust_sd(older), _SD_FLOOR)
        if all(v - med > limit for v in newest) or all(med - v > limit for v in newest):
            return n - j
    return None


def chi2_median_over_df(df: float) -> float:
    """median(chi^2_df) / df, Wilson-Hilferty (within 3.5 % at df = 1, better above)."""
    return (1.0 - 2.0 / (9.0 * df)) ** 3


def suite_run_var(per_series: Sequence[Sequence[float]]) -> float | None:
    """The machine's typical run-to-run variance of a run location (log), or None.

    `per_series` holds, per benchmark, its kept baseline log locations. Each benchmark with at
    least two gives a sample variance; the median of those, divided by the median of
    chi^2_(k-1) / (k - 1), estimates a typical benchmark's variance (a median, so that a few
    benchmarks with bursts or real steps do not set it). None with fewer than 5 benchmarks.
    """
    scaled = [
        statistics.variance(v) / chi2_median_over_df(len(v) - 1) for v in per_series if len(v) >= 2
    ]
    if len(scaled) < 5:
        return None
    return statistics.median(scaled)


def cross_suite_run_var(differences: Sequence[float]) -> float | None:
    """Run-to-run variance of one run location from current-minus-baseline log differences.

    With a single baseline run no benchmark has a sample variance, but across the suite the
    differences `log(current) - log(baseline)` of unchanged benchmarks spread by twice the
    variance of one run: `robust_sd(differences)^2 / 2`. The MAD ignores a minority of real
    changes; a suite-wide shift moves the median, not the spread. None below 8 benchmarks.
    """
    if len(differences) < 8:
        return None
    return robust_sd(differences) ** 2 / 2.0


def cross_suite_weight_runs(benchmarks: int) -> float:
    """Degrees of freedom the cross-suite estimate is worth: MAD efficiency 37 % x benchmarks."""
    return MAD_EFFICIENCY * benchmarks


#: Runs away from today's level that a window may hold and still be today's level with a
#: recurring state in it (a benchmark slow in 15 % of runs; a three-run burst in thirteen).
STATE_SHARE = 1 / 3


def level_start(logs: Sequence[float], steps: Sequence[Step]) -> Step | None:
    """The step where today's level began, or None when the whole window is today's level.

    Segmentation cuts a window at every level change, but a recurring machine state (a
    benchmark slow in some runs) also forms segments: a burst of slow runs between runs at
    today's level, or slow runs that cluster early. One rule decides, by segment medians (a
    state that is not most of a segment does not move its median): walking from the oldest
    segment, the baseline starts at the first one at today's level (its median within half the
    last step of the newest segment's) from which on at most `STATE_SHARE` of the runs lie off
    that level: the segments between are a state that came and went, and stay in the spread.
    Otherwise the baseline starts at the last step, if the medians confirm it (they differ by
    at least half the step, in its direction).
    """
    if not steps:
        return None
    bounds = [0, *(s.index for s in steps), len(logs)]
    medians = [statistics.median(logs[a:b]) for a, b in itertools.pairwise(bounds)]
    last = steps[-1]
    tolerance = abs(last.after - last.before) / 2
    at_level = [abs(m - medians[-1]) < tolerance for m in medians]
    for j in range(len(medians) - 1):
        off = sum(
            b - a
            for (a, b), here in zip(itertools.pairwise(bounds[j:]), at_level[j:], strict=False)
            if not here
        )
        if at_level[j] and off <= STATE_SHARE * (len(logs) - bounds[j]):
            return None if j == 0 else steps[j - 1]
    jump = medians[-1] - medians[-2]
    confirmed = jump * (last.after - last.before) > 0 and abs(jump) >= tolerance
    return last if confirmed else None
