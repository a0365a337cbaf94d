"""reports.analysis.series and reports.analysis.distributions: verdicts on synthetic series with
known answers."""

from __future__ import annotations

import math
import random

import pytest

from reports.analysis.distributions import betainc, t_cdf, t_ppf, t_sf_two_sided
from reports.analysis.exact import judge_exact
from reports.analysis.judge import judge, judge_suite
from reports.analysis.metrics import higher_is_better
from reports.analysis.series import (
    AnalysisConfig,
    MetricSeries,
    Verdict,
    apply_holm,
    summarize,
)

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


# ---- verdicts ------------------------------------------------------------------------------


def test_run_to_run_noise_widens_the_interval_beyond_round_spread():
    """Tight rounds but drifting runs: the CI reflects the drift, not the tight rounds."""
    rng = random.Random(2)
    drifting = runs(rng, 1.0, 20, round_cv=0.002, run_cv=0.05)
    v = judge_suite([series(drifting, drifting[-1])], CFG)[0]
    assert v.ci_high is not None
    assert v.ci_low is not None
    assert v.ci_high - v.ci_low > 0.1  # +-5 % run noise, not +-0.2 %
    assert v.mde is not None
    assert v.mde > 0.05


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
    """The MDE of a test against the threshold is above it, and close to it with low noise."""
    rng = random.Random(6)
    base = runs(rng, 1.0, 20, round_cv=0.01, run_cv=0.005)
    v = judge_suite([series(base, runs(rng, 1.0, 1, round_cv=0.01, run_cv=0.005)[0])], CFG)[0]
    assert v.verdict == "pass"
    assert v.mde is not None
    assert CFG.threshold < v.mde < 2 * CFG.threshold


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
    assert v.p_adjusted is not None
    assert v.p_adjusted > 0.5  # the test is against 1 + threshold, not against 1
    assert v.verdict == "pass"


def test_per_metric_threshold_is_used():
    base = tuple((1.0 + 1e-4 * (i % 3),) * 5 for i in range(20))
    cfg = AnalysisConfig(per_metric={"decode_step_s": 0.01})
    v = judge_suite([series(base, (1.05,) * 5)], cfg)[0]
    assert v.threshold == 0.01
    assert v.verdict == "fail"


def test_ratio_beyond_threshold_without_confidence_is_inconclusive():
    """+8 % measured with 5 % run noise: the interval straddles 1.05, neither fail nor pass."""
    rng = random.Random(17)
    base = runs(rng, 1.0, 10, run_cv=0.05)
    v = judge_suite([series(base, tuple(x * 1.08 for x in (1.0,) * 5))], CFG)[0]
    assert v.ci_low is not None
    assert v.ci_high is not None
    assert v.ci_low < 1.05 < v.ci_high
    assert v.verdict == "inconclusive"


def test_baseline_after_a_step_uses_only_the_newer_runs():
    """A merged 20 % regression in history becomes the new normal for the comparison."""
    rng = random.Random(8)
    old = runs(rng, 1.0, 15, round_cv=0.01, run_cv=0.01)
    new = runs(rng, 1.2, 10, round_cv=0.01, run_cv=0.01)
    v = judge_suite([series(old + new, runs(rng, 1.2, 1, round_cv=0.01, run_cv=0.01)[0])], CFG)[0]
    assert v.verdict == "pass"
    assert v.baseline_runs == 10
    assert "step" in v.note


# ---- Holm ----------------------------------------------------------------------------------


def _evidence_verdict(name: str, log_ratio: float, se: float) -> Verdict:
    return Verdict("m", name, "t_s", "timing", "pass", 0.05, log_ratio=log_ratio, se=se, df=30.0)


