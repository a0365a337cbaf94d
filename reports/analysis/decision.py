"""The decision rule shared by the gate and the A/B command: test against the threshold.

Pure functions on plain numbers; the docstrings are the specification and
`tests/reports/analysis/test_decision.py` checks them by simulation over many seeds.

Orientation. Every function takes `log_ratio`, the natural log of current / baseline turned so
that **positive = worse**: for a lower-is-better metric (seconds, bytes) it is
`log(current / baseline)`; for a higher-is-better metric (tokens/s) the sign is flipped
(`worse_log_ratio` does this). `se` is the standard error of `log_ratio`, `df` the degrees of
freedom of its Student-t reference distribution (`math.inf` = normal), `threshold` the practical
threshold as a fraction (0.05 = 5 %): "worse" means a worse-ratio above `1 + threshold`.

The rule, per metric:

- `fail`: H0 "true worse-ratio <= 1 + threshold" is rejected one-sided at the suite-corrected
  level: the Holm-adjusted fail-side p-value is <= alpha. A true slowdown of exactly the
  threshold is flagged with probability <= alpha / m (m = the size of the family); a slowdown
  below the threshold even less often. This is a test *against the threshold*, not a test of
  "ratio != 1" followed by a look at the point estimate.
- `improved`: the mirror: H0 "true worse-ratio >= 1 / (1 + threshold)" rejected with the
  Holm-adjusted improved-side p-value <= alpha (its own Holm family).
- `pass`: neither, and the two-sided `ci_level` interval of the worse-ratio lies entirely below
  `1 + threshold` (the data rule out a slowdown beyond the threshold).
- `inconclusive`: neither, and the interval reaches `1 + threshold` or beyond (it straddles the
  threshold, or it lies above it without enough evidence after the correction).

Attribution. An `Evidence` may carry `alternatives`: the same comparison with the host's move
(measured by the host probes) or the suite's common move credited, each its own (log_ratio,
se). The decision must hold for every attribution: the fail-side and improved-side p-values are
the largest over them, and the interval spans all of theirs (so `pass` needs every attribution's
interval below `1 + threshold`). With none, the rule is the plain one above.

Heavy tails widen, never narrow. An `Evidence` with finite tails (`tail_up`, `tail_down`: nu
of the slow and the fast side of the machine's run-to-run noise, Student t,
`reports.analysis.tails`) is also referred, on that side, to t(min(df, nu)) with its standard
error divided by `tails.tail_scale(nu)` (a unit-variance t(nu) deviation lies beyond 3.5 SDs ten
times as often as a normal one), and the more cautious of the two readings is kept: the larger
p-value, the wider interval end, the larger MDE. At a 95 % interval with df 4 and nu 3 the
tail reading alone would give 1.84 se instead of t(4)'s 2.78 (issue 51); at Holm's small levels
it is the tail reading that is wider. The fail-side p-value, the interval's upper end and the
MDE use the slow side; the improved-side p-value and the interval's lower end the fast side.

Suite-level control: Holm's step-down over the fail-side p-values of every metric in the suite
bounds the probability that the suite gets *any* false `fail` by alpha, whatever the other
metrics do (improvements elsewhere cannot loosen it, unlike BH). An any-fail gate is exactly
the family-wise error that Holm controls.

The MDE (minimum detectable effect): the smallest true slowdown (a fraction) that this rule
flags with probability `power`, correction included: at the most stringent Holm step
(level alpha / m), `exp(log1p(threshold) + delta * se) - 1`, where `delta` is the exact
noncentrality at which the noncentral t with `df` degrees of freedom exceeds `t_{1-alpha/m}`
with probability `power` (the shift approximation `t_{1-alpha/m} + t_{power}` gave 72-73 %
power at small df). It is always above the threshold, since the rule only fails what is
credibly *beyond* it.

Deliberately not here: noise estimation (`reports.analysis.series`,
`reports.analysis.noise_model`), which
metrics exist and their direction (`reports.analysis.metrics`), files and formatting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from reports.analysis.distributions import noncentral_t_ncp_for_power, t_ppf, t_sf_two_sided
from reports.analysis.tails import tail_scale

Outcome = Literal["fail", "pass", "inconclusive", "improved"]


def worse_log_ratio(current: float, baseline: float, *, higher_is_better: bool) -> float:
    """log(current / baseline) oriented so that positive = worse (both values must be > 0)."""
    if current <= 0 or baseline <= 0:
        raise ValueError(f"ratio needs positive values, got current={current} baseline={baseline}")
    raw = math.log(current / baseline)
    return -raw if higher_is_better else raw


def _upper_tail(z: float, df: float) -> float:
    """P(T >= z) for Student's t with `df` degrees of freedom, accurate for tiny tails."""
    half = 0.5 * t_sf_two_sided(z, df)
    return half if z >= 0 else 1.0 - half


