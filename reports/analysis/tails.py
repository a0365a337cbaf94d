"""How heavy the tails of a machine's run-to-run noise are: Student t degrees of freedom.

A run of a benchmark strays from its level by the run-to-run noise; on a shared host that noise
has heavy tails (a run in a bad state is far more often 4 SDs out than a normal law says), and
a rule that assumes a normal law fails far more often than its level (issue 41: 9 % of A/A
suites against 1 %). Here the machine's baseline residuals (per primary timing, its runs' log
locations less their suite-wide effect, about the timing's median) are pooled and fitted as
Student t with one `nu` for the machine and a scale per timing: the profile likelihood over
`GRID`, each timing's scale by EM at the grid's `nu`. A finite `nu` is kept only when it beats
the normal law by `MIN_GAIN` log-likelihood units (one parameter more: Akaike's rule), so a
normal machine reads `inf`, not a spurious 25.

The two sides are fitted apart (`tail_dfs`: the residuals above the median as a folded t, and
those below): a run's location is a low order statistic of its rounds, whose fast side is
heavy (one lucky round) while its slow side is not, and a run slowed by a neighbour is not
matched by one sped up. The slow side decides fails, the fast side improvements.

`tail_scale(nu)`: a statistic with unit variance under a t(nu) law is compared with t(nu) after
multiplying it by `sqrt(nu / (nu - 2))` (`decision`'s `tail_df`).

Deliberately not here: the verdicts that use it (`series`, `decision`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

#: The degrees of freedom tried, heaviest first (inf: the normal law).
GRID = (3.0, 4.0, 5.0, 7.0, 10.0, 20.0, math.inf)
#: A finite nu must beat the normal law by this much log-likelihood (Akaike: one parameter).
MIN_GAIN = 2.0
#: Residuals needed (timings x runs, one side) before tails are estimated; fewer: normal.
MIN_RESIDUALS = 60
EM_STEPS = 8


def tail_scale(nu: float) -> float:
    """`sqrt(nu / (nu - 2))`: a unit-variance t(nu) statistic times this is t(nu) (1 at inf)."""
    return 1.0 if math.isinf(nu) else math.sqrt(nu / (nu - 2.0))


def _loglik(residuals: Sequence[float], var: float, nu: float) -> float:
    """Log-likelihood of centred residuals under t(nu) with scale^2 `var` (normal at inf)."""
    if var <= 0:
        return 0.0
    n = len(residuals)
    if math.isinf(nu):
        return -0.5 * n * math.log(2.0 * math.pi * var) - 0.5 * sum(r * r for r in residuals) / var
    const = math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi * var)
    return n * const - (nu + 1) / 2 * sum(math.log1p(r * r / (nu * var)) for r in residuals)


def _scale_var(residuals: Sequence[float], nu: float, start: float) -> float:
    """The t(nu) scale^2 of centred residuals by EM from `start` (the mean square at inf)."""
    squares = [r * r for r in residuals]
    n = len(squares)
    if math.isinf(nu):
        return sum(squares) / n
    var = start
    for _ in range(EM_STEPS):
        if var <= 0:
            return 0.0
        var = sum(q * (nu + 1) / (nu + q / var) for q in squares) / n
    return var


def tail_dfs(columns: Sequence[Sequence[float]]) -> tuple[float, float]:
    """(slow side, fast side) t degrees of freedom from per-timing residual columns (log
    locations, one column per timing): each side's residuals about the column's median, folded
    (module docstring)."""
    up: list[list[float]] = []
    down: list[list[float]] = []
    for column in columns:
        if len(column) >= 3:
            med = statistics.median(column)
            up.append([v - med for v in column if v > med])
            down.append([med - v for v in column if v < med])
    return tail_df([c for c in up if c]), tail_df([c for c in down if c])


def tail_df(centred: Sequence[Sequence[float]]) -> float:
    """The t degrees of freedom of residual columns already centred (or folded: a folded t's
    likelihood is the t's times 2, the same for every `nu`); `inf` below `MIN_RESIDUALS`
    residuals or when no finite `nu` beats the normal law by `MIN_GAIN`."""
    if sum(len(c) for c in centred) < MIN_RESIDUALS:
        return math.inf
    starts = [sum(r * r for r in c) / len(c) for c in centred]
    scores: list[tuple[float, float]] = []
    for nu in reversed(GRID):  # from the normal law down, each EM warm-started from the last
        variances = [_scale_var(c, nu, s) for c, s in zip(centred, starts, strict=True)]
        starts = [v if v > 0 else s for v, s in zip(variances, starts, strict=True)]
        scores.append((sum(_loglik(c, v, nu) for c, v in zip(centred, variances, strict=True)), nu))
    normal = scores[0][0]
    best, nu = max(scores)
    return nu if best - normal >= MIN_GAIN else math.inf
