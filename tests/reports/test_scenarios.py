"""The issue-13 table, row by row: the real gate on synthetic history files, over many seeds.

Each row is `reports.scenarios` run for 40 seeded trials; the assertions are on the realised
shares (the full 200-trial table, before and after, is in docs/reports.md).
"""

from __future__ import annotations

import pytest

from reports.scenarios import SCENARIOS, format_scenarios, run_scenarios

TRIALS = 40


@pytest.fixture(scope="module")
def table() -> dict[str, dict[str, float]]:
    return {s.name: scores for s, scores in run_scenarios(TRIALS, seed=11)}


def _row(table: dict[str, dict[str, float]], prefix: str) -> dict[str, float]:
    (name,) = [n for n in table if n.startswith(prefix)]
    return table[name]


def test_a_a_suites_have_no_false_fail(table):
    row = _row(table, "A/A")
    assert row["suites with a false fail"] <= 1 / TRIALS
    # Not 1 - 1/TRIALS any more: the lean test now has its stated size (5 %, calibrated on the
    # baseline's own runs, issue 41), so about one A/A suite in twenty reads INCONCLUSIVE (exit
    # 3); before, its realised size was far below the 10 % it stated.
    assert row["exit 0"] >= 0.95 - 2 * (0.95 * 0.05 / TRIALS) ** 0.5


def test_a_torch_upgrade_is_judged_against_the_same_hardware_and_named(table):
    row = _row(table, "torch")
    assert row["slowed caught"] >= 0.95
    assert row["suites with a false fail"] <= 1 / TRIALS
    assert row["exit 1"] >= 0.95
    assert row["names torch 2.13.0 → 2.14.1"] == 1.0


def test_plus_4_5_percent_below_the_threshold_is_almost_never_fail(table):
    row = _row(table, "every benchmark +4.5 %")
    assert row["verdicts fail"] <= 0.01
    assert row["exit 0 or 3 (pass or inconclusive, never fail)"] >= 0.95


def test_one_burst_run_in_the_baseline_does_not_blind_the_gate(table):
    row = _row(table, "one 1.8x burst")
    assert row["15 % slowdowns caught"] >= 0.9
    assert row["suites with a false fail"] <= 1 / TRIALS


def test_a_retried_shard_does_not_hide_the_other_shards_regression(table):
    row = _row(table, "shard 2")
    assert row["exit 1"] == 1.0
    assert row["2x regressions caught"] >= 0.95


def test_two_local_runs_compare_and_one_alone_is_no_baseline(table):
    row = _row(table, "`nox -s bench-cpu` twice")
    assert row["second run compared"] == 1.0
    assert row["second run: false fail"] <= 1 / TRIALS
    assert row["one run: no-baseline, not PASS"] == 1.0


def test_the_table_has_every_scenario():
    text = format_scenarios(run_scenarios(1, seed=2), 1)
    assert text.count("\n| ") == len(SCENARIOS) + 2  # header, separator, one per scenario