def p_fail(log_ratio: float, se: float, df: float, threshold: float) -> float:
    """One-sided p-value of H0 "true worse-ratio <= 1 + threshold".

    P(T >= (log_ratio - log1p(threshold)) / se) with T ~ t(df). With `se == 0` the value is
    certain: 0 when log_ratio > log1p(threshold), else 1.
    """
    if se < 0 or threshold < 0:
        raise ValueError(f"se and threshold must be >= 0, got se={se} threshold={threshold}")
    limit = math.log1p(threshold)
    if se == 0:
        return 0.0 if log_ratio > limit else 1.0
    return _upper_tail((log_ratio - limit) / se, df)


def p_improved(log_ratio: float, se: float, df: float, threshold: float) -> float:
    """One-sided p-value of H0 "true worse-ratio >= 1 / (1 + threshold)" (the mirror of p_fail).

    P(T <= (log_ratio + log1p(threshold)) / se). With `se == 0`: 0 when
    log_ratio < -log1p(threshold), else 1.
    """
    return p_fail(-log_ratio, se, df, threshold)


def holm_adjust(p_values: Sequence[float], weights: Sequence[float] | None = None) -> list[float]:
    """Holm step-down adjusted p-values, in the input order (weighted when `weights` given).

    Sorted by p_i / w_i ascending: adjusted_(i) = max over j <= i of
    min(1, W_j * p_(j) / w_(j)), W_j the weight of the hypotheses not rejected before step j
    (all weights 1: W_j = m - j + 1, Holm's procedure). Rejecting where adjusted <= alpha keeps
    the family-wise error rate (the chance of any false rejection) <= alpha under any dependence
    between the tests (Holm 1979, weighted form); a hypothesis of weight w is first tested at
    alpha * w / sum(w).
    """
    m = len(p_values)
    for p in p_values:
        if not 0.0 <= p <= 1.0 or math.isnan(p):
            raise ValueError(f"p-values must lie in [0, 1], got {p}")
    w = list(weights) if weights is not None else [1.0] * m
    if len(w) != m or any(x <= 0 for x in w):
        raise ValueError(f"need {m} positive weights, got {w}")
    order = sorted(range(m), key=lambda i: p_values[i] / w[i])
    out = [1.0] * m
    running = 0.0
    remaining = math.fsum(w)
    for i in order:
        running = max(running, min(1.0, remaining * p_values[i] / w[i]))
        out[i] = running
        remaining -= w[i]
    return out


def interval(log_ratio: float, se: float, df: float, ci_level: float) -> tuple[float, float]:
    """Two-sided `ci_level` confidence interval of the worse-ratio: exp(log_ratio +- t * se)."""
    if not 0.0 < ci_level < 1.0:
        raise ValueError(f"ci_level must lie in (0, 1), got {ci_level}")
    if se == 0:
        return math.exp(log_ratio), math.exp(log_ratio)
    t = t_ppf(0.5 + ci_level / 2.0, df)
    return math.exp(log_ratio - t * se), math.exp(log_ratio + t * se)


def classify(
    ci_high: float,
    threshold: float,
    *,
    p_fail_adjusted: float,
    p_improved_adjusted: float,
    alpha: float,
) -> Outcome:
    """The outcome of one metric (rules in the module docstring).

    `ci_high` is the upper end of the worse-ratio interval; the p-values are Holm-adjusted
    within their family (fail side and improved side separately).
    """
    if p_fail_adjusted <= alpha:
        return "fail"
    if p_improved_adjusted <= alpha:
        return "improved"
    if ci_high < 1.0 + threshold:
        return "pass"
    return "inconclusive"


def mde(
    se: float, df: float, threshold: float, *, alpha: float, family_size: int, power: float
) -> float:
    """Smallest true slowdown (fraction) flagged `fail` with probability `power`.

    The level is alpha / family_size (Holm's first step, what a lone regression among
    unchanged metrics faces), so the figure includes the correction:
    `exp(log1p(threshold) + delta * se) - 1` with `delta` the noncentrality of the t(df)
    statistic at which the one-sided test at alpha / m rejects with probability `power`
    (exact: the noncentral t, `distributions.noncentral_t_ncp_for_power`; `se` is read as the
    estimate whose uncertainty `df` describes). Memoised per (df, level, power).
    """
    if family_size < 1:
        raise ValueError(f"family_size must be >= 1, got {family_size}")
    if se == 0:
        return threshold
    # df rounded to 2 significant digits (0.1 below 10) for the memo: Welch-Satterthwaite
    # degrees of freedom differ per metric, and the MDE moves < 0.5 % over such a rounding.
    df_key = df if math.isinf(df) else (round(df, 1) if df < 10 else float(f"{df:.2g}"))
    critical = t_ppf(1.0 - alpha / family_size, df_key)
    delta = noncentral_t_ncp_for_power(critical, df_key, power)
    return math.expm1(math.log1p(threshold) + delta * se)


