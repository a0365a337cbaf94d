"""Noise estimates that one bad run cannot spoil: the suite-wide run effect and robust levels.

Pure functions on log values; the docstrings are the specification, checked in
`tests/reports/analysis/test_noise_model.py` on synthetic suites with known answers.

The model, for one machine, on the log scale (effects are ratios, noise is a CV):

    log(location of run r, benchmark b) = mu_b + e_r + u_rb

(a run's location is `levels.run_location`, a low order statistic of its rounds that
preempted rounds cannot move: the run is the unit, its spread learned from the baseline.)

- `e_r`, the **run effect**, is shared by every benchmark of run r: a load burst, a thermal
  state, a noisy neighbour slows the whole run together. It is estimated per baseline run as
  the median over benchmarks of the run's deviation from each benchmark's median level
  (`estimate_run_effects`), and removed from the baseline before anything else is estimated,
  so a 1.8x burst run neither widens every benchmark's noise (hiding a regression) nor shifts
  its level (creating one). Its variance `var_e` comes from the median absolute deviation of
  the effects, so a few burst runs do not inflate it.
- `u_rb`, what is left, has the per-benchmark variance `tau_b^2`: estimated from the adjusted
  run locations after setting aside lone bursts (`levels.keep_mask`: a state seen repeatedly
  stays, as noise), within the newest level when main stepped 1-4 runs ago
  (`levels.recent_level_start`), then shrunk toward a prior worth `prior_weight_runs` runs
  (a scaled-inverse-chi^2 prior) whose value is at least the machine's typical variance over
  the suite (`levels.suite_run_var`), so that few runs on a noisy machine do not borrow the
  configured prior's optimism.
- The current run's variance carries `var_e` in full here: its own run effect cannot be told
  from an across-the-board change (a torch upgrade that slows everything) by one benchmark.
  Across the suite it can be estimated and named (`reports.analysis.shift`,
  `reports.analysis.judge`): a whole-run shift beyond `var_e` is judged as such, never as a
  per-benchmark regression.

Deliberately not here: the decision rule (`reports.analysis.decision`), verdicts
(`reports.analysis.series`).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from reports.analysis.changepoints import detect_steps
from reports.analysis.distributions import normal_cdf, t_ppf
from reports.analysis.levels import (
    MAD_TO_SIGMA,
    OUTLIER_SDS,
    biweight_var,
    keep_mask,
    location_at,
    recent_level_start,
    robust_sd,
    run_location,
)
from reports.analysis.timing_model import Fit, Levels

__all__ = [
    "MAD_TO_SIGMA",
    "OUTLIER_SDS",
    "NoiseEstimate",
    "Parts",
    "Prior",
    "RunEffects",
    "estimate_noise",
    "estimate_run_effects",
    "keep_mask",
    "kept_locations",
    "location_var_factor",
    "robust_sd",
    "run_location",
    "within_run_var",
]

#: Variance of the median of n normal values ~ KAPPA_MEDIAN * sigma^2 / n (kept for readers).
KAPPA_MEDIAN = math.pi / 2.0
#: Benchmarks a run needs before its run effect is estimated (fewer: the effect stays 0): with
#: fewer, the effect would soak up each benchmark's own noise and understate it.
MIN_BENCHMARKS_FOR_RUN_EFFECT = 8


def location_var_factor(rounds: float) -> float:
    """Variance of `run_location` of n normal rounds, in units of the round variance.

    The asymptotic variance of the sample p-quantile, p (1 - p) / (n phi(z_p)^2), at the
    order statistic's p = (index + 1) / (n + 1); about 0.8 for 2 rounds, 0.4 for 5. Only the
    difference between the baseline's and the current run's round counts uses it.
    """
    n = max(1, round(rounds))
    p = ((n - 1) // 3 + 1) / (n + 1)
    z = t_ppf(p, math.inf)
    density = math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return p * (1.0 - p) / (n * density * density) if 0.0 < normal_cdf(z) < 1.0 else 1.0


@dataclass(frozen=True)
class RunEffects:
    """Per-run suite-wide effects (log) and their robust variance.

    `offsets[r]` is run r's effect; `var` the variance of one run's effect (0.0 when fewer than
    three runs had one, in which case the per-benchmark variances hold it instead).
    """

    offsets: tuple[float, ...]
    var: float


def estimate_run_effects(log_medians: Sequence[Sequence[float | None]]) -> RunEffects:
    """Estimate each run's suite-wide effect from a runs x benchmarks table of log medians.

    Rows are runs, columns benchmarks (None = that run lacks it). For each benchmark with at
    least three values its level is the median of its column; a run's effect is the median of
    its deviations from those levels over the benchmarks it has, when it has at least
    `MIN_BENCHMARKS_FOR_RUN_EFFECT` of them (else 0.0). The effects are then centred on the
    median of their segment between suite-wide steps (`changepoints.detect_steps` on the
    effects: a lasting shift stays in the data for the per-benchmark step cut, a burst of one
    or two runs is removed), and `var` is `robust_sd(centred effects)^2` over the runs that
    had an effect, when there are at least three.
    """
    n_runs = len(log_medians)
    if n_runs == 0:
        return RunEffects((), 0.0)
    n_bench = max(len(row) for row in log_medians)
    levels: list[float | None] = []
    for b in range(n_bench):
        column = [row[b] for row in log_medians if b < len(row) and row[b] is not None]
        present = [v for v in column if v is not None]
        levels.append(statistics.median(present) if len(present) >= 3 else None)
    raw = [_effect(row, levels) for row in log_medians]
    known = [e for e in raw if e is not None]
    if len(known) < 3:
        return RunEffects(tuple(0.0 for _ in raw), 0.0)
    # A lasting suite-wide shift (a merged regression, a new machine image) is a level, not a
    # run effect: centre each run on the median of its segment between suite-wide steps, so
    # that only what is peculiar to one run (or two in a row) is removed.
    cuts = [s.index for s in detect_steps(known, min_rel_step=0.01)]
    tail = recent_level_start(known)
    if tail is not None and (not cuts or tail > cuts[-1]):
        cuts.append(tail)
    bounds = [0, *cuts, len(known)]
    centred: list[float] = []
    for lo, hi in itertools.pairwise(bounds):
        segment = known[lo:hi]
        centre = statistics.median(segment)
        centred.extend(e - centre for e in segment)
    it = iter(centred)
    offsets = tuple(0.0 if e is None else next(it) for e in raw)
    return RunEffects(offsets, biweight_var(centred))


def _effect(row: Sequence[float | None], levels: Sequence[float | None]) -> float | None:
    devs = [
        v - lvl for v, lvl in zip(row, levels, strict=False) if v is not None and lvl is not None
    ]
    return statistics.median(devs) if len(devs) >= MIN_BENCHMARKS_FOR_RUN_EFFECT else None


def within_run_var(logs: Sequence[float]) -> float | None:
    """Robust variance of one run's log rounds: (MAD * 1.4826)^2; None below 3 rounds."""
    if len(logs) < 3:
        return None
    return robust_sd(logs) ** 2


