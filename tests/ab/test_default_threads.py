"""Without `--threads`, each A/B side gets one core fewer than the machine's, its rounds pinned.

With torch's default (every core per side) the waiting side's OpenMP pool shares the cores of
the side being timed; docs/ab.md has the figures at the defaults before and after.
"""

from __future__ import annotations

import os

import pytest

from benchmarks.ab import cpus
from benchmarks.ab.plan import parse_plan


@pytest.mark.parametrize(("usable", "expected"), [(1, 1), (2, 1), (4, 3), (16, 15)])
def test_the_default_leaves_one_core(monkeypatch: pytest.MonkeyPatch, usable: int, expected: int):
    monkeypatch.setattr(cpus, "usable_cpus", lambda: usable)
    assert cpus.default_threads() == expected


def test_no_threads_given_means_the_default_and_its_pinning():
    plan = parse_plan(["--base", "HEAD"])
    threads = cpus.default_threads()
    assert cpus.threads_in(plan.pytest_args) == threads
    assert plan.threads_from.startswith("default")
    if hasattr(os, "sched_getaffinity"):
        assert plan.cpus == frozenset(sorted(os.sched_getaffinity(0))[-threads:])
        assert "--process-cv" in plan.report_args  # pinned: no between-process term (docs/ab.md)


@pytest.mark.parametrize("given", [["--threads", "2"], ["--threads=2"]])
def test_a_given_thread_count_is_kept(given: list[str]):
    plan = parse_plan(["--base", "HEAD", *given, "-k", "decode"])
    assert cpus.threads_in(plan.pytest_args) == 2
    named = [a for a in plan.pytest_args if a == "--threads" or a.startswith("--threads=")]
    assert len(named) == 1  # the default is not added beside the user's count
    assert plan.threads_from == "--threads"


def test_no_pinning_still_gets_the_default_threads():
    plan = parse_plan(["--base", "HEAD", "--cpus", "none"])
    assert plan.cpus is None
    assert cpus.threads_in(plan.pytest_args) == cpus.default_threads()
