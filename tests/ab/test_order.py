"""A/B interleaving: the alternating order, the coordinator's referee and its pair budget (pure)."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Any

import pytest

from benchmarks.ab.coordinator import PairBudget, Referee
from benchmarks.ab.order import SIDES, pair_orders, turn_sequence

BASE, HEAD = SIDES


def test_rounds_alternate_strictly_so_every_round_follows_the_other_side():
    """A B A B ...: no round (but the first) follows its own side's round."""
    for seed in range(200):
        sequence = turn_sequence({BASE: 20, HEAD: 20}, random.Random(seed))
        sides = [s for s, _ in sequence]
        assert all(a != b for a, b in itertools.pairwise(sides))


def test_the_starting_side_is_random_per_benchmark():
    """Across benchmarks (one draw each) base starts about half the time."""
    rng = random.Random(11)
    starts = Counter(pair_orders(5, rng)[0][0] for _ in range(2000))
    assert 900 < starts[BASE] < 1100


def test_odd_pairs_and_zero():
    assert pair_orders(0, random.Random(0)) == []
    orders = pair_orders(7, random.Random(0))
    assert len(orders) == 7
    assert all(set(o) == set(SIDES) for o in orders)
    with pytest.raises(ValueError, match="pairs"):
        pair_orders(-1, random.Random(0))


def test_turn_sequence_pairs_round_i_with_round_i_and_appends_extra_rounds():
    """Round i of both sides are adjacent; a side's extra rounds follow, unpaired."""
    seq = turn_sequence({BASE: 5, HEAD: 3}, random.Random(1))
    assert len(seq) == 8
    for i in range(3):
        pair = seq[2 * i : 2 * i + 2]
        assert {s for s, _ in pair} == set(SIDES)
        assert {r for _, r in pair} == {i}
    assert seq[6:] == [(BASE, 3), (BASE, 4)]


class Sim:
    """Drives a Referee like two sides would; records who was told what."""

    def __init__(self, seed: int = 0, **referee: Any) -> None:
        self.granted: list[tuple[str, str, int, bool]] = []
        self.ref = Referee(
            random.Random(seed), on_grant=lambda *g: self.granted.append(g), **referee
        )
        self.inbox: dict[str, list[str]] = {BASE: [], HEAD: []}

    def __call__(self, replies):
        for side, message in replies:
            self.inbox[side].append(message["op"])

    def last(self, side: str) -> str | None:
        return self.inbox[side][-1] if self.inbox[side] else None


def _play_paired(
    sim: Sim, key: str, rounds: int, clock: FakeClock | None = None, round_s: float = 0.0
) -> list[str]:
    """Both sides enter `key` and take every turn they are granted (each round `round_s` on
    `clock`) until released, leaving early when told to stop; returns the timing order."""
    sim(sim.ref.enter(BASE, key, rounds))
    sim(sim.ref.enter(HEAD, key, rounds))
    assert sim.last(BASE) == sim.last(HEAD) == "paired"
    asked = {BASE: 0, HEAD: 0}
    timed: list[str] = []
    for side in SIDES:
        sim(sim.ref.turn(side, 0))
    while not (sim.last(BASE) == sim.last(HEAD) == "release"):
        for side in SIDES:
            if sim.last(side) == "go":
                timed.append(side)
                if clock is not None:
                    clock.now += round_s
                sim.inbox[side].append("timing")
                asked[side] += 1
                if asked[side] < rounds:
                    sim(sim.ref.turn(side, asked[side]))
                else:
                    sim(sim.ref.leave(side))
                break
            if sim.last(side) == "stop":
                sim.inbox[side].append("stopped")
                sim(sim.ref.leave(side))
                break
        else:
            raise AssertionError(f"deadlock after {timed}")
    return timed


def test_referee_alternates_rounds_and_never_grants_two_at_once():
    """A paired benchmark's rounds are granted one at a time, in turn_sequence order."""
    for seed in range(50):
        sim = Sim(seed)
        keys = ["a", "b"]
        for side in SIDES:
            sim(sim.ref.plan(side, keys))
        timed = _play_paired(sim, "a", 6)
        expected = [s for s, _ in turn_sequence({BASE: 6, HEAD: 6}, random.Random(seed))]
        assert timed == expected
        assert all(paired for *_, paired in sim.granted)
        # Pair i is adjacent: every consecutive couple holds one round of each side.
        for i in range(0, 12, 2):
            assert set(timed[i : i + 2]) == set(SIDES)


