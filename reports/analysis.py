"""Noise-aware verdicts: is the current run slower than its baseline history, beyond noise?

Pure functions on plain numbers (no I/O, no globals); the docstrings are the specification and
`tests/test_reports_analysis.py` checks them on synthetic series with known answers.

The model, for one benchmark and one timing metric (all on the log scale, so effects are
ratios and noise is a coefficient of variation):

    log(round time) = mu + run effect (variance sigma_b^2) + round noise (variance sigma_w^2)

- Each run is summarized by the **median of its log rounds** (robust to outlier rounds).
- `sigma_w^2` (within-run) is pooled over baseline runs from each run's median absolute
  deviation; `tau^2`, the variance of a run's median, is the sample variance of the baseline run
  medians. The between-run part is `sigma_b^2 = max(0, tau^2 - kappa * sigma_w^2 / n)` with
  `kappa = pi/2` (variance of a median of n normal values ~ pi/2 * sigma^2 / n). This is the
  method-of-moments estimate of a one-way random-effects model: run-to-run variation is
  learned from history, not guessed from the spread of rounds inside one run.
- Few baseline runs give a poor `tau^2`; it is shrunk toward a prior (`prior_run_cv`, worth
  `prior_weight_runs` runs; a scaled-inverse-chi^2 prior), and the degrees of freedom of the t
  distribution grow accordingly: `df = prior_weight_runs + k - 1` for k baseline runs.
- The current run's median has variance `sigma_b^2 + kappa * sigma_w^2 / n_current`; with r
  repeated current runs (re-runs of the same commit, summarized by the median of all their
  rounds pooled) the variance is divided by r. The
  baseline mean of k run medians has `tau^2 / k`. Their difference `d` has standard error
  `se = sqrt(both)`; `ratio = exp(d)`, the CI is `exp(d ± t_{df} * se)`, the p-value is the
  two-sided t test of `d = 0`.
- **Minimum detectable effect** (MDE): the slowdown detected with probability `power` at level
  `alpha`: `exp((t_{1-alpha/2} + t_{power}) * se) - 1`.
- **Suite-wide false-alarm control**: Benjamini-Hochberg over every noisy metric's p-value
  (q-values); under the global null (an unchanged suite) BH bounds the chance of any false
  `fail` by `alpha`, and the practical threshold makes it far smaller.

Verdicts (timing and other noisy metrics; lower is better):
- `new`: no baseline value; `missing`: a baseline value but no current value.
- `fail`: q <= alpha **and** ratio > 1 + threshold.
- `improved`: q <= alpha **and** ratio < 1 / (1 + threshold).
- `inconclusive`: the CI straddles 1 + threshold and MDE > threshold, or the ratio is beyond
  the threshold without significance after BH.
- `pass`: otherwise (the data rule out a slowdown beyond the threshold, or no change).

Deterministic metrics (KV bytes, weights bytes) compare the current value with the last
baseline value exactly: larger = `fail`, smaller = `improved`, equal = `pass`.

Deliberately not here: which metrics a benchmark has (`reports.metrics`), files, formatting.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from reports.changepoints import Step, detect_steps
from reports.distributions import t_ppf, t_sf_two_sided

VerdictName = Literal["fail", "pass", "inconclusive", "improved", "new", "missing"]
MetricKind = Literal["timing", "scalar", "exact"]
VERDICT_ORDER: tuple[VerdictName, ...] = (
    "fail",
    "inconclusive",
    "missing",
    "improved",
    "new",
    "pass",
)

KAPPA_MEDIAN = math.pi / 2.0
_MAD_TO_SIGMA = 1.482602218505602


@dataclass(frozen=True)
class AnalysisConfig:
    """Parameters of the verdict rules (CLI flags map onto these).

    threshold: practical threshold as a fraction (0.05 = 5 %), for metrics not in `per_metric`.
    per_metric: threshold per metric name (e.g. {"decode_step_s": 0.03}).
    alpha: BH false discovery level, also the two-sided level of the MDE. 0.01 keeps the
        share of unchanged suites with any false `fail` near 0.5 % (`python -m reports
        simulate`): half of the false discoveries fall on the `improved` side.
    ci_level: confidence level of the reported ratio interval.
    power: power used for the MDE.
    prior_run_cv: prior run-to-run coefficient of variation (2 % is typical on a quiet CPU).
    prior_weight_runs: how many baseline runs the prior is worth (>= 1).
    baseline_after_step: use only baseline runs after the last detected step, when at least
        `min_runs_after_step` remain (a merged regression becomes the new normal).
    max_baseline_runs: only the newest this many baseline runs count (older runs describe an
        older state of the machine, and a longer window costs time without adding much).
    """

    threshold: float = 0.05
    per_metric: Mapping[str, float] = field(default_factory=dict)
    alpha: float = 0.01
    ci_level: float = 0.95
    power: float = 0.8
    prior_run_cv: float = 0.02
    prior_weight_runs: float = 2.0
    baseline_after_step: bool = True
    min_runs_after_step: int = 5
    max_baseline_runs: int = 100

    def threshold_for(self, metric: str) -> float:
        """The practical threshold of `metric`."""
        return self.per_metric.get(metric, self.threshold)


@dataclass(frozen=True)
class MetricSeries:
    """One benchmark's metric on one machine: baseline runs' values and the current values.

    `baseline` holds one tuple per baseline run, oldest first (rounds in seconds for timings, a
    single value for other metrics); `current` is None when the current run lacks it.
    `current_repeats` holds earlier runs of the same commit (re-runs), pooled with `current`.
    """

    machine_id: str
    fullname: str
    metric: str
    kind: MetricKind
    baseline: tuple[tuple[float, ...], ...]
    current: tuple[float, ...] | None
    current_repeats: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class NoiseEstimate:
    """The random-effects noise model of one series (log scale; see the module docstring)."""

    baseline_log: float
    run_var: float
    within_var: float
    between_var: float
    rounds_per_run: float
    runs: int
    df: float

    @property
    def between_cv(self) -> float:
        """Run-to-run coefficient of variation."""
        return math.sqrt(self.between_var)

    @property
    def within_cv(self) -> float:
        """Round-to-round coefficient of variation inside a run."""
        return math.sqrt(self.within_var)


@dataclass(frozen=True)
class Verdict:
    """The judgement of one metric of one benchmark on one machine."""

    machine_id: str
    fullname: str
    metric: str
    kind: MetricKind
    verdict: VerdictName
    threshold: float
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    q_value: float | None = None
    mde: float | None = None
    baseline_value: float | None = None
    current_value: float | None = None
    baseline_runs: int = 0
    between_cv: float | None = None
    within_cv: float | None = None
    note: str = ""


def _log_median(values: Sequence[float]) -> float:
    return math.log(statistics.median(values))


def within_run_var(logs: Sequence[float]) -> float | None:
    """Robust variance of one run's log rounds: (MAD * 1.4826)^2; None below 3 rounds."""
    if len(logs) < 3:
        return None
    med = statistics.median(logs)
    mad = statistics.median(abs(x - med) for x in logs)
    return (mad * _MAD_TO_SIGMA) ** 2


