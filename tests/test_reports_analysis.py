"""reports.analysis and reports.distributions: verdicts on synthetic series with known answers."""

from __future__ import annotations

import math
import random

import pytest

from reports.analysis import (
    AnalysisConfig,
    MetricSeries,
    Verdict,
    apply_bh,
    bh_qvalues,
    classify,
    estimate_noise,
    judge_exact,
    judge_noisy,
    judge_suite,
    summarize,
)
from reports.distributions import betainc, t_cdf, t_ppf, t_sf_two_sided

CFG = AnalysisConfig()


def runs(rng, level, n_runs, *, rounds=5, round_cv=0.03, run_cv=0.02):
    out = []
    for _ in range(n_runs):
        effect = rng.gauss(0, run_cv)
        out.append(tuple(level * math.exp(effect + rng.gauss(0, round_cv)) for _ in range(rounds)))
    return tuple(out)


def series(baseline, current, *, metric="decode_step_s", kind="timing", name="b"):
    return MetricSeries("m1", name, metric, kind, baseline, current)


# ---- distributions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [(0.975, math.inf, 1.959964), (0.975, 10, 2.228139), (0.995, 4, 4.604095), (0.8, 19, 0.860951)],
)
def test_t_ppf_matches_published_quantiles(p, df, expected):
    assert t_ppf(p, df) == pytest.approx(expected, abs=1e-5)


def test_t_cdf_and_two_sided_tail_are_consistent():
    assert t_cdf(0.0, 5) == pytest.approx(0.5)
    assert t_sf_two_sided(2.228139, 10) == pytest.approx(0.05, abs=1e-6)
    assert t_cdf(-2.0, 7) == pytest.approx(1 - t_cdf(2.0, 7))


def test_betainc_known_values():
    assert betainc(1, 1, 0.3) == pytest.approx(0.3)  # uniform
    assert betainc(2, 3, 0.0) == 0.0
    assert betainc(2, 3, 1.0) == 1.0
    assert betainc(0.5, 0.5, 0.5) == pytest.approx(0.5)


# ---- noise model ---------------------------------------------------------------------------


def test_estimate_noise_recovers_between_and_within_run_variation():
    """With 400 runs of 9 rounds, the random-effects estimate finds run CV 4 % and round CV 2 %."""
    rng = random.Random(1)
    base = runs(rng, 0.01, 400, rounds=9, round_cv=0.02, run_cv=0.04)
    noise = estimate_noise(base, CFG)
    assert noise.between_cv == pytest.approx(0.04, rel=0.15)
    assert noise.within_cv == pytest.approx(0.02, rel=0.15)
    assert math.exp(noise.baseline_log) == pytest.approx(0.01, rel=0.01)
    assert noise.df == CFG.prior_weight_runs + 399


def test_estimate_noise_with_one_run_falls_back_to_the_prior():
    """A single baseline run cannot show run-to-run variation: the prior CV is used."""
    noise = estimate_noise(((1.0, 1.0, 1.0),), CFG)
    assert noise.between_cv == pytest.approx(math.log1p(CFG.prior_run_cv))
    assert noise.df == CFG.prior_weight_runs


def test_run_to_run_noise_widens_the_interval_beyond_round_spread():
    """Tight rounds but drifting runs: the CI reflects the drift, not the tight rounds."""
    rng = random.Random(2)
    drifting = runs(rng, 1.0, 20, round_cv=0.002, run_cv=0.05)
    v = judge_noisy(series(drifting, drifting[-1]), CFG)
    assert v.ci_high is not None
    assert v.ci_low is not None
    assert v.ci_high - v.ci_low > 0.1  # +-5 % run noise, not +-0.2 %
    assert v.mde is not None
    assert v.mde > 0.05


# ---- verdicts ------------------------------------------------------------------------------


def test_no_baseline_is_new_never_pass():
    v = judge_suite([series((), (1.0, 1.0, 1.0))], CFG)[0]
    assert v.verdict == "new"
    assert v.ratio is None


def test_no_current_value_is_missing():
    rng = random.Random(3)
    v = judge_suite([series(runs(rng, 1.0, 10), None)], CFG)[0]
    assert v.verdict == "missing"


def test_large_slowdown_with_low_noise_fails_with_ratio_and_interval():
    rng = random.Random(4)
    base = runs(rng, 1.0, 20, round_cv=0.01, run_cv=0.01)
    slow = tuple(x * 1.20 for x in runs(rng, 1.0, 1, round_cv=0.01, run_cv=0.01)[0])
    v = judge_suite([series(base, slow)], CFG)[0]
    assert v.verdict == "fail"
    assert v.ratio == pytest.approx(1.20, abs=0.04)
    assert v.ci_low is not None
    assert v.ci_high is not None
    assert 1.05 < v.ci_low < v.ratio < v.ci_high


def test_large_speedup_is_improved():
    rng = random.Random(5)
    base = runs(rng, 1.0, 20, round_cv=0.01, run_cv=0.01)
    fast = tuple(x * 0.8 for x in runs(rng, 1.0, 1, round_cv=0.01, run_cv=0.01)[0])
    assert judge_suite([series(base, fast)], CFG)[0].verdict == "improved"


def test_unchanged_benchmark_with_low_noise_passes():
    rng = random.Random(6)
    base = runs(rng, 1.0, 20, round_cv=0.01, run_cv=0.005)
    v = judge_suite([series(base, runs(rng, 1.0, 1, round_cv=0.01, run_cv=0.005)[0])], CFG)[0]
    assert v.verdict == "pass"
    assert v.mde is not None
    assert v.mde < CFG.threshold


