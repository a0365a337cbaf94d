"""How precise a benchmark's pairs are so far, from the coordinator's clock: when to stop.

The coordinator times each granted round itself (from the grant to the side's next message), so
it can tell how widely the pairs scatter without the sides' own figures. `half_width` is the
95 % half-width the verdict's statistic would have on those durations: the verdict's own
trimmed estimate (`reports.analysis.paired.trimmed_estimate`: Yuen's 20 % trimmed mean of the
paired log-ratios, winsorized standard error), here with a normal quantile. The stopping rule
(`coordinator.PairBudget`) keeps granting pairs until it falls to the target: on a noisy machine
a fixed time budget left tiny models' rounds (13 % per-pair scatter on the 2-core development
VM) with ±3.3 % intervals, too wide to catch 10 % slowdowns at the 5 % threshold. It reads the
spread only, never the location (which side is faster), so it cannot steer a verdict's
direction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from reports.analysis.paired import log_ratios, trimmed_estimate

Z95 = 1.96
MIN_PAIRS = 5  # fewer cannot estimate a spread


def half_width(base_s: Sequence[float], head_s: Sequence[float]) -> float:
    """The 95 % half-width (log scale ~ fraction) of the trimmed mean of log(head/base) over
    the pairs both sides have; inf with fewer than MIN_PAIRS pairs. Durations come from the
    coordinator's monotonic clock, so they are positive."""
    diffs = log_ratios(base_s, head_s)
    if len(diffs) < MIN_PAIRS:
        return math.inf
    return Z95 * trimmed_estimate(diffs).se
