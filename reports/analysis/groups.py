"""Group moves: the whole suite, and each primary metric, judged like one timing (DESIGN §6).

A decode-wide +10 % that no single benchmark can show beside a few % of run-to-run noise is
caught here. Groups: the whole suite (every primary timing), and each primary metric with at
least `shift.MIN_TIMINGS_FOR_SHIFT` timings. The move is the 20 % trimmed mean of the members'
moves (`trimmed_mean`): beyond their own models' prediction when every member has one
(`timing_model`), else their raw log-ratios with the attributions of `evidence`. Its variance is
**measured from the baseline's group-mean residual series** (`group_residual_var`):
members of one metric share what no probe sees, so the independent value
`TRIMMED_MEAN_VAR * median(v_b) / m` is only its floor. In Holm's family (`judge`) the group
moves together weigh as much as the timings together.

Deliberately not here: a timing's own evidence (`evidence`), Holm (`judge`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from reports.analysis.evidence import Context, evidence, judged, rest
from reports.analysis.levels import biweight_var
from reports.analysis.noise_model import Parts
from reports.analysis.series import Verdict
from reports.analysis.shift import MIN_TIMINGS_FOR_SHIFT

#: The trimmed share at each end of a group move's mean (`trimmed_mean`).
TRIM = 0.2
#: The variance of a 20 % trimmed mean of m normal values over sigma^2 / m (efficiency 87 %).
TRIMMED_MEAN_VAR = 1.144
#: The fullname of the whole suite's group move (`group_verdicts`).
SUITE = "suite (every primary timing)"


def group_residual_var(
    residuals: Sequence[Sequence[tuple[int, float]]],
    trim_factor: float,
    member_vars: Sequence[float],
) -> tuple[float, float]:
    """The variance of a group's mean residual per baseline run (runs keyed by index), measured
    from the baseline's own group-mean series (members of one metric share the host's
    unexplained part, so their residuals are not independent), never below the independent
    value `trim_factor * median(member_vars) / m`; and its degrees of freedom (runs - 1)."""
    by_run: dict[int, list[float]] = {}
    for series in residuals:
        for run, r in series:
            by_run.setdefault(run, []).append(r)
    m = len(residuals)
    means = [statistics.fmean(v) for v in by_run.values() if len(v) * 2 >= m]
    independent = trim_factor * statistics.median(member_vars) / max(m, 1) if member_vars else 0.0
    if len(means) < 3:
        return independent, math.inf
    return max(biweight_var(means), independent), float(len(means) - 1)


def trimmed_mean(values: Sequence[float], trim: float = TRIM) -> float:
    """The mean of `values` without the `trim` share at each end: robust to a few timings that
    moved on their own, 87 % as efficient as the mean where none did (the median: 64 %)."""
    ordered = sorted(values)
    cut = math.floor(trim * len(ordered))
    return statistics.fmean(ordered[cut : len(ordered) - cut])


def _model_group(
    members: Sequence[Verdict], ctx: Context
) -> tuple[float, float, float, tuple[tuple[float, float], ...]] | None:
    """A group move from its members' own models (every member needs one): the trimmed mean of
    their moves beyond the probes, its variance measured from the baseline's group-mean
    residual series (members share what no probe sees) plus their loadings' errors."""
    moves = [judged(v, ctx) for v in members]
    fits = [v.parts.fit if v.parts else None for v in members]
    if any(j is None for j in moves) or any(f is None for f in fits):
        return None
    pairs = [(j, f) for j, f in zip(moves, fits, strict=True) if j is not None and f is not None]
    factor = statistics.median(v.parts.pool_factor(ctx.rho) for v in members if v.parts)
    run_var, run_df = group_residual_var(
        [f.residuals for _, f in pairs], TRIMMED_MEAN_VAR, [f.resid_var for _, f in pairs]
    )
    runs = statistics.median(f.runs for _, f in pairs)
    df = min(run_df, statistics.median(f.df for _, f in pairs))
    # Each member's reading as for one timing (`evidence`): beyond its prediction, or, with
    # probe kinds moved beyond their usual spread, their part credited at most (the move) and
    # not at all (the other attribution).
    readings = [
        j.banded(ctx.moved) if ctx.moved else ((j.log_ratio, j.var), (j.log_ratio, j.var))
        for j, _ in pairs
    ]
    # what the members' own runs add is in `run_var`; what is left is their loadings' error
    loading = statistics.fmean(
        most_var - f.resid_var * (factor + 1.0 / f.runs)
        for ((_, most_var), _), (_, f) in zip(readings, pairs, strict=True)
    )
    se = math.sqrt(run_var * (factor + 1.0 / runs) + max(loading, 0.0))
    d = trimmed_mean([most for (most, _), _ in readings])
    alternatives: tuple[tuple[float, float], ...] = ()
    if ctx.moved:
        alternatives = ((trimmed_mean([none for _, (none, _) in readings]), se),)
    return d, se, df, alternatives


def _plain_group(
    members: Sequence[Verdict], raw: Sequence[float], ctx: Context
) -> tuple[float, float, float, tuple[tuple[float, float], ...]]:
    """A group move without member models: the trimmed mean of the raw moves, the members'
    own variance from the baseline's group-mean residual series (never below the independent
    members' value), then the run term and the attributions as for one timing (`evidence`)."""
    factors = [(v.parts or Parts(0, 0, 0, 1, (0.0,))).pool_factor(ctx.rho) for v in members]
    rests = [rest(v, f) for v, f in zip(members, factors, strict=True)]
    factor = statistics.median(factors)
    runs = statistics.median(max(1, v.baseline_runs) for v in members)
    shared, _ = group_residual_var(
        [v.parts.residuals if v.parts else () for v in members],
        TRIMMED_MEAN_VAR,
        [r / (factor + 1.0 / runs) for r in rests],
    )
    own = shared * (factor + 1.0 / runs)
    own_df = statistics.median((v.parts.noise_df if v.parts else 1.0) for v in members)
    return evidence(trimmed_mean(raw), own, own_df * len(members), factor, ctx)


def group_verdicts(
    timed: Sequence[Verdict], ctx: Context, raw: Sequence[float] | None = None
) -> list[Verdict]:
    """The suite's and each primary metric's group move as provisional verdicts (docstring).

    `raw[i]`: timing i's raw log-ratio before any attribution (default: its `log_ratio`)."""
    moves = list(raw) if raw is not None else [v.log_ratio or 0.0 for v in timed]
    primary = [(v, m) for v, m in zip(timed, moves, strict=True) if v.kind == "timing" and v.parts]
    groups: dict[str, list[tuple[Verdict, float]]] = {SUITE: primary}
    for v, m in primary:
        groups.setdefault(f"suite: every {v.metric}", []).append((v, m))
    out = []
    for name, pairs in groups.items():
        if len(pairs) < MIN_TIMINGS_FOR_SHIFT or (name != SUITE and pairs == primary):
            continue
        members = [v for v, _ in pairs]
        found = _model_group(members, ctx)
        model = found is not None
        if found is None:
            found = _plain_group(members, [m for _, m in pairs], ctx)
        d, se, df, alternatives = found
        first = members[0]
        what = "moves beyond the probes" if model else "moves"
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
                note=f"trimmed mean of {len(members)} timings' {what}",
            )
        )
    return out
