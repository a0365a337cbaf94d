"""The arrival schedule over many seeds: rate and burstiness within tolerance."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from benchmarks.harness.errors import ServeError
from benchmarks.harness.serve.arrivals import arrival_offsets


def _gaps(offsets):
    return [b - a for a, b in itertools.pairwise(offsets)]


@pytest.mark.parametrize(("rate", "burstiness"), [(4.0, 1.0), (10.0, 0.25), (2.0, 4.0)])
def test_mean_gap_is_one_over_the_rate_and_its_cv_one_over_root_burstiness(rate, burstiness):
    """Over 200 seeds of 400 requests, the realised rate and CV of each pass stay within
    tolerance of the asked ones for at least 97 % of the seeds (a 3-sigma-ish band)."""
    cv_expected = 1 / math.sqrt(burstiness)
    within_rate = within_cv = 0
    seeds = range(200)
    for seed in seeds:
        gaps = _gaps(arrival_offsets(400, rate, burstiness, seed))
        mean = statistics.fmean(gaps)
        cv = statistics.pstdev(gaps) / mean
        # The standard error of the mean gap is cv / sqrt(n) of it (n = 399).
        within_rate += abs(mean * rate - 1) < 3 * cv_expected / math.sqrt(399)
        within_cv += abs(cv / cv_expected - 1) < 0.2
    assert within_rate >= 0.97 * len(seeds)
    assert within_cv >= 0.97 * len(seeds)


def test_a_seed_gives_the_same_schedule_and_another_seed_another():
    assert arrival_offsets(50, 3.0, 1.0, 7) == arrival_offsets(50, 3.0, 1.0, 7)
    assert arrival_offsets(50, 3.0, 1.0, 7) != arrival_offsets(50, 3.0, 1.0, 8)
    offsets = arrival_offsets(50, 3.0, 0.5, 1)
    assert offsets[0] == 0.0
    assert offsets == sorted(offsets)
    assert len(offsets) == 50


def test_an_infinite_rate_sends_everything_at_once():
    assert arrival_offsets(5, math.inf) == [0.0] * 5


@pytest.mark.parametrize(
    ("count", "rate", "burstiness", "match"),
    [(0, 1.0, 1.0, "num_prompts"), (3, 0.0, 1.0, "request_rate"),
     (3, math.nan, 1.0, "request_rate"), (3, 1.0, 0.0, "burstiness"),
     (3, 1.0, math.inf, "burstiness")],
)  # fmt: skip
def test_bad_inputs_are_refused_with_the_field_named(count, rate, burstiness, match):
    with pytest.raises(ServeError, match=match):
        arrival_offsets(count, rate, burstiness)
