"""`suite.timed_rounds` and `Rounds.pedantic(min_timed_s=...)`: rounds that span seconds."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.suite import rounds as suite
from benchmarks.suite.rounds import MAX_TIMED_ROUNDS, Rounds, timed_rounds


@pytest.mark.parametrize(
    ("rounds", "round_s", "min_timed_s", "expected"),
    [
        (3, 0.1, 0, 3),  # no floor: exactly `rounds`
        (3, 0.1, 5, 50),  # 50 x 0.1 s = 5 s
        (3, 0.3, 5, 17),  # rounded up: 17 x 0.3 s >= 5 s
        (3, 2.0, 5, 3),  # three 2-s rounds already span 6 s
        (3, 1e-4, 5, MAX_TIMED_ROUNDS),  # capped
        (300, 1e-4, 5, 300),  # the matrix's own count is never cut
        (3, 0.0, 5, 3),  # an unreadable warm round changes nothing
    ],
)
def test_timed_rounds(rounds, round_s, min_timed_s, expected):
    assert timed_rounds(rounds, round_s, min_timed_s) == expected


class ClockBenchmark:
    """A benchmark whose timer is a fake clock that each timed call advances by `round_s`."""

    def __init__(self) -> None:
        self.now = 0.0
        self.extra_info: dict[str, Any] = {}
        self.rounds_asked: int | None = None
        self._timer = lambda: self.now

    def pedantic(self, target, *, setup, rounds, warmup_rounds):
        assert warmup_rounds == 0
        self.rounds_asked = rounds
        for _ in range(rounds):
            setup()
            target()


def test_pedantic_times_the_warm_round_on_the_benchmarks_timer_and_extends_the_rounds():
    bench = ClockBenchmark()
    calls = []

    def run(_: object) -> None:
        calls.append(bench.now)
        bench.now += 0.25

    timed = Rounds(run).pedantic(bench, 3, min_timed_s=5)
    assert timed == bench.rounds_asked == 20  # 20 x 0.25 s
    assert len(calls) == 21  # the warm round, then the 20 timed ones


def test_pedantic_without_a_floor_times_exactly_rounds(monkeypatch):
    bench = ClockBenchmark()
    monkeypatch.setattr(suite, "MAX_TIMED_ROUNDS", 1)  # would cut, if a floor were applied

    def run(_: object) -> None:
        bench.now += 0.001

    assert Rounds(run).pedantic(bench, 4) == bench.rounds_asked == 4