def estimate_noise(baseline: Sequence[Sequence[float]], config: AnalysisConfig) -> NoiseEstimate:
    """Fit the random-effects model to baseline runs (each a non-empty tuple of positive values).

    Returns the baseline level (mean of log run medians), tau^2 shrunk toward the prior,
    sigma_w^2 pooled over runs with >= 3 rounds (0 when none), sigma_b^2, the mean rounds per
    run and the degrees of freedom `prior_weight_runs + k - 1`.
    """
    if not baseline:
        raise ValueError("estimate_noise needs at least one baseline run")
    logs = [[math.log(v) for v in run] for run in baseline]
    medians = [statistics.median(run) for run in logs]
    k = len(medians)
    withins = [w for w in (within_run_var(run) for run in logs) if w is not None]
    within = statistics.fmean(withins) if withins else 0.0
    n_bar = statistics.fmean(len(run) for run in logs)
    prior_tau2 = math.log1p(config.prior_run_cv) ** 2 + KAPPA_MEDIAN * within / n_bar
    nu0 = config.prior_weight_runs
    sample_tau2 = statistics.variance(medians) if k >= 2 else 0.0
    tau2 = (nu0 * prior_tau2 + (k - 1) * sample_tau2) / (nu0 + k - 1)
    between = max(0.0, tau2 - KAPPA_MEDIAN * within / n_bar)
    return NoiseEstimate(
        baseline_log=statistics.fmean(medians),
        run_var=tau2,
        within_var=within,
        between_var=between,
        rounds_per_run=n_bar,
        runs=k,
        df=nu0 + k - 1,
    )


