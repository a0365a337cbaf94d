"""Which side times first in each pair of rounds: strict alternation from a random start (pure).

The rounds of one benchmark alternate strictly, A B A B ..., so that every round but the very
first follows a round of the *other* side. That matters more than it seems: on the development
machine a round that follows its own side's round ran about 5 % faster than one that follows
the other side's (caches and branch predictors still hold its own code and data), so the
ABBA order's B-after-B rounds added a +-5 % term to half the pairs. With strict alternation
every timed round starts from the same state. The side that starts is drawn at random for each
benchmark (Abedi & Brecht, ICPE 2017: randomized interleaving), so across a suite neither side
is systematically first; within one benchmark a drift of the machine biases a pair by at most
what it moves in one round's time.

It deliberately knows nothing about sockets or pytest (`coordinator` uses it).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

SIDES = ("base", "head")


def pair_orders(pairs: int, rng: random.Random) -> list[tuple[str, str]]:
    """For each of `pairs` pairs, the side that goes first and the side that goes second.

    One random draw per call (per benchmark) picks the side that starts; every pair has that
    orientation, so the whole sequence alternates. `pairs` >= 0.
    """
    if pairs < 0:
        raise ValueError(f"pairs must be >= 0, got {pairs}")
    first = SIDES if rng.random() < 0.5 else (SIDES[1], SIDES[0])
    return [first] * pairs


def turn_sequence(rounds: dict[str, int], rng: random.Random) -> list[tuple[str, int]]:
    """Every (side, round index) of one benchmark in the order they are timed.

    `rounds` maps each side to its number of rounds. The first min(rounds) rounds of the two
    sides are paired (round i of one side right next to round i of the other, in
    `pair_orders`); a side's extra rounds follow, unpaired.
    """
    sides: Sequence[str] = [s for s in SIDES if s in rounds]
    if len(sides) != 2:
        raise ValueError(f"turn_sequence needs both sides {SIDES}, got {sorted(rounds)}")
    paired = min(rounds.values())
    sequence: list[tuple[str, int]] = []
    for index, (first, second) in enumerate(pair_orders(paired, rng)):
        sequence += [(first, index), (second, index)]
    for side in sides:
        sequence += [(side, index) for index in range(paired, rounds[side])]
    return sequence
