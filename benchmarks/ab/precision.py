"""How precise a benchmark's pairs are so far, from the coordinator's clock: when to stop.

The coordinator times each granted round itself (from the grant to the side's next message), so
it can tell how widely the pairs scatter without the sides' own figures. `half_width` is the
95 % half-width the verdict's statistic would have on those durations: Yuen's 20 % trimmed mean
of the paired log-ratios with its winsorized standard error (`reports/analysis/paired.py`,
here with a normal quantile). The stopping rule (`coordinator.PairBudget`) keeps granting pairs
until it falls to the target: on a noisy machine a fixed time budget left tiny models' rounds
(13 % per-pair scatter on the 2-core development VM) with ±3.3 % intervals, too wide to catch
10 % slowdowns at the 5 % threshold. It reads the spread only, never the location (which side
is faster), so it cannot steer a verdict's direction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

TRIM = 0.2  # as reports/analysis/paired.py
Z95 = 1.96
MIN_PAIRS = 5  # fewer cannot estimate a spread


def half_width(base_s: Sequence[float], head_s: Sequence[float]) -> float:
    """The 95 % half-width (log scale ~ fraction) of the trimmed mean of log(head/base) over
    the pairs both sides have; inf with fewer than MIN_PAIRS usable pairs."""
    diffs = sorted(
        math.log(h / b)
        for b, h in zip(base_s, head_s, strict=False)
        if b > 0 and h > 0 and math.isfinite(b + h)
    )
    n = len(diffs)
    if n < MIN_PAIRS:
        return math.inf
    g = math.floor(TRIM * n)
    kept = n - 2 * g
    low, high = diffs[g], diffs[n - g - 1]
    winsorized = [min(max(x, low), high) for x in diffs]
    mean = sum(winsorized) / n
    w_var = sum((x - mean) ** 2 for x in winsorized) / (n - 1)
    return Z95 * math.sqrt((n - 1) * w_var / (kept * (kept - 1)))
