"""A timing's evidence for machine or code (DESIGN §6): the run term, the attributions, and
each timing's own model on the host probes.

`make_context` gathers, per machine, what every timing is judged under: the current run's own
effect (`run_term`: var_e, or what the best probe leaves unexplained), how much pooled re-runs
share a state (`rerun_rho`), the suite's common move (`shift.estimate_shift`) and the probes'
evidence, with the kinds that moved beyond their usual spread (`Context.moved`).
`with_evidence` sets one timing's (log-ratio, se, df, alternatives):

- with the probes as evidence and the timing's own fit (`timing_model`): its move beyond what
  its loadings predict at the probe levels of its own window; a kind that moved beyond its
  usual spread keeps, as the other attribution, the move with that kind's part given back to
  the code (a model fitted inside the baseline's range is not trusted beyond it);
- otherwise as before issue 51 (`evidence`): the best probe's predicted run effect taken out,
  or each kind's move credited up to its gain's upper end when the host moved (banded); the
  suite's common move as the other attribution without probes.

Deliberately not here: group moves (`groups`), the machine's `Attribution` (`attribution`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from reports.analysis.distributions import t_ppf
from reports.analysis.levels import BIWEIGHT_EFFICIENCY, chi2_median_over_df
from reports.analysis.noise_model import Parts
from reports.analysis.probes import HostEvidence
from reports.analysis.series import AnalysisConfig, Verdict
from reports.analysis.shift import SuiteShift, estimate_shift
from reports.analysis.timing_model import Judged

#: Benchmarks with re-runs needed before their scatter measures how much re-runs share a state.
MIN_SERIES_FOR_RHO = 5

Mode = Literal["probes", "common", "none"]


def rerun_rho(parts: Sequence[Parts]) -> float:
    """How much pooled re-runs share a state, in [0, 1] (0 without re-runs).

    Per timing with two or more current runs, the sample variance of their log locations over
    what one independent run varies by (`run_var + run_effect_var`); the median over timings,
    corrected by chi^2's median (`levels.chi2_median_over_df`), is `1 - rho`. Needs
    `MIN_SERIES_FOR_RHO` timings; re-runs that scatter like independent runs give 0.
    """
    ratios = [
        statistics.variance(p.current_logs) / total
        for p in parts
        if p.repeats >= 2 and (total := p.run_var + p.run_effect_var) > 0
    ]
    if len(ratios) < MIN_SERIES_FOR_RHO:
        return 0.0
    repeats = statistics.median(p.repeats for p in parts if p.repeats >= 2)
    scatter = statistics.median(ratios) / chi2_median_over_df(repeats - 1)
    return min(max(1.0 - scatter, 0.0), 1.0)


def welch_df(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of (variance, df) terms."""
    total = sum(v for v, _ in parts)
    denominator = sum(v * v / df for v, df in parts if v > 0 and df > 0 and math.isfinite(df))
    return total * total / denominator if denominator > 0 else math.inf


@dataclass(frozen=True)
class Context:
    """What one machine's timings are judged under (`make_context`, module docstring)."""

    run_term: float
    run_df: float
    rho: float
    host: HostEvidence | None
    common: SuiteShift | None
    mode: Mode
    host_named: bool = False
    banded: bool = False
    #: the probe kinds that moved beyond their usual spread (at alpha): a timing's own model
    #: credits their part only within a band (`timing_model.Judged.banded`)
    moved: tuple[str, ...] = ()


def evidence(
    d: float, rest: float, rest_df: float, factor: float, ctx: Context
) -> tuple[float, float, float, tuple[tuple[float, float], ...]]:
    """(log-ratio, se, df, alternatives) of a raw log-ratio `d` whose variance without the run
    effect is `rest` (`rest_df` df), the pooled runs' factor `factor`."""
    run = ctx.run_term * factor
    var = rest + run
    alternatives: tuple[tuple[float, float], ...] = ()
    if ctx.mode == "probes" and ctx.host is not None and ctx.banded:
        alternatives = tuple(
            (d - m.credit, math.sqrt(rest + m.residual_var * factor + m.gain_high**2 * m.var))
            for m in ctx.host.moves
        )
    elif ctx.mode == "probes" and ctx.host is not None:
        # the host within its usual spread: the run effect it predicts is taken out
        shift, shift_var = ctx.host.best.adjustment
        d, var = d - shift, var + shift_var
    elif ctx.mode == "common" and ctx.common is not None:
        alternatives = ((d - ctx.common.log_shift, math.sqrt(rest + ctx.common.estimate_var)),)
    return d, math.sqrt(var), welch_df([(rest, rest_df), (run, ctx.run_df)]), alternatives


