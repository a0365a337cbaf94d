"""The A/B run records what re-judging needs: its judging settings and a random seed."""

from __future__ import annotations

from benchmarks.ab.plan import parse_plan
from benchmarks.ab.run import judge_settings


def test_the_run_records_its_judging_settings():
    settings = judge_settings(["--threshold", "3%", "--alpha", "0.05", "--process-cv", "0"])
    assert settings == {"threshold": ["3%"], "alpha": 0.05, "process_cv": 0.0}


def test_the_starting_side_seed_is_random_per_run_unless_given():
    seeds = {parse_plan(["--base", "HEAD", "--cpus", "none"]).seed for _ in range(5)}
    assert len(seeds) > 1
    assert parse_plan(["--base", "HEAD", "--cpus", "none", "--seed", "7"]).seed == 7