def baseline_window(
    baseline: Sequence[Sequence[float]], config: AnalysisConfig
) -> tuple[tuple[tuple[float, ...], ...], Step | None]:
    """The baseline runs to compare against, and the step that cut the older ones off (if any).

    Only the newest `max_baseline_runs` runs are considered. With `baseline_after_step`, steps
    are detected in the log run medians; the runs after the
    last step are used when at least `min_runs_after_step` of them remain.
    """
    runs = tuple(tuple(r) for r in baseline[-config.max_baseline_runs :])
    if not config.baseline_after_step or len(runs) < 2 * config.min_runs_after_step:
        return runs, None
    steps = detect_steps([_log_median(r) for r in runs], min_rel_step=config.threshold / 2)
    if not steps:
        return runs, None
    last = steps[-1]
    if len(runs) - last.index < config.min_runs_after_step:
        return runs, None
    return runs[last.index :], last


def judge_noisy(series: MetricSeries, config: AnalysisConfig) -> Verdict:
    """Verdict of a timing or scalar series before suite-wide correction (q_value unset).

    `new`/`missing` as in the module docstring; otherwise the ratio, CI, raw p-value and MDE,
    with a provisional verdict that `apply_bh` finalizes.
    """
    threshold = config.threshold_for(series.metric)
    base = Verdict(series.machine_id, series.fullname, series.metric, series.kind, "new", threshold)
    if not series.baseline:
        if series.current is None:
            return replace(base, verdict="missing", note="no current and no baseline value")
        return replace(
            base,
            current_value=statistics.median(series.current),
            note="no baseline run has this benchmark",
        )
    window, cut = baseline_window(series.baseline, config)
    noise = estimate_noise(window, config)
    baseline_value = math.exp(noise.baseline_log)
    base = replace(
        base,
        baseline_value=baseline_value,
        baseline_runs=noise.runs,
        between_cv=noise.between_cv,
        within_cv=noise.within_cv,
        note=(
            f"baseline: {noise.runs} runs since a {cut.rel_change:+.1%} step"
            if cut is not None
            else ""
        ),
    )
    if series.current is None:
        return replace(base, verdict="missing")
    current_runs = (*series.current_repeats, series.current)
    r = len(current_runs)
    n_cur = statistics.fmean(len(run) for run in current_runs)
    # The median of all current rounds pooled: like a run median, robust to outlier rounds
    # (a mean of run medians lets one run with two slow rounds out of five move the result).
    current_log = _log_median([x for run in current_runs for x in run])
    var_current = (noise.between_var + KAPPA_MEDIAN * noise.within_var / n_cur) / r
    se = math.sqrt(var_current + noise.run_var / noise.runs)
    d = current_log - noise.baseline_log
    if se > 0:
        p = t_sf_two_sided(d / se, noise.df)
        t_ci = t_ppf(0.5 + config.ci_level / 2.0, noise.df)
        t_mde = t_ppf(1.0 - config.alpha / 2.0, noise.df) + t_ppf(config.power, noise.df)
    else:  # identical values everywhere: any difference is certain
        p = 1.0 if d == 0 else 0.0
        t_ci = t_mde = 0.0
    return replace(
        base,
        verdict="pass",
        ratio=math.exp(d),
        ci_low=math.exp(d - t_ci * se),
        ci_high=math.exp(d + t_ci * se),
        p_value=p,
        mde=math.expm1(t_mde * se),
        current_value=math.exp(current_log),
    )


