"""The timing model: what explains a timing's runs, and what is left (DESIGN §6, issue 51).

One timing series on one machine, on the log scale, baseline run r:

    y_r = mu + sum_k loading_k * (x_rk - centre_k) + e_r

- `y_r`: the run's location (`levels.location_at`), the summary the verdicts use;
- `x_rk`: host probe kind k's level **in the benchmark's own window** (`timeline.Timeline.at`:
  interpolated between the points around `session_window_s`; the run's median point for a
  record without a window), each with its measurement variance; `centre_k` their mean over
  the baseline window the verdict uses (probe levels centred per segment, like the run
  effects);
- `loading_k`: how far this benchmark follows probe k, fitted **per benchmark** over the
  baseline and shrunk toward its metric group's loadings (`group_loadings`: decode steps
  follow the memory probe, prefill the compute probe, each as far as it does);
- `e_r`: the residual, the benchmark's own run-to-run noise and what no probe sees.

How it is fitted, and why:
- **Directions, not kinds** (`Basis`). Probes that follow one factor are collinear, and their
  difference is their noise: a loading on it would add noise, not explain the host. The group's
  pooled probe spread is taken apart in the probes' own noise metric, and only directions whose
  spread is at least `MIN_RELIABILITY` signal get a loading.
- **Errors in variables.** A probe level is measured, not known: along each direction its
  summed measurement variance is taken out of the spread before dividing (at most
  `MAX_EIV_SHARE` of it), so loadings are not biased low and a host move beyond the
  baseline's is credited in full.
- **Shrinkage where runs are few, measured where members are many.** A member's loading along a
  direction is `(S_zy + w * group) / (S_zz + w)`: `w` is its residual variance over the spread
  of true loadings among the group's members (method of moments: their own fits' robust spread
  less their typical error; at least `MIN_SPREAD_SHARE` of the group's loading), so identical
  members borrow the group's precision; without `MIN_MEMBERS` members the group is worth
  `PRIOR_RUNS` runs.
- **Residual variance** robust (biweight midvariance, scaled to the degrees of freedom left
  after the fit), shrunk toward the group's median, worth `PRIOR_RUNS` runs.

The current run (the mean of its pooled re-runs) is judged by `Fit.judge`: its move beyond what
the probes predict, `d = y_now - mu - loading . (x_now - centre)`, with the variance of a new
observation: the residual (times the pooled runs' factor), the level's (`resid / n`), the
loadings' error at the current levels (`dx' Cov dx`, the delta method), and the current
levels' error beyond the baseline's usual one (which the residuals already hold). Degrees of
freedom: the runs less the effective parameters, plus the prior's.

A fit needs `MIN_RUNS` baseline runs with levels of every kind and a direction with signal;
otherwise `fit` returns None and the verdict is judged as without this model (`attribution`).

Deliberately not here: how the host's move is named and attributed (`attribution`), the
threshold rule (`decision`), reading probe records (`probes`, `metrics`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from reports.analysis.levels import biweight_var
from reports.analysis.smallmatrix import quad, symmetric_eigen

#: Baseline runs with probe levels a per-benchmark fit needs.
MIN_RUNS = 6
#: A direction of the probe levels gets a loading when at least this share of its spread is
#: signal, not the probes' own noise.
MIN_RELIABILITY = 0.75
#: The errors-in-variables correction takes at most this share of a direction's spread.
MAX_EIV_SHARE = 0.8
#: What the group is worth without a measured spread of its members' loadings, in runs; and
#: what the group's residual variance is worth.
PRIOR_RUNS = 3.0
#: Members a group needs before the spread of their true loadings is measured.
MIN_MEMBERS = 3
#: The least spread of true loadings credited to a group, as a share of its loading: a prior
#: certain of the group's loading would hide a member that follows the host differently.
MIN_SPREAD_SHARE = 0.05
#: A baseline run further than this many robust SDs from the first fit is refitted without.
OUTLIER_SDS = 5.0

Levels = Mapping[str, tuple[float, float]]
"""Probe kind -> (log level, its measurement variance) in one run's window of one benchmark."""


@dataclass(frozen=True)
class Basis:
    """The probe kinds and the directions that carry signal (`u` rows: z = u . x)."""

    kinds: tuple[str, ...]
    directions: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class GroupPrior:
    """A metric group's basis, loadings along it (`loadings`), their error (`error`), the spread
    of its members' true loadings (`spread`, None: too few members) and its residual variance."""

    basis: Basis
    loadings: tuple[float, ...]
    error: tuple[float, ...]
    spread: tuple[float, ...] | None
    resid_var: float


