"""Machine or code: what a timing's move is judged against (DESIGN §6, "Machine or code").

A move shared by many benchmarks is the code's unless something that is not the code moved with
it. Per machine, on the log scale, for every timed metric (`metrics.is_timed_metric`):

- **The noise of the current run's own effect** (`run_term`). Without usable probes it is
  var_e, the spread of a whole run's effect on this machine (`noise_model`); with them it is
  what the probes leave unexplained (`probes.HostEvidence.residual_var`). Pooled re-runs carry
  `(run_var + run_term) * (rho + (1 - rho) / n)`: `rho` (`rerun_rho`) is how much the re-runs
  share a state, measured by how little they scatter against the baseline's run-to-run spread.
- **Attributions**. The raw comparison counts the whole move as the code's. With usable probes,
  each kind's move is also credited (`HostMove.credit`, with the probe's variance); without
  them, when the suite's common move (the median of the primary timings' raw log-ratios,
  `shift.estimate_shift`) is named beyond the run-to-run spread, the move relative to it is the
  other attribution (the run effect cancels, its estimation error added). `decision` decides
  each timing for every attribution at once: FAIL only when the move beyond the host's (or the
  common) move clears the threshold, PASS only when the raw interval is below it, improved only
  when the raw move and the move beyond the host's both clear it; otherwise inconclusive, and
  `attributed` when the attributions disagree (machine or code). So the suite moving with a
  steady host is the code's, a host move is never a verdict on the code, and nothing is called
  improved because others got slower.
- **Group moves** (`group_verdicts`): the whole suite, and each primary metric with at least
  `shift.MIN_TIMINGS_FOR_SHIFT` timings, judged like a timing, with the same attributions. A
  decode-wide +10 % that no single benchmark can show beside a 3 % run-to-run noise is caught
  here when the probes held; the group MDE is the suite-wide question's MDE. The move is the
  20 % trimmed mean of the timings' raw log-ratios, its variance
  `TRIMMED_MEAN_VAR * median(v_b) / m` plus the run term. In Holm's family (`judge`) the group
  moves together weigh as much as the timings together: the suite-wide question and the
  per-timing questions each get half of alpha.

Deliberately not here: the threshold rule (`decision`), the probes' arithmetic (`probes`), Holm
and the lean (`judge`, `lean`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from reports.analysis.decision import interval
from reports.analysis.distributions import t_ppf
from reports.analysis.levels import BIWEIGHT_EFFICIENCY, chi2_median_over_df
from reports.analysis.noise_model import Parts
from reports.analysis.probes import HostEvidence
from reports.analysis.series import AnalysisConfig, Verdict
from reports.analysis.shift import MIN_TIMINGS_FOR_SHIFT, SuiteShift, estimate_shift

#: Benchmarks with re-runs needed before their scatter measures how much re-runs share a state.
MIN_SERIES_FOR_RHO = 5
#: The trimmed share at each end of a group move's mean (`trimmed_mean`).
TRIM = 0.2
#: The variance of a 20 % trimmed mean of m normal values over sigma^2 / m (efficiency 87 %).
TRIMMED_MEAN_VAR = 1.144
#: The fullname of the whole suite's group move (`group_verdicts`).
SUITE = "suite (every primary timing)"

Mode = Literal["probes", "common", "none"]


@dataclass(frozen=True)
class Attribution:
    """One machine's machine-or-code evidence (module docstring).

    `common`: the suite's common move; `host`: the probes' evidence (None: no probe records in
    the current run); `mode`: what the attributions used; `run_term`, `run_df`: the current run's
    effect's variance and its degrees of freedom; `rho`: the re-runs' shared state; `groups`:
    the group verdicts, decided with the suite (`judge`).
    """

    machine_id: str
    common: SuiteShift | None
    host: HostEvidence | None
    mode: Mode
    run_term: float
    run_df: float
    rho: float
    groups: tuple[Verdict, ...] = ()
    host_named: bool = False
    banded: bool = False

    @property
    def named(self) -> bool:
        """True when the move the attributions credit is beyond its own noise: the probes'
        (some kind beyond its interval at the gate's level), else the suite's common move."""
        if self.mode == "probes":
            return self.host_named
        return self.mode == "common"

    @property
    def probes_used(self) -> bool:
        """True when the timings were judged for every attribution of the probes' move."""
        return self.mode == "probes" and self.banded

    @property
    def suite(self) -> Verdict | None:
        """The whole suite's group verdict."""
        return next((g for g in self.groups if g.fullname == SUITE), None)

    @property
    def undecided_by_attribution(self) -> bool:
        """True when a group move is undecided because the machine and the code disagree."""
        return any(g.attributed for g in self.groups)


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


def trimmed_mean(values: Sequence[float], trim: float = TRIM) -> float:
    """The mean of `values` without the `trim` share at each end: robust to a few timings that
    moved on their own, 87 % as efficient as the mean where none did (the median: 64 %)."""
    ordered = sorted(values)
    cut = math.floor(trim * len(ordered))
    return statistics.fmean(ordered[cut : len(ordered) - cut])


def _welch_df(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of (variance, df) terms."""
    total = sum(v for v, _ in parts)
    denominator = sum(v * v / df for v, df in parts if v > 0 and df > 0 and math.isfinite(df))
    return total * total / denominator if denominator > 0 else math.inf


@dataclass(frozen=True)
class _Context:
    run_term: float
    run_df: float
    rho: float
    host: HostEvidence | None
    common: SuiteShift | None
    mode: Mode
    host_named: bool = False
    banded: bool = False


def _evidence(
    d: float, rest: float, rest_df: float, factor: float, ctx: _Context
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
    return d, math.sqrt(var), _welch_df([(rest, rest_df), (run, ctx.run_df)]), alternatives


def _rest(v: Verdict, factor: float) -> float:
    parts = v.parts
    assert parts is not None  # only verdicts with parts reach here
    return parts.baseline_var + parts.run_var * factor


def _with_evidence(v: Verdict, ctx: _Context, timed: bool) -> Verdict:
    parts = v.parts
    if parts is None or v.log_ratio is None:
        return v
    factor = parts.pool_factor(ctx.rho)
    if not timed:  # memory peaks: no run effect of the suite, no attribution
        se = math.sqrt(parts.variance(parts.run_effect_var, ctx.rho))
        return replace(v, se=se)
    d = v.log_ratio
    d, se, df, alternatives = _evidence(d, _rest(v, factor), parts.noise_df, factor, ctx)
    return replace(v, log_ratio=d, se=se, df=min(df, v.df or math.inf), alternatives=alternatives)


def _context(
    timed: Sequence[Verdict], host: HostEvidence | None, config: AnalysisConfig
) -> _Context:
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
            [_rest(v, f) for v, f in factors],
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
    moved = banded and host is not None and host.named(z_ci)
    return _Context(run_term, run_df, rho, host, common, mode, moved, banded)


def group_verdicts(timed: Sequence[Verdict], ctx: _Context) -> list[Verdict]:
    """The suite's and each primary metric's group move as provisional verdicts (docstring)."""
    primary = [v for v in timed if v.kind == "timing" and v.parts is not None]
    groups: dict[str, list[Verdict]] = {SUITE: primary}
    for v in primary:
        groups.setdefault(f"suite: every {v.metric}", []).append(v)
    out = []
    for name, members in groups.items():
        if len(members) < MIN_TIMINGS_FOR_SHIFT or (name != SUITE and members == primary):
            continue
        factors = [(v.parts or Parts(0, 0, 0, 1, (0.0,))).pool_factor(ctx.rho) for v in members]
        rests = [_rest(v, f) for v, f in zip(members, factors, strict=True)]
        d = trimmed_mean([v.log_ratio or 0.0 for v in members])
        rest = TRIMMED_MEAN_VAR * statistics.median(rests) / len(members)
        rest_df = statistics.median((v.parts.noise_df if v.parts else 1.0) for v in members)
        factor = statistics.median(factors)
        d, se, df, alternatives = _evidence(d, rest, rest_df * len(members), factor, ctx)
        first = members[0]
        out.append(
            Verdict(
                first.machine_id,
                name,
                first.metric if name != SUITE else "every primary timing",
                "timing",
                "pass",
                first.threshold,
                log_ratio=d,
                se=se,
                df=df,
                alternatives=alternatives,
                baseline_runs=max(v.baseline_runs for v in members),
                note=f"median of {len(members)} timings' moves",
            )
        )
    return out


def attribute(
    verdicts: Sequence[Verdict],
    timed: Sequence[bool],
    host: HostEvidence | None,
    config: AnalysisConfig,
) -> tuple[list[Verdict], Attribution, list[Verdict]]:
    """One machine's provisional verdicts with their evidence set for machine or code, its
    `Attribution` (groups not yet decided) and the provisional group verdicts.

    `timed[i]` says whether verdict i is a timed metric (seconds: the run effect moves it).
    """
    noisy = [v for v, t in zip(verdicts, timed, strict=True) if t and v.parts is not None]
    ctx = _context(noisy, host, config)
    out = [_with_evidence(v, ctx, t) for v, t in zip(verdicts, timed, strict=True)]
    machine = verdicts[0].machine_id if verdicts else ""
    groups = group_verdicts([v for v, t in zip(out, timed, strict=True) if t], ctx)
    found = Attribution(
        machine,
        ctx.common,
        host,
        ctx.mode,
        ctx.run_term,
        ctx.run_df,
        ctx.rho,
        host_named=ctx.host_named,
        banded=ctx.banded,
    )
    return out, found, groups


def mark_attributed(v: Verdict, ci_level: float, attribution: Attribution) -> Verdict:
    """An inconclusive verdict whose attributions disagree about the threshold (one's interval
    below it and another's not, or one's above it and another's not, or the mirror for a
    speed-up) is `attributed`, with the reason, when the move they credit is named."""
    if v.verdict != "inconclusive" or not v.alternatives or v.log_ratio is None or not v.se:
        return v
    if not attribution.named:
        return v
    limit = 1.0 + v.threshold
    ends = [
        interval(d, se, v.df or math.inf, ci_level)
        for d, se in ((v.log_ratio, v.se), *v.alternatives)
    ]
    # a side on which some attribution's interval decides and another's does not: below the
    # threshold (pass), above it (a slowdown), below its mirror (a speed-up)
    sides = (
        [hi < limit for _, hi in ends],
        [lo > limit for lo, _ in ends],
        [hi < 1.0 / limit for _, hi in ends],
    )
    if not any(any(side) and not all(side) for side in sides):
        return v
    note = "; ".join(n for n in (v.note, reason(attribution)) if n)
    return replace(v, attributed=True, note=note)


def reason(attribution: Attribution) -> str:
    """Why a verdict depends on who moved: the probes' ratio, or no probe."""
    if attribution.mode == "probes" and attribution.host is not None:
        return f"machine or code: the host probes moved {attribution.host.text()}"
    common = attribution.common
    moved = f" (the suite moved \u00d7{common.ratio:.2f} together)" if common else ""
    return f"machine or code: no host probe{moved}; an A/B run (nox -s ab) shares the host"


def by_machine(items: Sequence[Verdict]) -> Mapping[str, list[int]]:
    """Indices of `items` per machine, in order."""
    out: dict[str, list[int]] = {}
    for i, v in enumerate(items):
        out.setdefault(v.machine_id, []).append(i)
    return out