@dataclass(frozen=True)
class NoiseEstimate:
    """The noise of one benchmark's metric on one machine (log scale; module docstring).

    baseline_log: the level (mean of the adjusted log run locations of the current level).
    run_var: tau^2, the variance of one adjusted run location, shrunk toward the prior.
    within_var: sigma_w^2, the pooled robust round-to-round variance inside a run.
    between_var: what of tau^2 is not explained by within-run noise of the location.
    run_effect_var: var_e, the suite-wide run effect (the current run carries it).
    runs: baseline runs used; dropped: runs set aside as lone bursts; df: t degrees of freedom.
    level_runs: runs behind the level (= runs, or the newest 1-4 after a short new level).
    """

    baseline_log: float
    run_var: float
    within_var: float
    between_var: float
    run_effect_var: float
    rounds_per_run: float
    runs: int
    dropped: int
    df: float
    level_runs: int = 0

    @property
    def between_cv(self) -> float:
        """Run-to-run coefficient of variation (the suite-wide part included)."""
        return math.sqrt(self.between_var + self.run_effect_var)

    @property
    def within_cv(self) -> float:
        """Round-to-round coefficient of variation inside a run."""
        return math.sqrt(self.within_var)

    @property
    def short_level(self) -> bool:
        """True when the level is main's new level of its newest 1-4 runs only."""
        return 0 < self.level_runs < self.runs

    def current_var(self, rounds: float, repeats: int) -> float:
        """Variance of the current level: the mean of `repeats` runs of `rounds` rounds each.

        The run is the unit: one run location varies by tau^2 (learned from the baseline at
        its round count), corrected for a different round count through the within-run part;
        the suite-wide run effect is added, and the sum shrinks with the runs pooled.
        """
        within = location_var_factor(rounds) * self.within_var if rounds > 0 else 0.0
        return (self.between_var + self.run_effect_var + within) / repeats

    @property
    def baseline_var(self) -> float:
        """Variance of the baseline level (mean of the level's adjusted run locations)."""
        return self.run_var / max(1, self.level_runs or self.runs)