@dataclass(frozen=True)
class Judged:
    """The current run against a fit: its move beyond the probes' prediction (log), that
    move's variance and degrees of freedom, the prediction itself, and the raw move; with what
    `banded` needs: the kinds, their moves `dx`, the loadings' covariance and the variance
    without the loadings' error (`base_var`)."""

    log_ratio: float
    var: float
    df: float
    predicted: float
    raw: float
    kinds: tuple[str, ...] = ()
    loadings: tuple[float, ...] = ()
    dx: tuple[float, ...] = ()
    cov: tuple[tuple[float, ...], ...] = ()
    base_var: float = 0.0

    def banded(self, moved: Sequence[str]) -> tuple[tuple[float, float], tuple[float, float]]:
        """Two readings of the move when the probe kinds `moved` lie beyond their usual spread,
        where a model fitted inside the baseline's range is not trusted to extrapolate: their
        part credited at its upper end (`loading + 2 SE`, at most each moved probe's own move
        or the fitted share of it where that is more) and not credited at all, each with the
        variance of the kinds that did not move (the credit's uncertainty is the band)."""
        inside = [0.0 if k in moved else x for k, x in zip(self.kinds, self.dx, strict=True)]
        var = self.base_var + quad(inside, self.cov)
        part = sum(
            b * x for k, b, x in zip(self.kinds, self.loadings, self.dx, strict=True) if k in moved
        )
        sd = math.sqrt(quad([x - i for x, i in zip(self.dx, inside, strict=True)], self.cov))
        # at most each moved probe's own move, or the fitted share of it where that is more:
        # a loading's error at a move many spreads out must not credit the code's move away
        cap = sum(
            abs(x) * max(1.0, abs(b))
            for k, b, x in zip(self.kinds, self.loadings, self.dx, strict=True)
            if k in moved
        )
        most = math.copysign(min(abs(part) + 2.0 * sd, cap), part)
        return (self.log_ratio + part - most, var), (self.log_ratio + part, var)


@dataclass(frozen=True)
class Fit:
    """One benchmark's fitted model (module docstring); `residuals` keyed by run index."""

    kinds: tuple[str, ...]
    centre: tuple[float, ...]
    level_var: tuple[float, ...]
    mu: float
    loadings: tuple[float, ...]
    cov: tuple[tuple[float, ...], ...]
    resid_var: float
    df: float
    runs: int
    residuals: tuple[tuple[int, float], ...]
    dropped: int = 0

    def judge(self, ys: Sequence[float], levels: Sequence[Levels], factor: float) -> Judged | None:
        """The current runs (`ys` their log locations, `levels` their probe levels, pooled
        with the run-variance factor `factor`) against the fit; None when a level is missing."""
        if not ys or not levels or any(k not in lv for lv in levels for k in self.kinds):
            return None
        now = [statistics.fmean(lv[k][0] for lv in levels) for k in self.kinds]
        dx = [x - c for x, c in zip(now, self.centre, strict=True)]
        predicted = sum(b * x for b, x in zip(self.loadings, dx, strict=True))
        now_var = [statistics.fmean(lv[k][1] for lv in levels) / len(levels) for k in self.kinds]
        extra = sum(
            b * b * max(0.0, v - usual)
            for b, v, usual in zip(self.loadings, now_var, self.level_var, strict=True)
        )
        raw = statistics.fmean(ys) - self.mu
        base = self.resid_var * (factor + 1.0 / self.runs) + extra
        return Judged(
            raw - predicted,
            base + quad(dx, self.cov),
            self.df,
            predicted,
            raw,
            self.kinds,
            self.loadings,
            tuple(dx),
            self.cov,
            base,
        )


@dataclass(frozen=True)
class _Data:
    """One benchmark's baseline runs with every kind: centred locations and levels."""

    rows: tuple[int, ...]
    y: tuple[float, ...]
    x: tuple[tuple[float, ...], ...]
    noise: tuple[tuple[float, ...], ...]
    mu: float
    centre: tuple[float, ...]


