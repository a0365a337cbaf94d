"""reports.analysis.tails: Student t degrees of freedom of a machine's run-to-run noise, each side
apart, from pooled baseline residuals; normal noise reads normal (no spurious tail)."""

from __future__ import annotations

import math
import random

import pytest

from reports.analysis.tails import tail_dfs, tail_scale


def _t(rng: random.Random, nu: float) -> float:
    if math.isinf(nu):
        return rng.gauss(0, 1)
    return rng.gauss(0, 1) / math.sqrt(2.0 * rng.gammavariate(nu / 2.0, 1.0) / nu)


def _columns(rng: random.Random, up: float, down: float) -> list[list[float]]:
    """36 timings x 20 runs, each timing its own scale; the slow side t(up), the fast t(down)."""
    out = []
    for b in range(36):
        scale = 0.01 * (1 + b % 4)
        column = []
        for _ in range(20):
            x = abs(_t(rng, up)) if rng.random() < 0.5 else -abs(_t(rng, down))
            column.append(scale * x)
        out.append(column)
    return out


def test_normal_noise_reads_normal_on_both_sides_almost_always():
    rng = random.Random(1)
    reads = [tail_dfs(_columns(rng, math.inf, math.inf)) for _ in range(40)]
    assert sum(math.isinf(u) and math.isinf(d) for u, d in reads) >= 36


def test_a_heavy_slow_side_is_found_and_the_fast_side_left_normal():
    rng = random.Random(2)
    reads = [tail_dfs(_columns(rng, 3.0, math.inf)) for _ in range(40)]
    assert sum(u <= 5.0 for u, _ in reads) >= 36
    assert sum(math.isinf(d) for _, d in reads) >= 32


def test_too_few_residuals_read_normal():
    assert tail_dfs([[0.1, -0.2, 0.3]]) == (math.inf, math.inf)


def test_a_unit_variance_t_statistic_is_scaled_back_to_t():
    assert tail_scale(math.inf) == 1.0
    assert tail_scale(3.0) == pytest.approx(math.sqrt(3.0))
