"""Noise estimates that one bad run cannot spoil: the suite-wide run effect and robust levels.

Pure functions on log values; the docstrings are the specification, checked in
`tests/reports/analysis/test_noise_model.py` on synthetic suites with known answers.

The model, for one machine, on the log scale (effects are ratios, noise is a CV):

    log(median of run r, benchmark b) = mu_b + e_r + u_rb

- `e_r`, the **run effect**, is shared by every benchmark of run r: a load burst, a thermal
  state, a noisy neighbour slows the whole run together. It is estimated per baseline run as
  the median over benchmarks of the run's deviation from each benchmark's median level
  (`estimate_run_effects`), and removed from the baseline before anything else is estimated,
  so a 1.8x burst run neither widens every benchmark's noise (hiding a regression) nor shifts
  its level (creating one). Its variance `var_e` comes from the median absolute deviation of
  the effects, so a few burst runs do not inflate it.
- `u_rb`, what is left, has the per-benchmark variance `tau_b^2`: estimated from the adjusted
  run medians after dropping runs more than `OUTLIER_SDS` robust standard deviations from their
  median (an isolated burst on one benchmark), then shrunk toward a prior worth
  `prior_weight_runs` runs (a scaled-inverse-chi^2 prior): few runs give a poor variance.
- The current run cannot be adjusted: its own run effect is indistinguishable from a real
  across-the-board regression (a torch upgrade that slows everything), so its variance carries
  `var_e` in full. A burst during the current run is therefore not modelled; re-run it.

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

# 1 / Phi^-1(3/4): turns a median absolute deviation into a normal standard deviation.
MAD_TO_SIGMA = 1.482602218505602
#: Variance of the median of n normal values ~ KAPPA_MEDIAN * sigma^2 / n.
KAPPA_MEDIAN = math.pi / 2.0
#: A baseline run this many robust standard deviations from a benchmark's median is dropped.
OUTLIER_SDS = 5.0
#: Benchmarks a run needs before its run effect is estimated (fewer: the effect stays 0): with
#: fewer, the effect would soak up each benchmark's own noise and understate it.
MIN_BENCHMARKS_FOR_RUN_EFFECT = 8
# A floor for the robust SD so that a series of identical values does not drop every other run.
_SD_FLOOR = 1e-4


def robust_sd(values: Sequence[float]) -> float:
    """MAD * 1.4826 (0.0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    return statistics.median(abs(v - med) for v in values) * MAD_TO_SIGMA


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
    raw: list[float | None] = []
    for row in log_medians:
        devs = [
            v - lvl
            for v, lvl in zip(row, levels, strict=False)
            if v is not None and lvl is not None
        ]
        raw.append(statistics.median(devs) if len(devs) >= MIN_BENCHMARKS_FOR_RUN_EFFECT else None)
    known = [e for e in raw if e is not None]
    if len(known) < 3:
        return RunEffects(tuple(0.0 for _ in raw), 0.0)
    # A lasting suite-wide shift (a merged regression, a new machine image) is a level, not a
    # run effect: centre each run on the median of its segment between suite-wide steps, so
    # that only what is peculiar to one run (or two in a row) is removed.
    bounds = [0, *(s.index for s in detect_steps(known, min_rel_step=0.01)), len(known)]
    centred: list[float] = []
    for lo, hi in itertools.pairwise(bounds):
        segment = known[lo:hi]
        centre = statistics.median(segment)
        centred.extend(e - centre for e in segment)
    it = iter(centred)
    offsets = tuple(0.0 if e is None else next(it) for e in raw)
    return RunEffects(offsets, robust_sd(centred) ** 2)


def within_run_var(logs: Sequence[float]) -> float | None:
    """Robust variance of one run's log rounds: (MAD * 1.4826)^2; None below 3 rounds."""
    if len(logs) < 3:
        return None
    return robust_sd(logs) ** 2


@dataclass(frozen=True)
class NoiseEstimate:
    """The noise of one benchmark's metric on one machine (log scale; module docstring).

    baseline_log: the level (mean of adjusted log run medians, outliers dropped).
    run_var: tau^2, the variance of one adjusted run median, shrunk toward the prior.
    within_var: sigma_w^2, the pooled robust round-to-round variance inside a run.
    between_var: what of tau^2 is not explained by within-run noise of the median.
    run_effect_var: var_e, the suite-wide run effect (the current run carries it).
    runs: baseline runs used; dropped: runs dropped as outliers; df: t degrees of freedom.
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

    @property
    def between_cv(self) -> float:
        """Run-to-run coefficient of variation (the suite-wide part included)."""
        return math.sqrt(self.between_var + self.run_effect_var)

    @property
    def within_cv(self) -> float:
        """Round-to-round coefficient of variation inside a run."""
        return math.sqrt(self.within_var)

    def current_var(self, rounds: float, repeats: int) -> float:
        """Variance of the current level: `repeats` pooled runs of `rounds` rounds each.

        Each pooled run brings its own run effect and between-run noise, so all three parts
        shrink with the number of runs pooled.
        """
        within = KAPPA_MEDIAN * self.within_var / rounds if rounds > 0 else 0.0
        return (self.between_var + self.run_effect_var + within) / repeats

    @property
    def baseline_var(self) -> float:
        """Variance of the baseline level (mean of `runs` adjusted run medians)."""
        return self.run_var / self.runs


@dataclass(frozen=True)
class Prior:
    """The prior on the run-to-run CV and how many runs it is worth (>= 1)."""

    run_cv: float = 0.02
    weight_runs: float = 2.0


def keep_mask(values: Sequence[float]) -> list[bool]:
    """Which values to keep: all below 5 values, else those within OUTLIER_SDS robust SDs."""
    if len(values) < 5:
        return [True] * len(values)
    med = statistics.median(values)
    limit = OUTLIER_SDS * max(robust_sd(values), _SD_FLOOR)
    return [abs(v - med) <= limit for v in values]


def estimate_noise(
    baseline: Sequence[Sequence[float]],
    prior: Prior,
    offsets: Sequence[float] | None = None,
    run_effect_var: float = 0.0,
) -> NoiseEstimate:
    """Fit the model to one series' baseline runs (each a non-empty tuple of positive values).

    `offsets` (log, one per run; zeros when None) are the runs' suite-wide effects, removed
    first. Runs whose adjusted median is an outlier (`keep_mask`) are dropped. Then: the level
    is the mean of the kept adjusted medians; sigma_w^2 is pooled over kept runs with >= 3
    rounds; tau^2 = (nu0 * prior + (k - 1) * sample variance) / (nu0 + k - 1) with
    prior = log1p(run_cv)^2 + kappa * sigma_w^2 / n; sigma_b^2 = max(0, tau^2 -
    kappa * sigma_w^2 / n); df = nu0 + k - 1 for k kept runs.
    """
    if not baseline:
        raise ValueError("estimate_noise needs at least one baseline run")
    offs = list(offsets) if offsets is not None else [0.0] * len(baseline)
    if len(offs) != len(baseline):
        raise ValueError(f"{len(offs)} offsets for {len(baseline)} baseline runs")
    logs = [[math.log(v) - o for v in run] for run, o in zip(baseline, offs, strict=True)]
    medians = [statistics.median(run) for run in logs]
    keep = keep_mask(medians)
    kept_logs = [run for run, k in zip(logs, keep, strict=True) if k]
    kept = [m for m, k in zip(medians, keep, strict=True) if k]
    k = len(kept)
    withins = [w for w in (within_run_var(run) for run in kept_logs) if w is not None]
    within = statistics.fmean(withins) if withins else 0.0
    n_bar = statistics.fmean(len(run) for run in kept_logs)
    nu0 = prior.weight_runs
    prior_tau2 = math.log1p(prior.run_cv) ** 2 + KAPPA_MEDIAN * within / n_bar
    sample_tau2 = statistics.variance(kept) if k >= 2 else 0.0
    tau2 = (nu0 * prior_tau2 + (k - 1) * sample_tau2) / (nu0 + k - 1)
    return NoiseEstimate(
        baseline_log=statistics.fmean(kept),
        run_var=tau2,
        within_var=within,
        between_var=max(0.0, tau2 - KAPPA_MEDIAN * within / n_bar),
        run_effect_var=run_effect_var,
        rounds_per_run=n_bar,
        runs=k,
        dropped=len(medians) - k,
        df=nu0 + k - 1,
    )
