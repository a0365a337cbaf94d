"""reports.analysis.changepoints: steps are found where they are, and not where there are none."""

from __future__ import annotations

import math
import random

import pytest

from reports.analysis.changepoints import detect_steps, robust_sigma


def noisy(rng, n, sigma=0.02, level=0.0):
    return [level + rng.gauss(0, sigma) for _ in range(n)]


def test_a_single_step_is_found_at_its_index_with_its_size():
    rng = random.Random(1)
    values = noisy(rng, 40) + noisy(rng, 40, level=math.log(1.10))
    steps = detect_steps(values)
    assert len(steps) == 1
    assert abs(steps[0].index - 40) <= 1
    assert steps[0].rel_change == pytest.approx(0.10, abs=0.02)


def test_two_steps_up_and_down_are_both_found():
    rng = random.Random(2)
    values = noisy(rng, 30) + noisy(rng, 30, level=0.15) + noisy(rng, 30)
    idx = [s.index for s in detect_steps(values)]
    assert len(idx) == 2
    assert abs(idx[0] - 30) <= 1
    assert abs(idx[1] - 60) <= 1


def test_flat_noise_has_no_steps_in_almost_all_series():
    rng = random.Random(3)
    false = sum(bool(detect_steps(noisy(rng, 100))) for _ in range(200))
    assert false <= 4  # <= 2 %


def test_a_single_outlier_run_is_not_a_step():
    values = [0.0] * 20 + [0.5] + [0.0] * 20
    assert detect_steps([v + 0.001 * (i % 3) for i, v in enumerate(values)]) == []


def test_short_or_constant_series_have_no_steps():
    assert detect_steps([0.0, 1.0, 0.0]) == []
    assert detect_steps([1.0] * 50) == []


def test_noiseless_exact_step_is_found():
    steps = detect_steps([0.0] * 10 + [0.1] * 10)
    assert [s.index for s in steps] == [10]


def test_steps_below_min_rel_step_are_not_reported():
    rng = random.Random(4)
    values = noisy(rng, 200, sigma=0.001) + noisy(rng, 200, sigma=0.001, level=math.log(1.01))
    assert detect_steps(values, min_rel_step=0.02) == []
    assert len(detect_steps(values, min_rel_step=0.005)) == 1


def test_robust_sigma_ignores_a_level_shift():
    rng = random.Random(5)
    values = noisy(rng, 500, sigma=0.03) + noisy(rng, 500, sigma=0.03, level=1.0)
    assert robust_sigma(values) == pytest.approx(0.03, rel=0.1)


@pytest.mark.parametrize("seed", range(20))
def test_two_burst_runs_in_a_row_are_not_two_steps(seed):
    """A load burst over two consecutive runs (1.8x) is neither one step nor two."""
    rng = random.Random(100 + seed)
    values = noisy(rng, 30, sigma=0.01)
    at = rng.randrange(3, 26)
    values[at] += math.log(1.8)
    values[at + 1] += math.log(1.8)
    assert detect_steps(values) == []


@pytest.mark.parametrize("seed", range(10))
def test_a_real_step_is_still_found_at_its_run_next_to_a_burst(seed):
    rng = random.Random(200 + seed)
    values = noisy(rng, 20, sigma=0.01) + noisy(rng, 20, sigma=0.01, level=math.log(1.2))
    values[8] += math.log(1.8)
    (step,) = detect_steps(values)
    assert step.index == 20
