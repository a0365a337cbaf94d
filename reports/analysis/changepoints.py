"""Change points (steps) in one metric's history: where the level moved, and by how much.

`detect_steps(values)` runs binary segmentation with a least-squares (L2) cost on the values
(callers pass the log of per-run medians, so a step is a ratio), accepting a split only when it
reduces the cost by more than a penalty `beta = penalty_factor * sigma^2 * log(n)` (a modified
BIC). A running median of five is applied first, so that one or two outlier runs in a row (a
load burst) cannot form a level of their own (two burst runs are not two steps), while a real
step of three or more runs keeps its exact position (a running median preserves edges).
`sigma` is estimated robustly (before smoothing) from the median absolute first difference,
which a few level shifts do not inflate. Segments shorter than `min_size` are not created,
and steps smaller than `min_rel_step` (relative) are dropped after the search.

Under slow drift (0.5 % per run) a least-squares segmentation cuts a ramp into a staircase of
fictitious steps; `detect_steps_detrended` removes a robust line first (the Theil-Sen slope,
which one real step barely tilts) and searches the residuals: a ramp has no step left, a real
step keeps its jump.

Binary segmentation, not PELT or E-divisive, because it is O(n log n) with prefix sums in pure
Python: a history of 1,000 runs x 100 benchmarks takes well under a second.

Pure: no I/O, no globals, no numpy. It knows nothing about commits; callers map indices back.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# 1 / Phi^-1(3/4): turns a median absolute deviation into a normal standard deviation.
_MAD_TO_SIGMA = 1.482602218505602


@dataclass(frozen=True)
class Step:
    """A level change between `values[index - 1]` and `values[index]`.

    `before`/`after` are the segment means on both sides (in the caller's scale, e.g. log
    seconds) and `rel_change` is `exp(after - before) - 1` (the relative change when the values
    are logs).
    """

    index: int
    before: float
    after: float
    rel_change: float


def robust_sigma(values: Sequence[float]) -> float:
    """Noise standard deviation from first differences: MAD(diff) * 1.4826 / sqrt(2).

    A level shift changes only one difference, so this stays near the within-segment noise.
    Returns 0.0 for fewer than three values.
    """
    if len(values) < 3:
        return 0.0
    diffs = [b - a for a, b in itertools.pairwise(values)]
    med = statistics.median(diffs)
    mad = statistics.median(abs(d - med) for d in diffs)
    return mad * _MAD_TO_SIGMA / math.sqrt(2.0)


def median3(values: Sequence[float]) -> list[float]:
    """Running median of three (the two end points are kept): removes isolated outliers."""
    if len(values) < 3:
        return list(values)
    middle = [sorted(w)[1] for w in zip(values, values[1:], values[2:], strict=False)]
    return [values[0], *middle, values[-1]]


def median5(values: Sequence[float]) -> list[float]:
    """Running median of five, of three next to the ends (end points kept).

    Removes bursts of up to two consecutive outliers; a level held for three or more points
    keeps its edges.
    """
    n = len(values)
    if n < 5:
        return median3(values)
    out = median3(values)
    for i in range(2, n - 2):
        out[i] = sorted(values[i - 2 : i + 3])[2]
    return out


def detect_steps(
    values: Sequence[float],
    *,
    min_size: int = 3,
    penalty_factor: float = 5.0,
    min_rel_step: float = 0.02,
    sigma: float | None = None,
) -> list[Step]:
    """Steps in `values`, oldest first (binary segmentation, L2 cost, modified BIC penalty).

    Args:
        values: the series in time order (log of per-run medians for timings).
        min_size: no segment shorter than this many points (a single outlier run is not a step).
        penalty_factor: the penalty is `penalty_factor * sigma**2 * log(n)`; larger is stricter.
        min_rel_step: steps with `abs(rel_change)` below this are not reported.
        sigma: the noise standard deviation; estimated with `robust_sigma` when None.

    Returns:
        The accepted steps sorted by index; an empty list for a flat series, for fewer than
        `2 * min_size` points, or when the noise estimate is zero and the series is constant.
    """
    n = len(values)
    if n < 2 * min_size:
        return []
    # sigma from the raw values: smoothing correlates neighbours and would hide the noise
    noise = robust_sigma(values) if sigma is None else sigma
    values = median5(values)
    if noise <= 0.0:
        # A noiseless series: any exact level change is a step; use a tiny noise floor.
        spread = max(values) - min(values)
        if spread == 0.0:
            return []
        noise = spread * 1e-6
    beta = penalty_factor * noise * noise * math.log(n)
    s1 = [0.0, *itertools.accumulate(values)]

    cuts: list[int] = []
    stack = [(0, n)]
    while stack:
        a, b = stack.pop()
        if b - a < 2 * min_size:
            continue
        # The L2 cost drop of splitting [a, b) at t reduces to L^2/(t-a) + R^2/(b-t) - T^2/(b-a)
        # with L, R, T the sums left, right and total: the squared terms cancel.
        sa, total = s1[a], s1[b] - s1[a]
        gain, best_t = max(
            (
                (s1[t] - sa) ** 2 / (t - a) + (total - s1[t] + sa) ** 2 / (b - t),
                t,
            )
            for t in range(a + min_size, b - min_size + 1)
        )
        best_gain = gain - total * total / (b - a)
        if best_gain > beta:
            cuts.append(best_t)
            stack.extend(((a, best_t), (best_t, b)))
    bounds = [0, *sorted(cuts), n]
    steps: list[Step] = []
    for left, mid, right in zip(bounds, bounds[1:], bounds[2:], strict=False):
        before = (s1[mid] - s1[left]) / (mid - left)
        after = (s1[right] - s1[mid]) / (right - mid)
        rel = math.exp(after - before) - 1.0
        if abs(rel) >= min_rel_step:
            steps.append(Step(index=mid, before=before, after=after, rel_change=rel))
    return steps


def theil_sen_line(values: Sequence[float]) -> tuple[float, float]:
    """(slope per index, intercept) of the Theil-Sen line: median pairwise slope, median
    residual. At most 60 evenly spaced points are paired, so a long history stays cheap."""
    n = len(values)
    stride = max(1, n // 60)
    idx = list(range(0, n, stride))
    slopes = [(values[j] - values[i]) / (j - i) for a, i in enumerate(idx) for j in idx[a + 1 :]]
    slope = statistics.median(slopes) if slopes else 0.0
    intercept = statistics.median(v - slope * i for i, v in enumerate(values)) if n else 0.0
    return slope, intercept


def detect_steps_detrended(values: Sequence[float], *, min_rel_step: float = 0.02) -> list[Step]:
    """`detect_steps` on the residuals of `theil_sen_line` (see the module docstring).

    A step's `before`/`after` are residual means, its `rel_change` the jump at the step net of
    the drift.
    """
    slope, intercept = theil_sen_line(values)
    residuals = [v - (intercept + slope * i) for i, v in enumerate(values)]
    return detect_steps(residuals, min_rel_step=min_rel_step)
