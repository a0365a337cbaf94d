"""Verdicts: is the current run worse than its baseline by more than the threshold, with confidence?

Pure functions on plain numbers (no I/O, no globals); the docstrings are the specification and
`tests/reports/analysis/test_series.py` checks them on synthetic series with known answers.

Per metric (all on the log scale, so effects are ratios and noise is a CV):

- The noise model is `reports.analysis.noise_model`: each run is summarized by its location
  (`levels.run_location`: the floor((n - 1) / 3)-th smallest round, which a preempted round
  cannot move), on the log scale; the suite-wide run effect of every baseline run is removed,
  outlier runs are dropped, and the per-benchmark run-to-run variance is shrunk toward a prior
  (df = prior weight + kept runs - 1).
- `d` = log(current level) - log(baseline level), oriented so that positive = worse (every
  metric judged here is lower-is-better: seconds and bytes; `MetricSeries.higher_is_better`
  flips it). Its standard error is `se = sqrt(var(current) + var(baseline level))`, where the
  current level (the mean log location of the current run and of any re-runs pooled with it)
  carries the between-run, run-effect and within-run variance divided by the runs pooled.
- The rule is `reports.analysis.decision`: `fail` when the one-sided test of "worse-ratio <= 1 +
  threshold" rejects at the Holm-corrected level alpha over every noisy metric of the suite
  (family-wise: an unchanged suite goes red with probability <= alpha); `improved` the mirror;
  `pass` when the 95 % interval lies below 1 + threshold; `inconclusive` otherwise. The MDE is
  the smallest true slowdown flagged with 80 % power at Holm's first-step level alpha / m.
- `new`: no baseline value; `missing`: a baseline value but no current value.

Deterministic metrics (KV bytes, weights bytes) compare the current value with the last
baseline value exactly (`reports.analysis.exact`).

Deliberately not here: which metrics a benchmark has (`reports.analysis.metrics`), files,
formatting.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from reports.analysis import decision
from reports.analysis.changepoints import Step, detect_steps
from reports.analysis.levels import (
    common_rounds,
    level_start,
    location_at,
    round_mismatch,
)
from reports.analysis.noise_model import (
    Parts,
    Prior,
    estimate_noise,
    location_var_factor,
)
from reports.analysis.timing_model import GroupPrior, Levels, fit

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


@dataclass(frozen=True)
class AnalysisConfig:
    """Parameters of the verdict rules (CLI flags map onto these).

    threshold: practical threshold as a fraction (0.05 = 5 %), for metrics not in `per_metric`.
    per_metric: threshold per metric name (e.g. {"decode_step_s": 0.03}).
    alpha: Holm family-wise level per side over every noisy metric of the suite: an unchanged
        suite gets any false `fail` with probability <= alpha.
    ci_level: confidence level of the reported ratio interval (and of the `pass` rule).
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

    @property
    def prior(self) -> Prior:
        """The noise prior of `reports.analysis.noise_model`."""
        return Prior(self.prior_run_cv, self.prior_weight_runs)

    @property
    def rule(self) -> decision.RuleConfig:
        """The levels of `reports.analysis.decision`."""
        return decision.RuleConfig(self.alpha, self.ci_level, self.power)