def test_noisy_benchmark_is_inconclusive_and_reports_its_mde():
    """Run-to-run CV 10 %: a 5 % threshold cannot be judged; the MDE says what could be."""
    rng = random.Random(7)
    base = runs(rng, 1.0, 8, run_cv=0.10)
    v = judge_suite([series(base, runs(rng, 1.0, 1, run_cv=0.10)[0])], CFG)[0]
    assert v.verdict == "inconclusive"
    assert v.mde is not None
    assert v.mde > CFG.threshold


def test_significant_but_small_slowdown_passes_below_the_threshold():
    """A certain 2 % slowdown is below the 5 % practical threshold: pass, not fail."""
    base = tuple((1.0 + 1e-4 * (i % 3),) * 5 for i in range(20))
    v = judge_suite([series(base, (1.02,) * 5)], CFG)[0]
    assert v.q_value is not None
    assert v.q_value < CFG.alpha
    assert v.verdict == "pass"


def test_per_metric_threshold_is_used():
    base = tuple((1.0 + 1e-4 * (i % 3),) * 5 for i in range(20))
    cfg = AnalysisConfig(per_metric={"decode_step_s": 0.01})
    v = judge_suite([series(base, (1.02,) * 5)], cfg)[0]
    assert v.threshold == 0.01
    assert v.verdict == "fail"


def test_ratio_beyond_threshold_without_significance_after_bh_is_inconclusive():
    v = Verdict(
        "m",
        "b",
        "t_s",
        "timing",
        "pass",
        0.05,
        ratio=1.08,
        ci_low=1.01,
        ci_high=1.15,
        p_value=0.004,
        q_value=0.2,
        mde=0.04,
    )
    assert classify(v, 0.01) == "inconclusive"


def test_baseline_after_a_step_uses_only_the_newer_runs():
    """A merged 20 % regression in history becomes the new normal for the comparison."""
    rng = random.Random(8)
    old = runs(rng, 1.0, 15, round_cv=0.01, run_cv=0.01)
    new = runs(rng, 1.2, 10, round_cv=0.01, run_cv=0.01)
    v = judge_suite([series(old + new, runs(rng, 1.2, 1, round_cv=0.01, run_cv=0.01)[0])], CFG)[0]
    assert v.verdict == "pass"
    assert v.baseline_runs == 10
    assert "step" in v.note


# ---- Benjamini-Hochberg --------------------------------------------------------------------


def test_bh_qvalues_match_a_hand_computed_example():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04 -> *4/rank = 0.02, 0.02, 0.04, 0.04
    assert bh_qvalues(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])


def test_bh_turns_a_lone_borderline_p_value_among_many_into_no_fail():
    """p = 0.005 alone would fail at alpha 0.01; among 100 tests it is not significant."""
    vs = [
        Verdict(
            "m",
            f"b{i}",
            "t_s",
            "timing",
            "pass",
            0.05,
            ratio=1.0,
            ci_low=0.97,
            ci_high=1.03,
            p_value=0.9,
            mde=0.04,
        )
        for i in range(99)
    ]
    vs.append(
        Verdict(
            "m",
            "x",
            "t_s",
            "timing",
            "pass",
            0.05,
            ratio=1.09,
            ci_low=1.02,
            ci_high=1.16,
            p_value=0.005,
            mde=0.04,
        )
    )
    out = apply_bh(vs, 0.01)
    assert out[-1].q_value == pytest.approx(0.5)
    assert out[-1].verdict == "inconclusive"
    assert summarize(out)["fail"] == 0


# ---- exact metrics -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("baseline", "current", "expected"),
    [(1024.0, 1024.0, "pass"), (1024.0, 1025.0, "fail"), (1024.0, 512.0, "improved")],
)
def test_exact_metrics_compare_exactly(baseline, current, expected):
    s = series(
        ((baseline,), (baseline,)), (current,), metric="kv_measured_final_bytes", kind="exact"
    )
    v = judge_exact(s, CFG)
    assert v.verdict == expected
    if expected != "pass":
        assert "exact comparison" in v.note


def test_exact_metric_without_baseline_is_new():
    s = series((), (1024.0,), metric="weights_bytes", kind="exact")
    assert judge_exact(s, CFG).verdict == "new"


def test_exact_metrics_are_not_part_of_bh():
    s = series(((1.0,),), (2.0,), metric="weights_bytes", kind="exact")
    v = judge_suite([s], CFG)[0]
    assert v.p_value is None
    assert v.q_value is None
    assert v.verdict == "fail"


def test_pooled_rerun_of_the_current_commit_narrows_the_interval():
    """Three current runs average out run-to-run noise: the interval and MDE shrink ~sqrt(3)."""
    rng = random.Random(9)
    base = runs(rng, 1.0, 40, round_cv=0.01, run_cv=0.03)
    cur = runs(rng, 1.0, 3, round_cv=0.01, run_cv=0.03)
    one = judge_noisy(series(base, cur[-1]), CFG)
    pooled = judge_noisy(
        MetricSeries("m1", "b", "decode_step_s", "timing", base, cur[-1], cur[:-1]), CFG
    )
    assert one.mde is not None
    assert pooled.mde is not None
    assert pooled.mde < one.mde / 1.5