def bh_qvalues(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order.

    q_(i) = min over j >= i of p_(j) * m / j for the sorted p-values, capped at 1.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    q = [1.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, p_values[i] * m / rank)
        q[i] = min(1.0, running)
    return q


def classify(v: Verdict, alpha: float) -> VerdictName:
    """The final verdict of a noisy metric with its q-value set (rules in the module docstring)."""
    if v.ratio is None or v.q_value is None or v.ci_low is None or v.ci_high is None:
        return v.verdict
    limit = 1.0 + v.threshold
    significant = v.q_value <= alpha
    if significant and v.ratio > limit:
        return "fail"
    if significant and v.ratio < 1.0 / limit:
        return "improved"
    straddles = v.ci_low < limit < v.ci_high
    if (straddles and v.mde is not None and v.mde > v.threshold) or v.ratio > limit:
        return "inconclusive"
    return "pass"


def apply_bh(verdicts: Sequence[Verdict], alpha: float) -> list[Verdict]:
    """Set q-values over every verdict that has a p-value, then classify each one."""
    idx = [i for i, v in enumerate(verdicts) if v.p_value is not None]
    qs = bh_qvalues([verdicts[i].p_value or 0.0 for i in idx])
    out = list(verdicts)
    for i, q in zip(idx, qs, strict=True):
        with_q = replace(out[i], q_value=q)
        out[i] = replace(with_q, verdict=classify(with_q, alpha))
    return out


def judge_exact(series: MetricSeries, config: AnalysisConfig) -> Verdict:
    """Deterministic metric: the current value against the last baseline value, exactly.

    Larger = `fail`, smaller = `improved` (lower is better for bytes), equal = `pass`; the note
    says by how many units it changed.
    """
    threshold = config.threshold_for(series.metric)
    v = Verdict(series.machine_id, series.fullname, series.metric, "exact", "new", threshold)
    last = series.baseline[-1][-1] if series.baseline else None
    cur = series.current[-1] if series.current else None
    if last is None:
        if cur is None:
            return replace(v, verdict="missing")
        return replace(v, current_value=cur, note="no baseline value")
    v = replace(v, baseline_value=last, baseline_runs=len(series.baseline))
    if cur is None:
        return replace(v, verdict="missing")
    v = replace(v, current_value=cur, ratio=cur / last if last else None)
    if cur == last:
        return replace(v, verdict="pass", note="unchanged")
    grew = cur > last
    return replace(
        v,
        verdict="fail" if grew else "improved",
        note=f"{'grew' if grew else 'shrank'} by {abs(cur - last):,.0f} (exact comparison)",
    )


def judge_suite(series: Sequence[MetricSeries], config: AnalysisConfig) -> list[Verdict]:
    """Verdicts for every series of a suite, with BH applied across all noisy metrics together."""
    provisional = [
        judge_exact(s, config) if s.kind == "exact" else judge_noisy(s, config) for s in series
    ]
    return apply_bh(provisional, config.alpha)


def summarize(verdicts: Sequence[Verdict]) -> dict[VerdictName, int]:
    """Count of each verdict name (every name present, zeros included)."""
    counts: dict[VerdictName, int] = dict.fromkeys(VERDICT_ORDER, 0)
    for v in verdicts:
        counts[v.verdict] += 1
    return counts
