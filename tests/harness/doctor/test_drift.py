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


def test_too_few_bins_is_a_warning_that_says_the_drift_is_unknown():
    found = drift.drift_finding([0.004], 0.004, MB64)
    assert found.level == "warn"
    assert "unknown" in found.message


def test_sample_bins_groups_copies_by_the_second_they_started_in():
    clock = [0.0]
    durations = iter([0.3, 0.3, 0.3, 0.6, 0.6, 0.6, 0.6, 0.6])

    def copy() -> None:
        clock[0] += next(durations)

    bins, overall = drift.sample_bins(copy, seconds=3.0, bin_s=1.0, clock=lambda: clock[0])
    # Copies start at 0, .3, .6 (bin 0), .9 (bin 0), 1.5 (bin 1), 2.1, 2.7 (bin 2).
    assert bins == [pytest.approx(0.3), pytest.approx(0.6), pytest.approx(0.6)]
    assert overall == pytest.approx(0.6)
