"""What the whole suite did: a common shift of every timing, and a lean toward a slowdown.

Pure functions on plain numbers; `tests/reports/analysis/test_shift.py` checks them on
synthetic suites over many seeds.

- **The common shift** (`estimate_shift`). The current run's timings share its run effect
  (the host's memory bandwidth on a shared VM, a thermal state, the whole stack) just as every
  baseline run's do (`noise_model.estimate_run_effects`). Its estimate is the median over the
  suite's primary timings of the worse-oriented log-ratios; its standard error is
  `sqrt(var_e + pi / 2 * median(v_b) / m)`: the baseline's run-effect variance `var_e` (how far
  a run's effect strays on this machine) plus the median's own error from the m per-benchmark
  variances `v_b` (the run effect taken out). `var_e` is a robust variance of the baseline runs'
  effects, worth `levels.MAD_EFFICIENCY * runs` degrees of freedom, so the reference is
  Student's t on those. A shift is **named** when the two-sided test of "no shift beyond the
  run-effect spread" rejects at `alpha`: a whole-suite move this large is
  a run-level event (the host, or a change that moves every benchmark), which a per-benchmark
  verdict cannot attribute to the code.
- **The lean** (`lean_p_value`). Undecided timings can each straddle the threshold while,
  together, leaning to a slowdown (six benchmarks +10 % among 36 at 3 rounds). Each primary
  timing's residual (its log-ratio less the common shift, over its standard error without the
  run effect) is mapped to a normal score through its own t distribution; the statistic is
  `sum(max(u, 0)^2)`, whose null distribution for m independent scores is the chi-bar-squared
  mixture `sum_k C(m, k) / 2^m chi^2_k` (exact). Removing the common shift is what makes the
  scores independent: they otherwise share the current run's effect, and their sum would
  carry it m times.

Deliberately not here: verdicts (`reports.analysis.series`, `reports.analysis.judge`), the
threshold rule (`reports.analysis.decision`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from reports.analysis.distributions import t_cdf, t_ppf, t_sf_two_sided

#: Timings a suite needs before its common shift is estimated (as for a run effect).
MIN_TIMINGS_FOR_SHIFT = 8
#: The lean test's level: a suite whose undecided timings lean to a slowdown this clearly is not
#: PASS. The realised rate on unchanged suites is far below it (0-1.5 % in `headline_rows`'
#: worlds): a low order statistic of few rounds has a light upper tail, and decided timings add
#: no lean; at 5 % six benchmarks 10 % slower read PASS in 5-8 % of suites, at 10 % in 1-4 %.
LEAN_ALPHA = 0.10
#: An undecided timing "leans" (and is listed) when its own one-sided p of "no slowdown" is below.
LEAN_LIST_P = 0.05


@dataclass(frozen=True)
class SuiteShift:
    """The current run's common shift against the baseline (log, worse-oriented).

    `se`: its standard error (run-effect spread + estimation error); `estimate_var`: the
    estimation error alone; `named`: beyond the run-effect spread at the level; `ci_low`,
    `ci_high`: the 95 % interval as ratios; `timings`: how many primary timings it rests on.
    """

    log_shift: float
    se: float
    estimate_var: float
    run_effect_var: float
    timings: int
    named: bool
    ci_low: float
    ci_high: float

    @property
    def ratio(self) -> float:
        """The shift as a ratio (> 1 = every timing slower)."""
        return math.exp(self.log_shift)

    def reaches(self, threshold: float) -> bool:
        """True when a named shift's interval reaches a slowdown of `threshold` or more."""
        return self.named and self.ci_high >= 1.0 + threshold


def estimate_shift(
    log_ratios: Sequence[float],
    variances: Sequence[float],
    run_effect_var: float,
    *,
    df: float,
    alpha: float,
    ci_level: float = 0.95,
) -> SuiteShift | None:
    """The common shift of a suite's primary timings (module docstring), or None.

    `log_ratios` are worse-oriented log-ratios current / baseline, `variances` their variances
    without the run effect, `df` the degrees of freedom of `run_effect_var` (`MAD_EFFICIENCY`
    x the baseline runs behind it; infinite for a known term). None below
    `MIN_TIMINGS_FOR_SHIFT` timings or without a run-effect variance (fewer than three
    baseline runs with an effect: the spread of a run's effect on this machine is unknown, so
    no shift can be told from it).
    """
    m = len(log_ratios)
    if m != len(variances):
        raise ValueError(f"{m} log-ratios for {len(variances)} variances")
    if m < MIN_TIMINGS_FOR_SHIFT or run_effect_var <= 0:
        return None
    shift = statistics.median(log_ratios)
    estimate_var = math.pi / 2.0 * statistics.median(max(v, 0.0) for v in variances) / m
    se = math.sqrt(run_effect_var + estimate_var)
    df = max(1.0, df)
    p = t_sf_two_sided(shift / se, df)
    z = t_ppf(0.5 + ci_level / 2.0, df)
    return SuiteShift(
        log_shift=shift,
        se=se,
        estimate_var=estimate_var,
        run_effect_var=run_effect_var,
        timings=m,
        named=p <= alpha,
        ci_low=math.exp(shift - z * se),
        ci_high=math.exp(shift + z * se),
    )


def normal_score(z: float, df: float) -> float:
    """The standard normal quantile of a t(df) statistic's CDF value (tails kept finite)."""
    if math.isinf(df):
        return z
    p = t_cdf(z, df)
    p = min(max(p, 1e-15), 1.0 - 1e-15)
    return t_ppf(p, math.inf)


def _gamma_q(a: float, x: float) -> float:
    """Regularized upper incomplete gamma Q(a, x) (series below a + 1, continued fraction
    above; Numerical Recipes 6.2)."""
    if x <= 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(1000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(log_front) * h


def chi2_sf(x: float, k: int) -> float:
    """P(chi^2_k >= x); 0 degrees of freedom is the point mass at 0."""
    if k == 0:
        return 1.0 if x <= 0 else 0.0
    return _gamma_q(k / 2.0, x / 2.0)


def chi_bar_sq_sf(statistic: float, m: int) -> float:
    """P(sum of m independent max(Z, 0)^2 >= statistic), Z standard normal."""
    log_half_m = -m * math.log(2.0)
    total = 0.0
    for k in range(m + 1):
        weight = math.exp(
            math.lgamma(m + 1) - math.lgamma(k + 1) - math.lgamma(m - k + 1) + log_half_m
        )
        total += weight * chi2_sf(statistic, k)
    return min(1.0, total)


def lean_statistic(scores: Sequence[float]) -> float:
    """sum(max(u, 0)^2) of normal scores."""
    return sum(max(u, 0.0) ** 2 for u in scores)


def lean_p_value(z_scores: Sequence[float], dfs: Sequence[float]) -> float:
    """p of "no timing leans to a slowdown" from residual t statistics (module docstring)."""
    if len(z_scores) != len(dfs):
        raise ValueError(f"{len(z_scores)} statistics for {len(dfs)} degrees of freedom")
    if not z_scores:
        return 1.0
    scores = [normal_score(z, df) for z, df in zip(z_scores, dfs, strict=True)]
    return chi_bar_sq_sf(lean_statistic(scores), len(scores))
