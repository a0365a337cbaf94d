"""The arrival schedule over many seeds: the exact span (the nominal rate), and the burstiness
of the gaps within tolerance."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from benchmarks.harness.errors import ServeError
from benchmarks.harness.serve.arrivals import arrival_offsets


def _gaps(offsets):
    return [b - a for a, b in itertools.pairwise(offsets)]


@pytest.mark.parametrize(
    ("count", "rate", "burstiness"), [(12, 8.0, 1.0), (2, 3.0, 1.0), (400, 10.0, 0.25)]
)
def test_every_seed_spans_exactly_n_minus_one_over_the_rate(count, rate, burstiness):
    """The realised offered rate is the nominal one for every draw (before, 12 arrivals at
    8 req/s spanned anything from about 0.9 s to 2 s)."""
    for seed in range(300):
        offsets = arrival_offsets(count, rate, burstiness, seed)
        assert offsets[0] == 0.0
        assert offsets[-1] == (count - 1) / rate
        assert offsets == sorted(offsets)


@pytest.mark.parametrize(("rate", "burstiness"), [(4.0, 1.0), (10.0, 0.25), (2.0, 4.0)])
def test_the_gaps_cv_is_one_over_root_burstiness(rate, burstiness):
    """Over 200 seeds of 400 requests, the CV of each pass's gaps stays within 20 % of
    1 / sqrt(burstiness) for at least 97 % of the seeds, and the gaps' CV pooled over the
    seeds within 3 %: rescaling to the exact span keeps the shape of the gaps."""
    cv_expected = 1 / math.sqrt(burstiness)
    within_cv = 0
    pooled: list[float] = []
    seeds = range(200)
    for seed in seeds:
        gaps = _gaps(arrival_offsets(400, rate, burstiness, seed))
        assert statistics.fmean(gaps) == pytest.approx(1 / rate)  # the span: exact
        cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
        within_cv += abs(cv / cv_expected - 1) < 0.2
        pooled.extend(gaps)
    assert within_cv >= 0.97 * len(seeds)
    pooled_cv = statistics.pstdev(pooled) / statistics.fmean(pooled)
    assert pooled_cv == pytest.approx(cv_expected, rel=0.03)


def test_rescaling_keeps_the_order_and_ratios_of_the_seeded_gamma_draw():
    draw = random.Random(4)
    raw = [draw.gammavariate(0.5, 1 / (2.0 * 0.5)) for _ in range(5)]
    gaps = _gaps(arrival_offsets(6, 2.0, 0.5, 4))
    assert gaps == pytest.approx([g * (5 / 2.0) / sum(raw) for g in raw])


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