@dataclass(frozen=True)
class Evidence:
    """What one metric's comparison contributes to a decision (see the module docstring).

    `alternatives`: (log_ratio, se) of other attributions of the same move (module docstring).
    """

    log_ratio: float
    se: float
    df: float
    threshold: float
    alternatives: tuple[tuple[float, float], ...] = ()
    tail_up: float = math.inf
    tail_down: float = math.inf
    weight: float = 1.0

    def on_tail(self, nu: float) -> Evidence:
        """The same evidence on a t(min(df, nu)) reference (module docstring, "Heavy tails")."""
        if math.isinf(nu):
            return Evidence(
                self.log_ratio,
                self.se,
                self.df,
                self.threshold,
                self.alternatives,
                weight=self.weight,
            )
        k = tail_scale(nu)
        return Evidence(
            self.log_ratio,
            self.se / k,
            min(self.df, nu),
            self.threshold,
            tuple((d, se / k) for d, se in self.alternatives),
            weight=self.weight,
        )

    @property
    def attributions(self) -> tuple[tuple[float, float], ...]:
        """The evidence itself, then its alternatives."""
        return ((self.log_ratio, self.se), *self.alternatives)

    def p_fail(self) -> float:
        """The fail-side p-value that holds for every attribution (the largest)."""
        return max(p_fail(d, se, self.df, self.threshold) for d, se in self.attributions)

    def p_improved(self) -> float:
        """The improved-side p-value that holds for every attribution (the largest)."""
        return max(p_improved(d, se, self.df, self.threshold) for d, se in self.attributions)

    def interval(self, ci_level: float) -> tuple[float, float]:
        """The worse-ratio interval spanning every attribution's."""
        ends = [interval(d, se, self.df, ci_level) for d, se in self.attributions]
        return min(lo for lo, _ in ends), max(hi for _, hi in ends)


@dataclass(frozen=True)
class Decision:
    """The decision on one metric: the outcome and every number that led to it.

    `ratio`, `ci_low`, `ci_high` are worse-ratios (> 1 = worse); `mde` is a fraction.
    """

    outcome: Outcome
    ratio: float
    ci_low: float
    ci_high: float
    p_fail: float
    p_improved: float
    p_fail_adjusted: float
    p_improved_adjusted: float
    mde: float


@dataclass(frozen=True)
class RuleConfig:
    """Levels of the rule: alpha (family-wise, per side), the interval level, the MDE power."""

    alpha: float = 0.01
    ci_level: float = 0.95
    power: float = 0.8


def decide(evidence: Sequence[Evidence], rule: RuleConfig | None = None) -> list[Decision]:
    """Decide a family of metrics at once (one suite, one machine or one A/B comparison).

    Holm runs over every item's fail-side p-value (and, separately, improved-side), weighted by
    `Evidence.weight`; the MDE of each item is at its first Holm step, alpha * weight / (the
    weights' sum). Returned in the input order.
    """
    cfg = rule or RuleConfig()
    # Each side read twice, plain and on its tail; the more cautious reading is kept.
    slow = [(e, e.on_tail(e.tail_up)) for e in evidence]
    fast = [(e, e.on_tail(e.tail_down)) for e in evidence]
    pf = [max(a.p_fail(), b.p_fail()) for a, b in slow]
    pi = [max(a.p_improved(), b.p_improved()) for a, b in fast]
    weights = [e.weight for e in evidence]
    pf_adj, pi_adj = holm_adjust(pf, weights), holm_adjust(pi, weights)
    total = math.fsum(weights)
    out = []
    for e, up, down, f, i, fa, ia in zip(evidence, slow, fast, pf, pi, pf_adj, pi_adj, strict=True):
        lo = min(x.interval(cfg.ci_level)[0] for x in down)
        hi = max(x.interval(cfg.ci_level)[1] for x in up)
        outcome = classify(
            hi, e.threshold, p_fail_adjusted=fa, p_improved_adjusted=ia, alpha=cfg.alpha
        )
        level = cfg.alpha * e.weight / total * len(evidence)
        out.append(
            Decision(
                outcome=outcome,
                ratio=math.exp(e.log_ratio),
                ci_low=lo,
                ci_high=hi,
                p_fail=f,
                p_improved=i,
                p_fail_adjusted=fa,
                p_improved_adjusted=ia,
                mde=max(
                    mde(
                        x.se,
                        x.df,
                        x.threshold,
                        alpha=level,
                        family_size=len(evidence),
                        power=cfg.power,
                    )
                    for x in up
                ),
            )
        )
    return out