def _data(ys: Sequence[float], xs: Sequence[Levels], kinds: Sequence[str]) -> _Data | None:
    rows = tuple(i for i, lv in enumerate(xs) if all(k in lv for k in kinds))
    if len(rows) < MIN_RUNS:
        return None
    mu = statistics.fmean(ys[i] for i in rows)
    centre = tuple(statistics.fmean(xs[i][k][0] for i in rows) for k in kinds)
    return _Data(
        rows,
        tuple(ys[i] - mu for i in rows),
        tuple(tuple(xs[i][k][0] - c for k, c in zip(kinds, centre, strict=True)) for i in rows),
        tuple(tuple(xs[i][k][1] for k in kinds) for i in rows),
        mu,
        centre,
    )


def usable_kinds(xs: Sequence[Levels]) -> tuple[str, ...]:
    """The kinds present in at least `MIN_RUNS` runs."""
    kinds = sorted({k for lv in xs for k in lv})
    return tuple(k for k in kinds if sum(k in lv for lv in xs) >= MIN_RUNS)


def basis(kinds: Sequence[str], members: Sequence[_Data]) -> Basis | None:
    """The directions with signal in the members' pooled probe spread (module docstring)."""
    p = len(kinds)
    sxx = [[sum(r[i] * r[j] for d in members for r in d.x) for j in range(p)] for i in range(p)]
    noise = [sum(v[i] for d in members for v in d.noise) for i in range(p)]
    if any(v <= 0 for v in noise) or any(sxx[i][i] <= 0 for i in range(p)):
        return None
    scale = [math.sqrt(v) for v in noise]
    values, vectors = symmetric_eigen(
        [[sxx[i][j] / (scale[i] * scale[j]) for j in range(p)] for i in range(p)]
    )
    # each eigenvalue is its direction's signal-plus-noise over noise
    kept = [
        tuple(vectors[i][k] / scale[i] for i in range(p))
        for k, lam in sorted(enumerate(values), key=lambda kv: -kv[1])
        if lam >= 1.0 / (1.0 - MIN_RELIABILITY)
    ]
    return Basis(tuple(kinds), tuple(kept)) if kept else None


@dataclass(frozen=True)
class _Direction:
    """One member's sums along one direction: S_zz corrected for the levels' noise, S_zy."""

    szz: float
    szy: float
    z: tuple[float, ...]


def _along(data: _Data, u: Sequence[float]) -> _Direction:
    z = tuple(sum(a * b for a, b in zip(u, row, strict=True)) for row in data.x)
    raw = sum(v * v for v in z)
    noise = sum(sum(a * a * v for a, v in zip(u, nv, strict=True)) for nv in data.noise)
    szz = max(raw - noise, (1.0 - MAX_EIV_SHARE) * raw)
    return _Direction(szz, sum(a * b for a, b in zip(z, data.y, strict=True)), z)


@dataclass(frozen=True)
class _Solved:
    """One member's loadings along each direction and their variances, its residuals, their
    variance and its degrees of freedom."""

    loadings: list[float]
    errors: list[float]
    residuals: list[float]
    resid_var: float
    df: float


def _solve_member(data: _Data, base: Basis, prior: GroupPrior | None) -> _Solved:
    """One member's fit along `base`'s directions, shrunk toward `prior` when given."""
    n = len(data.y)
    along = [_along(data, u) for u in base.directions]
    first = [d.szy / d.szz for d in along]  # own least squares, for the residual scale
    resid0 = [
        v - sum(b * d.z[r] for b, d in zip(first, along, strict=True)) for r, v in enumerate(data.y)
    ]
    s2 = biweight_var(resid0) * (n - 1) / max(1.0, n - 1 - len(along))
    weights = [0.0] * len(along)
    if prior is not None:
        for k, d in enumerate(along):
            if prior.spread is not None:
                floor = (MIN_SPREAD_SHARE * prior.loadings[k]) ** 2
                weights[k] = s2 / max(prior.spread[k], floor, 1e-12)
            else:
                weights[k] = PRIOR_RUNS * d.szz / n
    target = prior.loadings if prior is not None else (0.0,) * len(along)
    loadings = [
        (d.szy + w * t) / (d.szz + w) for d, w, t in zip(along, weights, target, strict=True)
    ]
    residuals = [
        v - sum(b * d.z[r] for b, d in zip(loadings, along, strict=True))
        for r, v in enumerate(data.y)
    ]
    effective = sum(d.szz / (d.szz + w) for d, w in zip(along, weights, strict=True))
    df = max(1.0, n - 1.0 - effective)
    resid_var = biweight_var(residuals) * (n - 1) / df
    if prior is not None:
        resid_var = (PRIOR_RUNS * prior.resid_var + df * resid_var) / (PRIOR_RUNS + df)
        df += PRIOR_RUNS
    errors = []
    for k, (d, w) in enumerate(zip(along, weights, strict=True)):
        share = w / (d.szz + w)
        group = prior.error[k] if prior is not None else 0.0
        errors.append(resid_var / (d.szz + w) + share * share * group)
    return _Solved(loadings, errors, residuals, resid_var, df)