def test_holm_turns_a_lone_borderline_result_among_many_into_no_fail():
    """p ~ 0.003 alone would fail at alpha 0.01; among 100 metrics Holm needs p <= 1e-4."""
    limit = math.log1p(0.05)
    vs = [_evidence_verdict(f"b{i}", 0.0, 0.01) for i in range(99)]
    vs.append(_evidence_verdict("x", limit + 2.97 * 0.01, 0.01))
    alone = apply_holm(vs[-1:], CFG)[0]
    assert alone.verdict == "fail"
    out = apply_holm(vs, CFG)
    assert out[-1].p_adjusted == pytest.approx(min(1.0, 100 * out[-1].p_value), rel=1e-6)
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


def test_exact_metrics_are_not_part_of_holm():
    s = series(((1.0,),), (2.0,), metric="weights_bytes", kind="exact")
    v = judge_suite([s], CFG)[0]
    assert v.p_value is None
    assert v.p_adjusted is None
    assert v.verdict == "fail"


def test_pooled_rerun_of_the_current_commit_narrows_the_interval():
    """Three current runs that do not share a state average out run-to-run noise: the interval
    and MDE shrink ~sqrt(3). (Issue 41: only then; re-runs that share one host state do not,
    `test_reruns_sharing_a_host_state_do_not_narrow_the_run_term`.)"""
    rng = random.Random(9)
    base = runs(rng, 1.0, 40, round_cv=0.01, run_cv=0.03)
    cur = runs(rng, 1.0, 3, round_cv=0.01, run_cv=0.03)
    one = judge_suite([series(base, cur[-1])], CFG)[0]
    pooled = judge_suite(
        [MetricSeries("m1", "b", "decode_step_s", "timing", base, cur[-1], cur[:-1])], CFG
    )[0]
    assert one.se is not None
    assert pooled.se is not None
    assert pooled.se < one.se / 1.5


def test_direction_is_explicit_a_lower_throughput_is_worse():
    """tokens/s: higher is better, so 20 % fewer tokens/s fails and 20 % more is improved."""
    rng = random.Random(12)
    base = tuple((v[0],) for v in runs(rng, 100.0, 20, rounds=1, round_cv=0.0, run_cv=0.01))

    def tok(current):
        return MetricSeries(
            "m", "b", "decode_tok_per_s", "scalar", base, (current,), (), (), 0.0, True
        )

    slower, faster = judge_suite([tok(80.0), tok(120.0)], CFG)
    assert slower.verdict == "fail"
    assert slower.ratio == pytest.approx(1.25, rel=0.03)  # worse-ratio: 100 / 80
    assert faster.verdict == "improved"


def test_metrics_name_their_direction():
    assert higher_is_better("decode_tok_per_s")
    assert not higher_is_better("decode_step_s")
    assert not higher_is_better("kv_measured_final_bytes")


def test_reruns_sharing_a_host_state_do_not_narrow_the_run_term():
    """Issue 41: pooling divided the whole run-level variance by n, also for re-runs run back to
    back in one host state (5 % false fails at the threshold). The gate measures how much they
    share (their scatter against the baseline's run-to-run spread) and carries
    `tau^2 (rho + (1 - rho) / n)`."""
    rng = random.Random(41)

    def suite(shared: bool) -> list[MetricSeries]:
        out = []
        state = rng.gauss(0, 0.03)  # the re-runs' common state, when they share one
        for b in range(36):
            base = runs(rng, 1.0, 20, round_cv=0.005, run_cv=0.03)
            effects = [state if shared else rng.gauss(0, 0.03) for _ in range(3)]
            now = [tuple(math.exp(e + rng.gauss(0, 0.005)) for _ in range(3)) for e in effects]
            out.append(
                MetricSeries(
                    "m", f"b{b}", "decode_step_s", "timing", base, now[-1], tuple(now[:-1])
                )
            )
        return out

    own = judge(suite(shared=False), CFG)
    same = judge(suite(shared=True), CFG)
    assert own.shifts["m"].rho < 0.3
    assert same.shifts["m"].rho > 0.7
    se_own = sorted(v.se or 0 for v in own.verdicts)[18]
    se_same = sorted(v.se or 0 for v in same.verdicts)[18]
    assert se_same > 1.4 * se_own  # about sqrt(3) wider: one state, not three
