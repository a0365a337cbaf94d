"""`doctor/drift.py`: the verdict on synthetic bins with known answers, and the binning."""

from __future__ import annotations

import random
import statistics

import pytest

from benchmarks.harness.doctor import drift

MB64 = 64 << 20


def bins_of(levels: list[float], seed: int, per_bin: int = 40, jitter: float = 0.03) -> tuple:
    """Copy times around each bin's level with `jitter` log-normal noise per copy."""
    rng = random.Random(seed)
    times = [[lv * rng.lognormvariate(0.0, jitter) for _ in range(per_bin)] for lv in levels]
    every = [t for b in times for t in b]
    return [statistics.median(b) for b in times], statistics.median(every)


def test_a_steady_host_is_ok_in_nearly_every_draw():
    oks = sum(
        drift.drift_finding(*bins_of([0.004] * 6, seed), MB64).level == "ok" for seed in range(300)
    )
    assert oks >= 0.99 * 300  # per-copy noise alone moves a 40-copy bin median ~0.5 %


@pytest.mark.parametrize("shift", [1.15, 0.85])
def test_a_level_shift_of_15_percent_is_named_in_every_draw(shift):
    found = [
        drift.drift_finding(*bins_of([0.004] * 3 + [0.004 * shift] * 3, seed), MB64)
        for seed in range(300)
    ]
    assert all(f.level == "warn" for f in found)
    assert "moves" in found[0].message
    assert "min_timed_s" in found[0].action


def test_seven_percent_wander_is_ok_and_the_figures_are_the_ratios():
    found = drift.drift_finding([1.0, 1.04, 0.97, 1.0], 1.0, MB64)
    assert found.level == "ok"
    assert found.data["low_ratio"] == 0.97
    assert found.data["high_ratio"] == 1.04


@pytest.mark.parametrize("bins", [[], [0.004], [0.004, 0.009]])
def test_too_few_bins_say_the_drift_is_unknown_without_a_warning(bins):
    found = drift.drift_finding(bins, 0.004, MB64)
    assert found.level == "skip"
    assert "unknown" in found.message


def fake_copy(durations):
    """A copy that advances a fake clock by each of `durations` in turn."""
    clock = [0.0]
    it = iter(durations)

    def copy() -> None:
        clock[0] += next(it)

    return copy, lambda: clock[0]


def test_sample_bins_groups_copies_by_the_bin_they_started_in_and_warms_first():
    # Two warm copies (the first touch of fresh pages, 5 s; the second sizes the bins), then
    # sixteen 1/16-s copies and 1/8-s ones after (binary fractions: exact sums): 1-s bins.
    copy, clock = fake_copy([5.0, 0.0625] + [0.0625] * 16 + [0.125] * 17)
    bins, overall = drift.sample_bins(copy, seconds=3.0, bin_s=1.0, clock=clock)
    # bin 0: sixteen 1/16-s copies; bins 1 and 2: eight 1/8-s copies each; the 5-s first touch
    # is not among them.
    assert bins == [0.0625, 0.125, 0.125]
    assert overall == pytest.approx((0.0625 + 0.125) / 2)


def test_a_bin_with_fewer_than_five_copies_is_not_judged():
    # 0.3-s copies: bins widen to 1.5 s (five copies each); the last, cut off, holds fewer.
    copy, clock = fake_copy([0.3] * 40)
    bins, _ = drift.sample_bins(copy, seconds=4.0, bin_s=1.0, clock=clock)
    assert bins == [pytest.approx(0.3)] * 2  # 0-1.5 s, 1.5-3 s; 3-4 s has four copies


def test_a_slow_first_touch_no_longer_reads_as_drift():
    # The quiet Xeon: a 1-GB copy of 0.1 s whose first touch took 2.8 s.
    copy, clock = fake_copy([2.8] + [0.1] * 80)
    bins, overall = drift.sample_bins(copy, seconds=6.0, bin_s=1.0, clock=clock)
    assert drift.drift_finding(bins, overall, 1 << 30).level == "ok"