def rest(v: Verdict, factor: float) -> float:
    parts = v.parts
    assert parts is not None  # only verdicts with parts reach here
    return parts.baseline_var + parts.run_var * factor


def judged(v: Verdict, ctx: Context) -> Judged | None:
    """The timing's move under its own model on the probes (`timing_model`), None when the
    probes are not the evidence here or the benchmark has no fit."""
    parts = v.parts
    if ctx.mode != "probes" or parts is None or parts.fit is None:
        return None
    return parts.fit.judge(parts.current_logs, parts.current_levels, parts.pool_factor(ctx.rho))


def with_evidence(v: Verdict, ctx: Context, timed: bool) -> Verdict:
    parts = v.parts
    if parts is None or v.log_ratio is None:
        return v
    factor = parts.pool_factor(ctx.rho)
    if not timed:  # memory peaks: no run effect of the suite, no attribution
        se = math.sqrt(parts.variance(parts.run_effect_var, ctx.rho))
        return replace(v, se=se)
    move = judged(v, ctx)
    if move is not None:
        # Its own loadings on every probe kind, at the probes' levels of its own window: the
        # host's predicted move is taken out. A kind that moved beyond its usual spread is
        # credited between nothing and its loading's upper end (machine or code): a model
        # fitted within the baseline's range is not trusted to extrapolate beyond it.
        said = (
            f"raw \u00d7{math.exp(move.raw):.3f}, the host probes predicted "
            f"\u00d7{math.exp(move.predicted):.3f} for it (its own loadings"
            + (
                f"; {parts.fit.dropped} burst run(s) left out of the fit"
                if parts.fit and parts.fit.dropped
                else ""
            )
            + ")"
        )
        note = "; ".join(n for n in (v.note, said) if n)
        if ctx.moved:
            (most, most_var), (none, none_var) = move.banded(ctx.moved)
            return replace(
                v,
                log_ratio=most,
                se=math.sqrt(most_var),
                df=move.df,
                alternatives=((none, math.sqrt(none_var)),),
                note=note,
            )
        return replace(v, log_ratio=move.log_ratio, se=math.sqrt(move.var), df=move.df, note=note)
    d = v.log_ratio
    d, se, df, alternatives = evidence(d, rest(v, factor), parts.noise_df, factor, ctx)
    return replace(v, log_ratio=d, se=se, df=min(df, v.df or math.inf), alternatives=alternatives)


def make_context(
    timed: Sequence[Verdict], host: HostEvidence | None, config: AnalysisConfig
) -> Context:
    parts = [v.parts for v in timed if v.parts is not None]
    rho = rerun_rho(parts)
    var_e = max((p.run_effect_var for p in parts), default=0.0)
    runs = max((v.baseline_runs for v in timed), default=0)
    run_df = max(1.0, BIWEIGHT_EFFICIENCY * runs)
    usable = host is not None and host.usable
    if usable and host is not None:
        # the raw attribution keeps what the best-explaining probe leaves unexplained
        run_term, run_df = host.best.residual_var, host.best.residual_df
    else:
        run_term = var_e
    primary = [v for v in timed if v.kind == "timing" and v.parts is not None]
    common = None
    if primary:
        factors = [(v, (v.parts or parts[0]).pool_factor(rho)) for v in primary]
        common = estimate_shift(
            [v.log_ratio or 0.0 for v in primary],
            [rest(v, f) for v, f in factors],
            var_e * statistics.median(f for _, f in factors),
            df=max(1.0, BIWEIGHT_EFFICIENCY * runs),
            alpha=config.alpha,
            ci_level=config.ci_level,
        )
    mode: Mode = "probes" if usable else ("common" if common and common.named else "none")
    z = t_ppf(1.0 - config.alpha / 2.0, math.inf)
    banded = usable and host is not None and host.banded(z)
    # the host moved beyond its usual spread at the interval's level (said; a verdict split by
    # the probes' move is marked)
    z_ci = t_ppf(0.5 + config.ci_level / 2.0, math.inf)
    named = banded and host is not None and host.named(z_ci)
    beyond = host.beyond(z) if usable and host is not None else ()
    return Context(run_term, run_df, rho, host, common, mode, named, banded, beyond)