@dataclass(frozen=True)
class Parts:
    """The pieces of a noisy comparison's variance (log scale), for the machine-level step.

    `baseline_var`: the baseline level's; `run_var`: one current run's location without the
    suite-wide run effect (between-run + within-run at the compared round count);
    `run_effect_var`: var_e, the suite-wide run effect of one run; `noise_df`: the degrees of
    freedom of the per-benchmark terms; `current_logs`: each pooled current run's log location.
    `residuals`: each baseline run's adjusted location less the level, keyed by the run's index
    in the comparison (a group move's variance is measured from their group means);
    `fit`: the benchmark's own timing model on the host probes (`timing_model.fit`, None
    without one), `current_levels` the current runs' probe levels in their windows.
    """

    baseline_var: float
    run_var: float
    run_effect_var: float
    noise_df: float
    current_logs: tuple[float, ...]
    residuals: tuple[tuple[int, float], ...] = ()
    fit: Fit | None = None
    current_levels: tuple[Levels, ...] = ()

    @property
    def repeats(self) -> int:
        """The current runs pooled (the current run and its re-runs)."""
        return len(self.current_logs)

    def pool_factor(self, rho: float) -> float:
        """The variance of the mean of the pooled runs over one run's: `rho + (1 - rho) / n`,
        where re-runs share a host state with correlation `rho`."""
        return rho + (1.0 - rho) / self.repeats

    def variance(self, run_term: float, rho: float = 0.0) -> float:
        """se^2 with `run_term` for the current run's suite-wide effect (var_e, or what the host
        probes leave unexplained), the pooled runs sharing a state with correlation `rho`."""
        return self.baseline_var + (self.run_var + run_term) * self.pool_factor(rho)


@dataclass(frozen=True)
class Prior:
    """The prior on the run-to-run variance and how many runs it is worth (>= 1).

    run_cv: the configured run-to-run CV (2 % is typical on a quiet CPU).
    weight_runs: what the prior is worth, in runs.
    suite_run_var: the machine's typical run-location variance learned from the whole suite
        (`levels.suite_run_var` / `cross_suite_run_var`); a floor for the prior, so that a
        machine noisier than `run_cv` is not judged with the prior's optimism.
    suite_weight_runs: what the suite's estimate is worth, in runs (only used when it comes
        from the cross-suite spread, with a single baseline run; 0 otherwise).
    """

    run_cv: float = 0.02
    weight_runs: float = 2.0
    suite_run_var: float | None = None
    suite_weight_runs: float = 0.0


