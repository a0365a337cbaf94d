"""reports.analysis.shift and the round-count rule of reports.analysis.levels: pure functions
checked on synthetic inputs over many seeds (realised rates, not one draw).

The chi-bar-squared lean test that lived here is gone (issue 41): its size on independent t
scores was 5 %, but on the gate's real residuals it read 0.5-30 % by path; the lean is now
calibrated on the baseline's own runs (`tests/reports/analysis/test_lean.py`)."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from reports.analysis.levels import location_at, round_mismatch, run_location
from reports.analysis.shift import MIN_TIMINGS_FOR_SHIFT, estimate_shift


def _binomial_upper(p: float, n: int) -> float:
    return p + 3 * math.sqrt(p * (1 - p) / n)


def _suite(rng: random.Random, shift: float, m: int = 36, run_sd: float = 0.01):
    effect = shift + rng.gauss(0, run_sd)  # the current run's own effect, as the baseline's
    ses = [rng.uniform(0.01, 0.04) for _ in range(m)]
    return [effect + rng.gauss(0, s) for s in ses], [s * s for s in ses]


def test_a_shift_is_named_at_most_alpha_of_the_time_and_always_at_ten_percent():
    rng = random.Random(13)
    trials = 2000
    named = 0
    for _ in range(trials):
        logs, variances = _suite(rng, 0.0)
        found = estimate_shift(logs, variances, 0.01**2, df=74.0, alpha=0.01)
        assert found is not None
        named += found.named
    assert named / trials <= _binomial_upper(0.01, trials)
    covered = 0
    for _ in range(400):
        logs, variances = _suite(rng, math.log(1.10))
        found = estimate_shift(logs, variances, 0.01**2, df=7.4, alpha=0.01)
        assert found is not None
        assert found.named
        assert found.reaches(0.05)
        covered += found.ci_low <= 1.10 <= found.ci_high
    assert covered / 400 >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / 400)


def test_no_shift_without_enough_timings_or_a_run_effect_spread():
    logs, variances = _suite(random.Random(14), 0.1, m=MIN_TIMINGS_FOR_SHIFT - 1)
    assert estimate_shift(logs, variances, 1e-4, df=7.4, alpha=0.01) is None
    logs, variances = _suite(random.Random(14), 0.1)
    assert estimate_shift(logs, variances, 0.0, df=7.4, alpha=0.01) is None


def test_location_at_is_the_expected_location_of_a_random_subset():
    rng = random.Random(15)
    values = [rng.random() for _ in range(8)]
    for k in range(1, 9):
        exact = statistics.fmean(run_location(c) for c in itertools.combinations(values, k))
        assert location_at(values, k) == pytest.approx(exact, rel=1e-12)
    assert location_at(values, 8) == run_location(values)
    with pytest.raises(ValueError, match="rounds"):
        location_at(values, 9)


def test_a_long_run_summarised_at_a_short_count_has_the_short_runs_expectation():
    """The minimum of 3 normal rounds lies ~0.85 SD below their median, the 27th of 80 only
    ~0.43 SD: summarised at 3 rounds, an 80-round run has the 3-round expectation."""
    rng = random.Random(16)
    short = [run_location([rng.gauss(0, 1) for _ in range(3)]) for _ in range(20000)]
    own = [run_location([rng.gauss(0, 1) for _ in range(80)]) for _ in range(2000)]
    at3 = [location_at([rng.gauss(0, 1) for _ in range(80)], 3) for _ in range(2000)]
    assert statistics.fmean(short) == pytest.approx(-0.846, abs=0.03)
    assert statistics.fmean(own) == pytest.approx(-0.43, abs=0.03)
    assert statistics.fmean(at3) == pytest.approx(statistics.fmean(short), abs=0.03)


def test_a_round_count_mismatch_is_noted():
    assert round_mismatch([(1.0,) * 3] * 2, [(1.0,) * 3], 3) == ""
    note = round_mismatch([(1.0,) * 3, (1.0,) * 4], [(1.0,) * 60], 3)
    assert note == (
        "round counts differ (baseline 3-4, current 60): every run summarised at 3 rounds"
    )
