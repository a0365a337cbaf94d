"""reports.analysis.simulate: the gate's false-alarm rate and detection power on synthetic
suites."""

from __future__ import annotations

import random

from reports.analysis.series import MetricSeries
from reports.analysis.simulate import SimulationConfig, compare_fail, run_scenario, simulate_suite
from reports.cli import main


def test_unchanged_suites_rarely_fail_and_15_percent_slowdowns_are_caught():
    """Small version of `python -m reports simulate` (the full table is in docs/reports.md).

    300 A/A suites of 36 benchmarks with ~1 % noise (the issue's world): at most 1 % (+ a
    binomial allowance) with any false fail, while pytest-benchmark's mean:5% against the
    previous run fails most of them; 15 % slowdowns are caught >= 90 % of the time.
    """
    sim = SimulationConfig(
        benchmarks=36, suites=300, slowed=4, seed=3, round_cv=0.01, run_cv=0.01, suite_run_cv=0.005
    )
    aa = run_scenario(sim, 0.0)
    assert aa.any_false_fail["phasebench"] <= 0.01 + 3 * (0.01 * 0.99 / 300) ** 0.5
    assert aa.any_false_fail["compare-fail mean:5%"] >= 0.5
    slow = run_scenario(sim, 0.15)
    assert slow.detection["phasebench"] >= 0.9
    assert slow.any_false_fail["phasebench"] <= 0.03


def test_a_4_5_percent_slowdown_below_the_threshold_is_almost_never_fail():
    """Every slowed benchmark 4.5 % slower, threshold 5 %, 1 % noise: <= 1 % of them fail."""
    sim = SimulationConfig(
        benchmarks=36, suites=100, slowed=36, seed=4, round_cv=0.01, run_cv=0.01, suite_run_cv=0.0
    )
    result = run_scenario(sim, 0.045)
    assert result.detection["phasebench"] <= 0.01


def test_simulated_suites_have_the_requested_shape():
    sim = SimulationConfig(benchmarks=7, baseline_runs=4, rounds=3, slowed=2)
    series, slowed = simulate_suite(random.Random(0), sim, 0.1)
    assert len(series) == 7
    assert sum(slowed) == 2
    assert all(len(s.baseline) == 4 and len(s.baseline[0]) == 3 for s in series)


def test_compare_fail_uses_the_previous_run_mean_only():
    s = MetricSeries("m", "b", "t", "timing", ((10.0,), (1.0, 1.0)), (1.0, 1.12))
    assert compare_fail(s, 5.0)  # mean 1.06 vs previous 1.0 (the older 10.0 is ignored)
    assert not compare_fail(s, 10.0)


def test_simulate_command_prints_the_table(capsys):
    args = ["simulate", "--suites", "2", "--benchmarks", "10", "--slowed", "2"]
    assert main([*args, "--scenario-trials", "1"]) == 0
    out = capsys.readouterr().out
    assert "| A/A (no change) | phasebench |" in out
    assert "| 15% slowdown | compare-fail mean:10% |" in out
    assert "| torch 2.13.0 → 2.14.1, 3 benchmarks 1.5x slower |" in out