def estimate_noise(
    baseline: Sequence[Sequence[float]],
    prior: Prior,
    offsets: Sequence[float] | None = None,
    run_effect_var: float = 0.0,
    rounds: int | None = None,
) -> NoiseEstimate:
    """Fit the model to one series' baseline runs (each a non-empty tuple of positive values).

    Each run is summarised by its log location at `rounds` rounds (`levels.location_at`; its
    own count when None: pass the series' `levels.common_rounds` so that runs with different
    round counts share one expectation), less its suite-wide effect (`offsets`,
    log, zeros when None). Lone bursts are set aside (`levels.keep_mask`). When the newest
    2-4 runs form a new level (`levels.recent_level_start`), the level is their mean and the
    sample variance is pooled within the two levels (df k - 2); else the level is the mean of
    all kept runs (df k - 1). Then
    tau^2 = (nu0 * prior + df_s * sample variance) / (nu0 + df_s), with prior =
    max(log1p(run_cv)^2 + f(n) sigma_w^2, suite_run_var) and nu0 = max(weight_runs,
    suite_weight_runs); sigma_w^2 is pooled over kept runs with >= 3 rounds; df = nu0 + df_s.
    """
    if not baseline:
        raise ValueError("estimate_noise needs at least one baseline run")
    offs = list(offsets) if offsets is not None else [0.0] * len(baseline)
    if len(offs) != len(baseline):
        raise ValueError(f"{len(offs)} offsets for {len(baseline)} baseline runs")
    logs = [[math.log(v) - o for v in run] for run, o in zip(baseline, offs, strict=True)]
    locations = [
        math.log(location_at(run, rounds or len(run))) - o
        for run, o in zip(baseline, offs, strict=True)
    ]
    keep = keep_mask(locations)
    k = len(locations)
    start = recent_level_start(locations) or 0
    # A lone burst is set aside from the level (the mean) but not from the spread: the current
    # run is judged by the same rule, so a state the baseline has seen, even once, is noise.
    centres = [
        statistics.fmean([v for v, kp in zip(locations[a:b], keep[a:b], strict=True) if kp])
        for a, b in ((0, start), (start, k))
        if b > a
    ]
    segments = [seg for seg in (locations[:start], locations[start:]) if seg]
    sum_sq = sum(sum((v - c) ** 2 for v in seg) for seg, c in zip(segments, centres, strict=True))
    df_sample = k - len(segments)
    kept_logs = logs
    withins = [w for w in (within_run_var(run) for run in kept_logs) if w is not None]
    within = statistics.fmean(withins) if withins else 0.0
    n_bar = statistics.fmean(len(run) for run in kept_logs)
    within_part = location_var_factor(n_bar) * within
    prior_tau2 = math.log1p(prior.run_cv) ** 2 + within_part
    if prior.suite_run_var is not None:
        prior_tau2 = max(prior_tau2, prior.suite_run_var)
    nu0 = max(prior.weight_runs, prior.suite_weight_runs)
    sample_tau2 = sum_sq / df_sample if df_sample > 0 else 0.0
    tau2 = (nu0 * prior_tau2 + df_sample * sample_tau2) / (nu0 + df_sample)
    return NoiseEstimate(
        baseline_log=centres[-1],
        run_var=tau2,
        within_var=within,
        between_var=max(0.0, tau2 - within_part),
        run_effect_var=run_effect_var,
        rounds_per_run=n_bar,
        runs=k,
        dropped=keep.count(False),
        df=nu0 + df_sample,
        level_runs=k - start,
    )


def kept_locations(
    baseline: Sequence[Sequence[float]],
    offsets: Sequence[float] | None = None,
    rounds: int | None = None,
) -> list[float]:
    """Adjusted log run locations (at `rounds` rounds, `levels.location_at`; each run's own
    count when None), lone bursts left out, each less its level's centre (a short new level of
    the newest runs is its own level), for the suite's noise floor."""
    offs = list(offsets) if offsets is not None else [0.0] * len(baseline)
    locations = [
        math.log(location_at(run, rounds or len(run))) - o
        for run, o in zip(baseline, offs, strict=True)
    ]
    start = recent_level_start(locations) or 0
    out: list[float] = []
    for a, b in ((0, start), (start, len(locations))):
        seg = locations[a:b]
        kept = [v for v, k in zip(seg, keep_mask(seg), strict=True) if k]
        if kept:
            centre = statistics.fmean(kept)
            out += [v - centre for v in kept]
    return out
