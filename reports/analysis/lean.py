"""The lean: timings that, together, lean to a slowdown; its size calibrated on the baseline.

Six benchmarks 10 % slower among 36 at 3 rounds each straddle the threshold: no verdict fails,
yet together they are not a PASS. Per machine, over its primary timings (one row per run, the
run's log location at the timing's common round count, baseline runs less their suite-wide
effect), the statistic of a run against reference runs is

    T = sum over timings of max(z_b, 0)^2,   z_b = (r_b - median_b r_b) / s_b,

`r_b` the run's log location less the reference runs' mean, `s_b` their standard deviation
times `sqrt(f + 1 / k)` (f = 1 for one run; the pooled runs' factor `Parts.pool_factor` for
the current run). Centring on the median removes the run's own effect, machine or code: the
lean asks whether some timings moved more than the rest.

**Calibration by leave-one-run-out**: each of the K baseline runs in turn is the run and the
other K - 1 the reference, giving T_1..T_K under the machine's own noise (heavy tails,
correlated benchmarks, bursts and all), and the current run's T against all K runs has the
p-value `(1 + #{T_j >= T}) / (K + 1)`. Its size holds whatever the noise's shape, as long as
the current run is exchangeable with the baseline runs under no change; it needs K >=
`MIN_LEAN_RUNS` (the smallest p is 1 / (K + 1)), else the lean is not tested (p = 1, said).

The undecided timings whose own one-sided p of "no slowdown" is below `LEAN_LIST_P` are
listed, the largest lean first.

Deliberately not here: verdicts (`series`, `judge`), the machine-or-code rule (`attribution`).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from reports.analysis import decision
from reports.analysis.levels import common_rounds, location_at
from reports.analysis.series import MetricSeries, Verdict

#: The lean test's level: a suite whose timings lean to a slowdown this clearly is not PASS.
LEAN_ALPHA = 0.05
#: An undecided timing "leans" (and is listed) when its own one-sided p of "no slowdown" is below.
LEAN_LIST_P = 0.05
#: Baseline runs the calibration needs (the smallest p-value is 1 / (runs + 1)).
MIN_LEAN_RUNS = 9


@dataclass(frozen=True)
class Lean:
    """One machine's lean test: its p-value, the timings tested, the undecided ones leaning,
    and the baseline runs that calibrated it (0: too few, not tested)."""

    machine_id: str
    p_value: float
    timings: int
    leaning: tuple[Verdict, ...]
    runs: int = 0

    @property
    def rejected(self) -> bool:
        """True when the timings lean to a slowdown at `LEAN_ALPHA`."""
        return self.runs >= MIN_LEAN_RUNS and self.p_value <= LEAN_ALPHA


def leans(v: Verdict) -> bool:
    """An undecided verdict whose own one-sided p of "no slowdown" is below `LEAN_LIST_P`."""
    if v.verdict != "inconclusive" or v.log_ratio is None or not v.se:
        return False
    return decision.p_fail(v.log_ratio, v.se, v.df or math.inf, 0.0) < LEAN_LIST_P


def statistic(run: Sequence[float], mean: Sequence[float], scale: Sequence[float]) -> float:
    """`T` of one run (module docstring) from the reference's means and scales per timing."""
    residuals = [x - m for x, m in zip(run, mean, strict=True)]
    centre = statistics.median(residuals)
    return sum(
        max((r - centre) / s, 0.0) ** 2 for r, s in zip(residuals, scale, strict=True) if s > 0
    )


def calibrated_p(
    baseline: Sequence[Sequence[float]], current: Sequence[float], current_factor: float = 1.0
) -> float:
    """The leave-one-run-out p-value of `current` (one value per timing) against `baseline`
    (rows: runs, one value per timing; module docstring). Needs at least three rows."""
    k = len(baseline)
    if k < 3:
        raise ValueError(f"the lean's calibration needs at least 3 baseline runs, got {k}")
    columns = list(zip(*baseline, strict=True))
    sums = [math.fsum(c) for c in columns]
    squares = [math.fsum(x * x for x in c) for c in columns]

    def reference(skip: Sequence[float] | None, factor: float) -> tuple[list[float], list[float]]:
        n = k if skip is None else k - 1
        means, scales = [], []
        for b, (s1, s2) in enumerate(zip(sums, squares, strict=True)):
            x = 0.0 if skip is None else skip[b]
            mean = (s1 - x) / n
            var = max((s2 - x * x) - n * mean * mean, 0.0) / (n - 1)
            means.append(mean)
            scales.append(math.sqrt(var * (factor + 1.0 / n)))
        return means, scales

    loo = [statistic(row, *reference(row, 1.0)) for row in baseline]
    observed = statistic(current, *reference(None, current_factor))
    return (1 + sum(t >= observed for t in loo)) / (k + 1)


def run_table(series: Sequence[MetricSeries]) -> tuple[list[list[float]], list[float]]:
    """The baseline runs x timings table (each run less its suite-wide effect) and the current
    run's mean log location per timing, over the timings that have the machine's usual number
    of baseline runs (so rows are the same runs)."""
    usable = [s for s in series if s.current and s.baseline and min(s.current) > 0]
    if not usable:
        return [], []
    runs = Counter(len(s.baseline) for s in usable).most_common(1)[0][0]
    columns, current = [], []
    for s in usable:
        if len(s.baseline) != runs or any(min(r) <= 0 for r in s.baseline):
            continue
        now = (*s.current_repeats, s.current or ())
        rounds = common_rounds([*s.baseline, *now])
        offsets = s.baseline_offsets or (0.0,) * runs
        columns.append(
            [math.log(location_at(r, rounds)) - o for r, o in zip(s.baseline, offsets, strict=True)]
        )
        current.append(statistics.fmean(math.log(location_at(r, rounds)) for r in now))
    return [list(row) for row in zip(*columns, strict=True)], current


def lean_test(
    machine_id: str,
    pairs: Sequence[tuple[Verdict, MetricSeries]],
    current_factor: float = 1.0,
) -> Lean:
    """The machine's lean (module docstring) over its primary timings; `current_factor` is the
    pooled current runs' variance factor."""
    timed = [(v, s) for v, s in pairs if v.kind == "timing" and v.log_ratio is not None]
    baseline, current = run_table([s for _, s in timed])
    leaning = tuple(
        v
        for _, v in sorted(
            ((-(v.log_ratio or 0.0) / (v.se or 1.0), v) for v, _ in timed if leans(v)),
            key=lambda zv: zv[0],
        )
    )
    if len(baseline) < MIN_LEAN_RUNS or len(current) < 2:
        return Lean(machine_id, 1.0, len(current), leaning, 0)
    p = calibrated_p(baseline, current, current_factor)
    return Lean(machine_id, p, len(current), leaning, len(baseline))