@dataclass(frozen=True)
class MetricSeries:
    """One benchmark's metric on one machine: baseline runs' values and the current values.

    `baseline` holds one tuple per baseline run, oldest first (rounds in seconds for timings, a
    single value for other metrics); `current` is None when the current run lacks it.
    `current_repeats` holds earlier runs of the same commit (re-runs), pooled with `current`.
    `baseline_offsets` (log, one per baseline run, or empty for none) are the runs' suite-wide
    effects (`noise_model.estimate_run_effects`), `run_effect_var` their variance.
    `baseline_probes` (one per baseline run, or empty) and `current_probes` (one per current
    run, re-runs first) hold the host probes' levels in this benchmark's window of each run
    (`timing_model.Levels`); `baseline_index` each baseline run's index in the comparison (empty:
    0, 1, ...), so that benchmarks' residuals of one run can be put together.
    """

    machine_id: str
    fullname: str
    metric: str
    kind: MetricKind
    baseline: tuple[tuple[float, ...], ...]
    current: tuple[float, ...] | None
    current_repeats: tuple[tuple[float, ...], ...] = ()
    baseline_offsets: tuple[float, ...] = ()
    run_effect_var: float = 0.0
    higher_is_better: bool = False
    baseline_probes: tuple[Levels, ...] = ()
    current_probes: tuple[Levels, ...] = ()
    baseline_index: tuple[int, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """The judgement of one metric of one benchmark on one machine.

    ratio, ci_low, ci_high: worse-ratios of current / baseline (> 1 = worse). p_value: the
    one-sided fail-side p-value; p_adjusted: the same after Holm over the suite; p_improved:
    the improved-side p-value. log_ratio, se, df: the evidence handed to
    `reports.analysis.decision`.
    stack_change: the software-stack fields that changed against the baseline, or "".
    alternatives: (log_ratio, se) of the same evidence with the host's (or the suite's common)
    move credited (`reports.analysis.attribution`): the decision holds for every one of them.
    tails: the Student t degrees of freedom of the slow and the fast side of the machine's
    run-to-run noise (`reports.analysis.tails`; inf: normal).
    holm_weight: the verdict's weight in the suite's Holm family (group moves share half of it).
    attributed: the verdict is undecided because the attributions disagree (machine or code).
    parts: the variance's pieces (`Parts`), None for exact metrics and new/missing ones.
    """

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
    p_adjusted: float | None = None
    p_improved: float | None = None
    mde: float | None = None
    baseline_value: float | None = None
    current_value: float | None = None
    baseline_runs: int = 0
    between_cv: float | None = None
    within_cv: float | None = None
    log_ratio: float | None = None
    se: float | None = None
    df: float | None = None
    note: str = ""
    stack_change: str = ""
    alternatives: tuple[tuple[float, float], ...] = ()
    tails: tuple[float, float] = (math.inf, math.inf)
    holm_weight: float = 1.0
    attributed: bool = False
    parts: Parts | None = field(default=None, compare=False, repr=False)

    @property
    def compared(self) -> bool:
        """True when a baseline value took part (every verdict except `new`)."""
        return self.verdict != "new"


def log_location(values: Sequence[float], rounds: int | None = None) -> float:
    """log `levels.location_at` at `rounds` rounds (the run's own count when None)."""
    return math.log(location_at(values, rounds or len(values)))


def adjusted(series: MetricSeries) -> list[tuple[float, ...]]:
    """Baseline runs with their suite-wide effect divided out (values stay positive)."""
    offsets = series.baseline_offsets or (0.0,) * len(series.baseline)
    return [
        tuple(v / math.exp(o) for v in run) for run, o in zip(series.baseline, offsets, strict=True)
    ]


def baseline_start(
    baseline: Sequence[Sequence[float]], config: AnalysisConfig, rounds: int | None = None
) -> tuple[int, Step | None]:
    """Index of the first baseline run to compare against, and the step that cut older ones off.

    Only the newest `max_baseline_runs` runs are considered. With `baseline_after_step`, steps
    are detected in the log run medians (pass them with run effects removed, so that a burst
    run is not a level); the runs after the last step are used when at least
    `min_runs_after_step` of them remain. Runs are summarised at `rounds` rounds.
    """
    start = max(0, len(baseline) - config.max_baseline_runs)
    runs = baseline[start:]
    if not config.baseline_after_step or len(runs) < 2 * config.min_runs_after_step:
        return start, None
    logs = [log_location(r, rounds) for r in runs]
    steps = detect_steps(logs, min_rel_step=config.threshold / 2)
    cut = level_start(logs, steps)
    if cut is None or len(runs) - cut.index < config.min_runs_after_step:
        return start, None
    return start + cut.index, cut


def verdict_window(series: MetricSeries, config: AnalysisConfig) -> tuple[int, int, Step | None]:
    """The round count every run of the series is summarised at (both sides), the first
    baseline run compared against and the step that cut older ones off (`baseline_start`)."""
    current_runs = (*series.current_repeats, series.current) if series.current else ()
    # Every run, both sides, at one round count: a low order statistic's expectation moves
    # with the count (`levels.location_at`).
    rounds = common_rounds([*series.baseline, *current_runs])
    first, cut = baseline_start(adjusted(series), config, rounds)
    return rounds, first, cut


def model_inputs(
    series: MetricSeries, rounds: int, first: int
) -> tuple[list[float], list[Levels]] | None:
    """The baseline runs' log locations and probe levels the timing model is fitted to, from
    `verdict_window`'s `rounds` and `first`; None without probe levels."""
    if not series.baseline_probes or len(series.baseline_probes) != len(series.baseline):
        return None
    ys = [log_location(run, rounds) for run in series.baseline[first:]]
    return ys, list(series.baseline_probes[first:])


def judge_noisy(
    series: MetricSeries,
    config: AnalysisConfig,
    prior: Prior | None = None,
    group: GroupPrior | None = None,
) -> Verdict:
    """Verdict of a timing or scalar series before the suite-wide correction.

    `new`/`missing` as in the module docstring; otherwise the evidence (log_ratio, se, df),
    the raw one-sided p-values and the baseline figures, with a provisional verdict `pass`
    that `apply_holm` finalizes. `prior` (default: the configured one) carries the suite's
    noise floor (`suite_prior`); `group` the metric group's loadings on the host probes, toward
    which this benchmark's own are shrunk (`timing_model`).
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
    current_runs = (*series.current_repeats, series.current) if series.current else ()
    rounds, first, cut = verdict_window(series, config)
    offsets = (series.baseline_offsets or (0.0,) * len(series.baseline))[first:]
    # The run is the unit: each current run summarised like a baseline run, then averaged.
    current_log = (
        statistics.fmean(log_location(run, rounds) for run in current_runs)
        if current_runs
        else None
    )
    noise = estimate_noise(
        series.baseline[first:], prior or config.prior, offsets, series.run_effect_var, rounds
    )
    notes = []
    if mismatch := round_mismatch(series.baseline[first:], current_runs, rounds):
        notes.append(mismatch)
    if cut is not None:
        notes.append(f"baseline: {noise.runs} runs since a {cut.rel_change:+.1%} step")
    if noise.short_level:
        notes.append(
            f"baseline: main's new level of its newest {noise.level_runs} run(s) "
            "(a short level: wider interval)"
        )
    if noise.dropped:
        notes.append(
            f"{noise.dropped} lone burst baseline run(s) left out of the level, kept in the spread"
        )
    base = replace(
        base,
        baseline_value=math.exp(noise.baseline_log),
        baseline_runs=noise.runs,
        between_cv=noise.between_cv,
        within_cv=noise.within_cv,
        note="; ".join(notes),
    )
    if series.current is None or current_log is None:
        return replace(base, verdict="missing")
    # Summarised at `rounds` rounds, a longer current run is steadier than a run of `rounds`
    # rounds, but not by the order statistic's formula at its own count (the summary weighs its
    # lowest rounds most): its variance is taken as that of `rounds` rounds (conservative).
    current_logs = tuple(log_location(run, rounds) for run in current_runs)
    within = location_var_factor(rounds) * noise.within_var if rounds > 0 else 0.0
    index = series.baseline_index or tuple(range(len(series.baseline)))
    residuals = tuple(
        (index[first + i], log_location(run, rounds) - o - noise.baseline_log)
        for i, (run, o) in enumerate(zip(series.baseline[first:], offsets, strict=True))
    )
    inputs = model_inputs(series, rounds, first)
    model = fit(*inputs, group) if inputs is not None else None
    if model is not None:
        # the fit's residuals keyed by the comparison's run index, like the plain ones
        model = replace(model, residuals=tuple((index[first + i], r) for i, r in model.residuals))
    parts = Parts(
        baseline_var=noise.baseline_var,
        run_var=noise.between_var + within,
        run_effect_var=noise.run_effect_var,
        noise_df=noise.df,
        current_logs=current_logs,
        residuals=residuals,
        fit=model,
        current_levels=series.current_probes if model is not None else (),
    )
    se = math.sqrt(parts.variance(noise.run_effect_var))
    d = current_log - noise.baseline_log
    worse = -d if series.higher_is_better else d
    return replace(
        base,
        verdict="pass",
        log_ratio=worse,
        se=se,
        df=noise.df,
        p_value=decision.p_fail(worse, se, noise.df, threshold),
        p_improved=decision.p_improved(worse, se, noise.df, threshold),
        current_value=math.exp(current_log),
        parts=parts,
    )


def apply_holm(verdicts: Sequence[Verdict], config: AnalysisConfig) -> list[Verdict]:
    """Decide every verdict that carries evidence as one Holm family
    (`reports.analysis.decision.decide`).

    Sets ratio, interval, adjusted p-value, MDE and the final verdict; others pass through.
    """
    idx = [i for i, v in enumerate(verdicts) if v.se is not None and v.log_ratio is not None]
    evidence = [
        decision.Evidence(
            verdicts[i].log_ratio or 0.0,
            verdicts[i].se or 0.0,
            verdicts[i].df or math.inf,
            verdicts[i].threshold,
            verdicts[i].alternatives,
            *verdicts[i].tails,
            verdicts[i].holm_weight,
        )
        for i in idx
    ]
    out = list(verdicts)
    for i, dec in zip(idx, decision.decide(evidence, config.rule), strict=True):
        out[i] = replace(
            out[i],
            verdict=dec.outcome,
            ratio=dec.ratio,
            ci_low=dec.ci_low,
            ci_high=dec.ci_high,
            p_value=dec.p_fail,
            p_improved=dec.p_improved,
            p_adjusted=dec.p_fail_adjusted,
            mde=dec.mde,
        )
    return out


def summarize(verdicts: Sequence[Verdict]) -> dict[VerdictName, int]:
    """Count of each verdict name (every name present, zeros included)."""
    counts: dict[VerdictName, int] = dict.fromkeys(VERDICT_ORDER, 0)
    for v in verdicts:
        counts[v.verdict] += 1
    return counts
