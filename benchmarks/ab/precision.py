"""How precise a benchmark's pairs are so far, from the coordinator's clock: when to stop.

The coordinator times each granted round itself (from the grant to the side's next message), so
it can tell how widely the pairs scatter without the sides' own figures. `half_width` is the
95 % half-width the verdict's statistic would have on those durations, by the verdict's own
definition: `reports.analysis.paired.correlated_estimate` (Yuen's 20 % trimmed mean of the
paired log-ratios, winsorized standard error inflated for lag-1 correlation) and the Student-t
quantile on its degrees of freedom, as `decision.interval` takes it; only the process term the
verdict adds is left out (it is the same for every benchmark and no pairs reduce it). The
durations differ from the sides' own timings by the coordinator's settle wait and socket time,
so the verdict's half-width, not this one, is what a report shows. The stopping rule
(`coordinator.PairBudget`) keeps granting pairs until it falls to the target: on a noisy machine
a fixed time budget left tiny models' rounds (13 % per-pair scatter on the 2-core development
VM) with ±3.3 % intervals, too wide to catch 10 % slowdowns at the 5 % threshold. It reads the
spread only, never the location (which side is faster), so it cannot steer a verdict's
direction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from reports.analysis.distributions import t_ppf
from reports.analysis.paired import correlated_estimate, log_ratios

MIN_PAIRS = 5  # fewer cannot estimate a spread


def half_width(base_s: Sequence[float], head_s: Sequence[float]) -> float:
    """The 95 % half-width (log scale ~ fraction) of the trimmed mean of log(head/base) over
    the pairs both sides have; inf with fewer than MIN_PAIRS pairs. Durations come from the
    coordinator's monotonic clock, so they are positive."""
    diffs = log_ratios(base_s, head_s)
    if len(diffs) < MIN_PAIRS:
        return math.inf
    est = correlated_estimate(diffs)
    return t_ppf(0.975, est.df) * est.se
