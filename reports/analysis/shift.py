"""What the whole suite did: the common move of every timing.

Pure functions on plain numbers; `tests/reports/analysis/test_shift.py` checks them on
synthetic suites over many seeds.

- **The common shift** (`estimate_shift`). The current run's timings share its run effect
  (the host's memory bandwidth on a shared VM, a thermal state, the whole stack) just as every
  baseline run's do (`noise_model.estimate_run_effects`). Its estimate is the median over the
  suite's primary timings of the worse-oriented log-ratios; its standard error is
  `sqrt(var_e + pi / 2 * median(v_b) / m)`: the baseline's run-effect variance `var_e` (how far
  a run's effect strays on this machine) plus the median's own error from the m per-benchmark
  variances `v_b` (the run effect taken out). `var_e` is a robust variance of the baseline runs'
  effects, worth `levels.BIWEIGHT_EFFICIENCY * runs` degrees of freedom, so the reference is
  Student's t on those. A shift is **named** when the two-sided test of "no shift beyond the
  run-effect spread" rejects at `alpha`: a whole-suite move this large is the host or a change
  that moves every benchmark (a torch bump, a regressed GEMM, a wrong thread count).

Named or not, it is never subtracted from a timing (issue 41): without host probes a named
common move makes the timings that moved with it "machine or code" (`attribution`), and the
lean is `reports.analysis.lean`.

Deliberately not here: verdicts (`reports.analysis.series`, `reports.analysis.judge`), the
threshold rule (`reports.analysis.decision`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from reports.analysis.distributions import t_ppf, t_sf_two_sided

#: Timings a suite needs before its common shift is estimated (as for a run effect).
MIN_TIMINGS_FOR_SHIFT = 8


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
    without the run effect, `df` the degrees of freedom of `run_effect_var` (`BIWEIGHT_EFFICIENCY`
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