def fit(ys: Sequence[float], xs: Sequence[Levels], prior: GroupPrior | None = None) -> Fit | None:
    """Fit one benchmark's model to its baseline runs (`ys[r]` log locations, `xs[r]` their
    probe levels) in `prior`'s basis, shrunk toward it (module docstring); without a prior, in
    its own basis; None when it cannot be fitted."""
    if len(ys) != len(xs):
        raise ValueError(f"{len(ys)} run locations for {len(xs)} runs' probe levels")
    kinds = prior.basis.kinds if prior is not None else usable_kinds(xs)
    data = _data(ys, xs, kinds) if kinds else None
    if data is None:
        return None
    base = prior.basis if prior is not None else basis(kinds, [data])
    if base is None or len(data.y) - 1 - len(base.directions) < 1:
        return None
    found = _fit(data, base, prior)
    # One refit without the runs the first fit cannot explain at all (a lone burst run).
    sd = math.sqrt(max(found.resid_var, 1e-12))
    keep = [i for i, (_, r) in enumerate(found.residuals) if abs(r) <= OUTLIER_SDS * sd]
    if MIN_RUNS <= len(keep) < len(data.rows):
        kept = _data([ys[data.rows[i]] for i in keep], [xs[data.rows[i]] for i in keep], kinds)
        if kept is not None:
            again = _fit(replace(kept, rows=tuple(data.rows[i] for i in keep)), base, prior)
            return replace(again, dropped=len(data.rows) - len(keep))
    return found


def _fit(data: _Data, base: Basis, prior: GroupPrior | None) -> Fit:
    solved = _solve_member(data, base, prior)
    loadings_z, errors = solved.loadings, solved.errors
    p = len(base.kinds)
    loadings = [
        sum(b * u[i] for b, u in zip(loadings_z, base.directions, strict=True)) for i in range(p)
    ]
    cov = tuple(
        tuple(
            sum(e * u[i] * u[j] for e, u in zip(errors, base.directions, strict=True))
            for j in range(p)
        )
        for i in range(p)
    )
    return Fit(
        kinds=base.kinds,
        centre=data.centre,
        level_var=tuple(statistics.median(v[i] for v in data.noise) for i in range(p)),
        mu=data.mu,
        loadings=tuple(loadings),
        cov=cov,
        resid_var=solved.resid_var,
        df=solved.df,
        runs=len(data.y),
        residuals=tuple(zip(data.rows, solved.residuals, strict=True)),
    )


def group_loadings(
    members: Sequence[tuple[Sequence[float], Sequence[Levels]]],
) -> GroupPrior | None:
    """A metric group's prior (module docstring): the basis of its pooled probe spread, its
    pooled loadings along it with their error, the spread of its members' own loadings about
    them (with `MIN_MEMBERS` or more) and the median of their residual variances."""
    kinds = (
        sorted(set.intersection(*(set(usable_kinds(xs)) for _, xs in members))) if members else []
    )
    datas = [d for ys, xs in members if (d := _data(ys, xs, kinds)) is not None]
    base = basis(kinds, datas) if datas else None
    if base is None:
        return None
    datas = [d for d in datas if len(d.y) - 1 - len(base.directions) >= 1]  # as `fit` needs
    if not datas:
        return None
    own = [_solve_member(d, base, None) for d in datas]
    resid_var = statistics.median(o.resid_var for o in own)
    along = [[_along(d, u) for u in base.directions] for d in datas]
    loadings, error = [], []
    for k in range(len(base.directions)):
        szz = sum(a[k].szz for a in along)
        loadings.append(sum(a[k].szy for a in along) / szz)
        error.append(resid_var / szz)
    spread = None
    if len(own) >= MIN_MEMBERS:
        spread = tuple(
            max(
                0.0,
                biweight_var([o.loadings[k] for o in own])
                - statistics.median(o.errors[k] for o in own),
            )
            for k in range(len(base.directions))
        )
    return GroupPrior(base, tuple(loadings), tuple(error), spread, resid_var)