def test_a_benchmark_the_other_side_never_runs_goes_alone():
    """A cell skipped on one side (not in its plan) is timed alone, at once."""
    sim = Sim()
    sim(sim.ref.plan(BASE, ["a", "b"]))
    sim(sim.ref.plan(HEAD, ["b"]))
    sim(sim.ref.enter(BASE, "a", 3))
    assert sim.last(BASE) == "alone"
    assert sim.granted == [("a", BASE, -1, False)]


def test_waits_for_a_busy_side_that_will_come():
    """The other side is still busy (building, warming) on the way to the same benchmark."""
    sim = Sim()
    for side in SIDES:
        sim(sim.ref.plan(side, ["a"]))
    sim(sim.ref.enter(BASE, "a", 2))
    assert sim.last(BASE) is None  # waits, no answer yet
    sim(sim.ref.enter(HEAD, "a", 2))
    assert sim.last(BASE) == sim.last(HEAD) == "paired"


def test_both_waiting_at_different_benchmarks_cannot_deadlock():
    """A side whose test failed before its rounds moves on: the earlier benchmark goes alone."""
    sim = Sim()
    for side in SIDES:
        sim(sim.ref.plan(side, ["a", "b"]))
    sim(sim.ref.enter(HEAD, "b", 2))  # head failed before timing "a"
    assert sim.last(HEAD) is None
    sim(sim.ref.enter(BASE, "a", 2))
    assert sim.last(BASE) == "alone"
    assert sim.last(HEAD) is None  # head still waits for base at "b"
    sim(sim.ref.enter(BASE, "b", 2))
    assert sim.last(BASE) == sim.last(HEAD) == "paired"


def test_a_side_that_exits_releases_the_other():
    """A crashed side (disconnected) is never waited for: mid-pairing or before entering."""
    sim = Sim()
    for side in SIDES:
        sim(sim.ref.plan(side, ["a", "b"]))
    sim(sim.ref.enter(BASE, "a", 3))
    sim(sim.ref.enter(HEAD, "a", 3))
    sim(sim.ref.turn(BASE, 0))
    sim(sim.ref.turn(HEAD, 0))
    granted = [s for s in SIDES if sim.last(s) == "go"]
    assert len(granted) == 1
    other = HEAD if granted[0] == BASE else BASE
    sim(sim.ref.gone(other))
    # the survivor gets all its remaining turns without waiting, then is released alone
    survivor = granted[0]
    for i in (1, 2):
        sim(sim.ref.turn(survivor, i))
        assert sim.last(survivor) == "go"
    sim(sim.ref.leave(survivor))
    assert sim.last(survivor) == "release"
    sim(sim.ref.enter(survivor, "b", 3))
    assert sim.last(survivor) == "alone"


def test_an_exception_in_one_sides_rounds_skips_its_remaining_turns():
    """`leave` mid-way (the target raised) lets the other side finish its rounds."""
    sim = Sim(3)
    for side in SIDES:
        sim(sim.ref.plan(side, ["a"]))
    sim(sim.ref.enter(BASE, "a", 4))
    sim(sim.ref.enter(HEAD, "a", 4))
    sim(sim.ref.turn(BASE, 0))
    sim(sim.ref.turn(HEAD, 0))
    first = next(s for s in SIDES if sim.last(s) == "go")
    other = HEAD if first == BASE else BASE
    sim(sim.ref.leave(first))  # its round 0 raised
    assert sim.last(other) == "go"
    for i in (1, 2, 3):
        sim(sim.ref.turn(other, i))
        assert sim.last(other) == "go"
    sim(sim.ref.leave(other))
    assert sim.last(BASE) == sim.last(HEAD) == "release"


class FakeClock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_pair_budget_stops_slow_rounds_at_min_pairs_and_lets_fast_ones_run_all():
    """Stops come at pair boundaries, never before min_pairs, only once the time is spent."""
    for round_s, rounds, expected in ((0.5, 100, 20), (0.001, 100, 100), (0.0625, 100, 40)):
        clock = FakeClock()
        sim = Sim(budget=PairBudget(min_pairs=20, budget_s=5.0), clock=clock)
        for side in SIDES:
            sim(sim.ref.plan(side, ["a"]))
        timed = _play_paired(sim, "a", rounds, clock, round_s)
        assert timed.count(BASE) == timed.count(HEAD) == expected
        stopped = [box.count("stop") for box in sim.inbox.values()]
        assert stopped == ([1, 1] if expected < rounds else [0, 0])


def test_without_a_budget_every_announced_round_is_timed():
    clock = FakeClock()
    sim = Sim(clock=clock)
    for side in SIDES:
        sim(sim.ref.plan(side, ["a"]))
    assert len(_play_paired(sim, "a", 30, clock, 10.0)) == 60
