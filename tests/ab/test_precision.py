"""The precision stop: pairs keep coming until their spread is averaged down, never by location.

Driven through the pure `Referee` with a fake clock whose rounds scatter like the 2-core VM's.
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from benchmarks.ab.coordinator import PairBudget, Referee
from benchmarks.ab.order import SIDES
from benchmarks.ab.precision import half_width
from reports.analysis.distributions import t_ppf

BASE, HEAD = SIDES


def test_half_width_matches_the_spread_of_known_pairs():
    rng = random.Random(1)
    for sd, n in ((0.13, 300), (0.05, 40), (0.02, 100)):
        widths = []
        for _ in range(200):
            base = [0.003 * math.exp(rng.gauss(0, sd)) for _ in range(n)]
            head = [0.003 * math.exp(rng.gauss(0, sd)) for _ in range(n)]
            widths.append(half_width(base, head))
        # log(h/b) has sd * sqrt(2); the 20 % trimmed mean's SE is ~1.06x the mean's (normal);
        # the verdict's t quantile on h - 1 df; the lag-1 inflation adds a few % at small n
        h = n - 2 * math.floor(0.2 * n)
        expected = t_ppf(0.975, h - 1) * sd * math.sqrt(2) / math.sqrt(n) * 1.06
        assert statistics.median(widths) == pytest.approx(expected, rel=0.08)


def test_half_width_needs_pairs_and_ignores_a_side_shift():
    assert half_width([1.0] * 4, [1.0] * 4) == math.inf
    rng = random.Random(2)
    base = [math.exp(rng.gauss(0, 0.1)) for _ in range(200)]
    head = [math.exp(rng.gauss(0, 0.1)) for _ in range(200)]
    shifted = [x * 1.3 for x in head]  # a 30 % slower head: the same spread
    assert half_width(base, shifted) == pytest.approx(half_width(base, head))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _pairs_played(budget: PairBudget, sd: float, head_factor: float = 1.0, seed: int = 0) -> int:
    """Both sides time up to 1,000 rounds of one benchmark, 3 ms each with log-normal `sd`
    scatter on the referee's clock; returns how many pairs it granted before `stop`."""
    rng, clock = random.Random(seed), Clock()
    ref = Referee(random.Random(seed), budget=budget, clock=clock)
    inbox: dict[str, str] = {}

    def take(replies):
        for side, message in replies:
            inbox[side] = message["op"]

    for side in SIDES:
        take(ref.plan(side, ["a"]))
    for side in SIDES:
        take(ref.enter(side, "a", 1000))
    asked = dict.fromkeys(SIDES, 0)
    for side in SIDES:
        take(ref.turn(side, 0))
    timed = dict.fromkeys(SIDES, 0)
    while not all(inbox.get(s) == "release" for s in SIDES):
        side = next((s for s in SIDES if inbox.get(s) in ("go", "stop")), None)
        assert side is not None, inbox
        if inbox[side] == "stop":
            inbox[side] = "stopped"
            take(ref.leave(side))
            continue
        factor = head_factor if side == HEAD else 1.0
        clock.now += 0.003 * factor * math.exp(rng.gauss(0, sd))
        timed[side] += 1
        inbox[side] = "timing"
        asked[side] += 1
        take(ref.turn(side, asked[side]) if asked[side] < 1000 else ref.leave(side))
    assert timed[BASE] == timed[HEAD]
    return timed[BASE]


BUDGET = PairBudget(min_pairs=20, budget_s=0.5, target_half_width=0.015, max_s=4.0)


def test_noisy_pairs_run_until_precise_and_quiet_ones_stop_at_the_time_budget():
    # Per side 2 % scatter: 0.5 s of ~6 ms pairs (~83) is already precise enough.
    quiet = _pairs_played(BUDGET, sd=0.02)
    # Per side 9.5 % (log-ratios 13.5 %, the 2-core VM's tiny rounds): ~350 pairs for ±1.5 %.
    noisy = _pairs_played(BUDGET, sd=0.095)
    assert 70 <= quiet <= 90
    assert 250 <= noisy <= 500
    assert noisy * 2 * 0.003 < BUDGET.max_s  # stopped by the target, not by max_s


def test_max_s_bounds_the_cost_of_a_very_noisy_benchmark():
    pairs = _pairs_played(BUDGET, sd=0.6)
    assert pairs * 2 * 0.003 * math.exp(0.6**2 / 2) == pytest.approx(4.0, rel=0.15)


def test_which_side_is_slower_does_not_change_when_it_stops():
    """A/A and a 30 % slower head with the same scatter get the same number of pairs (± the
    clock's own granularity: the same seed draws the same scatter)."""
    same = [_pairs_played(BUDGET, sd=0.095, seed=s) for s in range(5)]
    slow = [_pairs_played(BUDGET, sd=0.095, head_factor=1.3, seed=s) for s in range(5)]
    assert same == slow


def test_target_zero_is_the_time_budget_alone():
    timed = _pairs_played(PairBudget(20, 0.5, 0.0, 4.0), sd=0.095)
    assert timed == _pairs_played(PairBudget(20, 0.5), sd=0.095) < 100
