"""The timing model (reports.analysis.timing_model) on synthetic runs with known answers, over
many seeds: loadings recovered per benchmark, no errors-in-variables bias, collinear probes,
shrinkage toward the group, a new run's interval that covers at its level, and a group's
residual variance measured from its members' shared part."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from reports.analysis.groups import group_residual_var
from reports.analysis.timing_model import (
    MIN_RUNS,
    fit,
    group_loadings,
)

KINDS = ("compute", "memory")


def _runs(
    rng: random.Random,
    loadings: tuple[float, float],
    runs: int = 20,
    *,
    host_sd: tuple[float, float] = (0.03, 0.08),
    probe_sd: float = 0.005,
    own_sd: float = 0.01,
    shared: list[tuple[float, float]] | None = None,
) -> tuple[list[float], list[dict[str, tuple[float, float]]], list[tuple[float, float]]]:
    """`runs` runs of one benchmark: the host's two factors (given in `shared`, else drawn),
    the benchmark following them by `loadings`, probes reading them within `probe_sd`."""
    hosts = (
        shared
        if shared is not None
        else [(rng.gauss(0, host_sd[0]), rng.gauss(0, host_sd[1])) for _ in range(runs)]
    )
    ys, xs = [], []
    for c, m in hosts:
        ys.append(1.0 + loadings[0] * c + loadings[1] * m + rng.gauss(0, own_sd))
        xs.append(
            {
                "compute": (c + rng.gauss(0, probe_sd), probe_sd**2),
                "memory": (m + rng.gauss(0, probe_sd), probe_sd**2),
            }
        )
    return ys, xs, hosts


def test_each_benchmark_s_loadings_are_recovered_without_errors_in_variables_bias():
    """Probe noise of a third of the host's spread: plain least squares reads 0.9 of the true
    loading; the corrected fit reads it within 3 % on average over 200 seeds."""
    fitted = []
    for seed in range(200):
        rng = random.Random(f"eiv-{seed}")
        ys, xs, _ = _runs(rng, (0.1, 0.9), 30, host_sd=(0.02, 0.02), probe_sd=0.0067)
        model = fit(ys, xs)
        assert model is not None
        fitted.append(dict(zip(model.kinds, model.loadings, strict=True)))
    memory = statistics.fmean(f["memory"] for f in fitted)
    compute = statistics.fmean(f["compute"] for f in fitted)
    assert memory == pytest.approx(0.9, rel=0.03)
    assert compute == pytest.approx(0.1, abs=0.03)


def test_a_new_run_s_interval_covers_at_its_level_inside_and_beyond_the_baseline_range():
    """The move beyond the prediction, over its standard error, is a t variable: the 95 %
    interval covers the truth (no change) in 93-97 % of 600 seeds, for a current host inside
    the baseline's spread and for one 2.5 spreads out (the loadings' error counts there)."""
    for shift in (0.0, 0.2):
        covered = 0
        for seed in range(600):
            rng = random.Random(f"cover-{shift}-{seed}")
            ys, xs, _ = _runs(rng, (0.2, 0.9), 20)
            now_y, now_x, _ = _runs(rng, (0.2, 0.9), 1, shared=[(0.0, shift)])
            model = fit(ys, xs)
            assert model is not None
            judged = model.judge(now_y, now_x, 1.0)
            assert judged is not None
            half = 2.09 * math.sqrt(judged.var)  # t(19), 97.5 %
            covered += abs(judged.log_ratio) <= half
        assert 0.93 <= covered / 600 <= 0.97, (shift, covered)


def test_collinear_probes_keep_one_direction_and_credit_a_large_host_move():
    """Both probes follow one factor (the issue-41 host): their difference is noise and gets no
    loading; a host move ten spreads out is still predicted within a few percent of itself."""
    errors, off = [], []
    for seed in range(100):
        rng = random.Random(f"collinear-{seed}")
        hosts = [(0.5 * h, h) for h in (rng.gauss(0, 0.01) for _ in range(20))]
        ys, xs, _ = _runs(rng, (0.0, 1.0), 20, probe_sd=0.002, own_sd=0.01, shared=hosts)
        model = fit(ys, xs)
        assert model is not None
        loading = dict(zip(model.kinds, model.loadings, strict=True))
        off.append(loading["compute"] - 0.5 * loading["memory"])  # along the noise: none
        now_y, now_x, _ = _runs(
            rng, (0.0, 1.0), 1, probe_sd=0.002, own_sd=0.0, shared=[(0.05, 0.1)]
        )
        judged = model.judge(now_y, now_x, 1.0)
        assert judged is not None
        errors.append(judged.predicted - 0.1)
    assert abs(statistics.fmean(errors)) < 0.01
    assert statistics.pstdev(errors) < 0.04
    # no loading along the noise (kept, it scatters by 2.6 here); what is left is the error of
    # the factor's direction, estimated from 20 runs
    assert statistics.pstdev(off) < 0.1


def test_a_benchmark_with_few_runs_borrows_its_group_s_loadings():
    """Twelve members that follow memory alike: a member's own fit from its 8 runs scatters
    around the truth, the shrunk fit much less (its group's precision, measured to be shared)."""
    own_err, shrunk_err = [], []
    for seed in range(40):
        rng = random.Random(f"shrink-{seed}")
        hosts = [(rng.gauss(0, 0.03), rng.gauss(0, 0.08)) for _ in range(8)]
        members = [_runs(rng, (0.05, 0.9), 8, own_sd=0.02, shared=hosts)[:2] for _ in range(12)]
        prior = group_loadings(members)
        assert prior is not None
        ys, xs = members[0]
        alone = fit(ys, xs)
        shrunk = fit(ys, xs, prior)
        assert alone is not None
        assert shrunk is not None
        own_err.append(dict(zip(alone.kinds, alone.loadings, strict=True))["memory"] - 0.9)
        shrunk_err.append(dict(zip(shrunk.kinds, shrunk.loadings, strict=True))["memory"] - 0.9)
    assert statistics.pstdev(shrunk_err) < 0.6 * statistics.pstdev(own_err)


def test_members_that_follow_the_host_differently_keep_their_own_loadings():
    """Half the group follows memory at 0.5, half at 1.0: the measured spread of true loadings
    keeps each near its own, not the group's 0.75."""
    gaps = []
    for seed in range(30):
        rng = random.Random(f"differ-{seed}")
        hosts = [(rng.gauss(0, 0.03), rng.gauss(0, 0.08)) for _ in range(20)]
        members = [
            _runs(rng, (0.0, 0.5 if i % 2 else 1.0), 20, shared=hosts)[:2] for i in range(12)
        ]
        prior = group_loadings(members)
        assert prior is not None
        for i, (ys, xs) in enumerate(members):
            model = fit(ys, xs, prior)
            assert model is not None
            memory = dict(zip(model.kinds, model.loadings, strict=True))["memory"]
            gaps.append(abs(memory - (0.5 if i % 2 else 1.0)))
    assert statistics.fmean(gaps) < 0.08


def test_too_few_runs_or_a_probe_that_never_moved_give_no_fit():
    rng = random.Random("few")
    ys, xs, _ = _runs(rng, (0.1, 0.9), MIN_RUNS - 1)
    assert fit(ys, xs) is None
    steady = [{"memory": (0.0, 0.005**2), "compute": (0.0, 0.005**2)} for _ in range(20)]
    assert fit([1.0 + rng.gauss(0, 0.01) for _ in range(20)], steady) is None
    with pytest.raises(ValueError, match="run locations"):
        fit([1.0], [])


def test_a_lone_burst_run_is_refitted_without():
    rng = random.Random("burst")
    ys, xs, _ = _runs(rng, (0.1, 0.9), 20)
    ys[7] += 0.5  # a neighbour took the whole run: no probe saw it
    model = fit(ys, xs)
    assert model is not None
    assert model.dropped == 1
    assert math.sqrt(model.resid_var) < 0.02


def test_a_group_s_residual_variance_is_measured_from_what_its_members_share():
    """Twelve members sharing a 1 % run effect beside 2 % of their own: the group mean's
    variance is 1e-4 + 4e-4 / 12, not the independent 4.4e-4 / 12 (the shared part stays)."""
    ratios = []
    for seed in range(100):
        rng = random.Random(f"shared-{seed}")
        common = [rng.gauss(0, 0.01) for _ in range(30)]
        residuals = [[(r, c + rng.gauss(0, 0.02)) for r, c in enumerate(common)] for _ in range(12)]
        own = [statistics.variance([v for _, v in m]) for m in residuals]
        var, df = group_residual_var(residuals, 1.0, own)
        assert df == 29
        ratios.append(var / (1e-4 + 4e-4 / 12))
    assert statistics.median(ratios) == pytest.approx(1.0, abs=0.15)
    # independent members: the floor (trim factor x median / m) holds
    rng = random.Random("independent")
    residuals = [[(r, rng.gauss(0, 0.02)) for r in range(30)] for _ in range(12)]
    var, _ = group_residual_var(residuals, 1.144, [4e-4] * 12)
    assert var >= 1.144 * 4e-4 / 12
