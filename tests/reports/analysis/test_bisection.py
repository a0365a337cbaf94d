"""The bisection's rule and search (`reports.analysis.bisection`), checked on simulated ranges
with this host's paired noise (`bisect_world`) over many seeds, and on exact worlds for the
paths a rate cannot show (skips, an unverified candidate, a spread move)."""

from __future__ import annotations

import math

import pytest

from reports.analysis.bisect_world import SCENARIOS, RangeWorld, rates
from reports.analysis.bisection import (
    MAX_COMPARISONS,
    Estimate,
    Plan,
    UnmeasurableError,
    bisect,
    pooled,
    read,
)

RUNS = 60


def test_pooled_estimates_weigh_by_precision():
    a, b = Estimate(0.10, 0.01, 50, 100), Estimate(0.20, 0.02, 50, 100)
    both = pooled([a, b])
    assert both.log_ratio == pytest.approx((0.10 / 0.01**2 + 0.20 / 0.02**2) / (1e4 + 2500))
    assert both.se == pytest.approx(math.sqrt(1 / (1e4 + 2500)))
    assert 50 < both.df < 100
    assert both.pairs == 200
    assert pooled([a]) is a


def test_read_is_against_the_threshold_not_against_no_change():
    thr, alpha = 0.05, 0.001
    assert read(Estimate(math.log(1.20), 0.01, 100, 100), thr, alpha) == "moved"
    assert read(Estimate(math.log(1.00), 0.01, 100, 100), thr, alpha) == "flat"
    # clearly slower, but not clearly beyond 5 %: neither
    assert read(Estimate(math.log(1.06), 0.01, 100, 100), thr, alpha) == "undecided"
    assert read(Estimate(math.log(1.20), 0.0, 100, 100), thr, alpha) == "moved"
    # flat is read at a plain 5 % (a wrong flat loses a culprit, never names one): a 2 %
    # between-process term still lets an unchanged half read flat
    assert read(Estimate(0.0, 0.02, 100, 100), thr, alpha) == "flat"
    assert read(Estimate(0.0, 0.02, 100, 100), thr, alpha, flat_alpha=alpha) == "undecided"


def test_one_culprit_among_64_is_named_and_never_a_wrong_one():
    r = rates(SCENARIOS["one culprit +20 % among 64 commits"], RUNS, "one")
    assert r.wrong <= 0.05
    assert r.complete >= 0.9
    # a binary search of 64 commits: reproduce, two halves at 6 levels, verify
    assert r.comparisons <= 16


def test_two_culprits_are_both_named_never_one_wrong_commit():
    r = rates(SCENARIOS["two culprits +20 % each among 64 commits"], RUNS, "two")
    assert r.wrong <= 0.05
    assert r.complete >= 0.85
    assert r.verdicts["culprit"] + r.verdicts["inconclusive"] == 1.0


def test_nothing_changed_is_not_reproducible():
    r = rates(SCENARIOS["nothing changed (64 commits of text)"], RUNS, "none")
    assert r.verdicts["not-reproducible"] >= 0.95
    assert r.verdicts["culprit"] == 0.0


def test_a_creep_of_small_changes_names_no_culprit():
    r = rates(SCENARIOS["no culprit: 64 commits of +0.5 % each (+38 % in all)"], RUNS, "creep")
    assert r.verdicts["culprit"] <= 0.05
    assert r.verdicts["inconclusive"] >= 0.9


def test_the_realised_wrong_culprit_rate_stays_within_alpha_with_heavier_noise():
    # pairs twice as noisy and a between-process term near the threshold's tenth: still
    # never a wrong commit with exit 0 beyond the budget (it may say inconclusive instead)
    world = RangeWorld(pair_cv=0.2, process_cv=0.005)
    r = rates(world, RUNS, "noisy")
    assert r.wrong <= 0.05


class Exact:
    """A deterministic range: commit i's true level, an exact estimate with a fixed error."""

    def __init__(self, levels: list[float], broken: dict[int, str] | None = None, se=0.005):
        self.levels, self.broken, self.se = levels, broken or {}, se
        self.calls: list[tuple[int, int, int]] = []

    def __call__(self, lo: int, hi: int, look: int) -> Estimate:
        self.calls.append((lo, hi, look))
        for i in (lo, hi):
            if i in self.broken:
                raise UnmeasurableError(i, self.broken[i])
        return Estimate(self.levels[hi] - self.levels[lo], self.se, 200.0, 200)


def step_at(n: int, k: int, effect: float = math.log(1.2)) -> list[float]:
    return [0.0 if i < k else effect for i in range(n + 1)]


@pytest.mark.parametrize("k", range(1, 9))
def test_every_position_of_eight_is_found_and_verified(k: int):
    result = bisect(8, Exact(step_at(8, k)))
    assert result.verdict == "culprit", result.reason
    assert [(c.index, c.parent) for c in result.culprits] == [(k, k - 1)]
    assert result.culprits[0].explained == pytest.approx(1.0)
    assert result.steps[0].purpose == "reproduce"
    assert result.steps[-1].purpose == "verify"


def test_a_skipped_commit_is_named_and_the_search_goes_around_it():
    measure = Exact(step_at(8, 6), broken={4: "its pyproject.toml does not resolve"})
    result = bisect(8, measure)
    assert result.verdict == "culprit"
    assert [c.index for c in result.culprits] == [6]
    assert result.skipped == {4: "its pyproject.toml does not resolve"}


def test_a_culprit_among_skipped_commits_is_a_range_not_a_guess():
    measure = Exact(step_at(4, 2), broken={1: "broken", 2: "broken", 3: "broken"})
    result = bisect(4, measure)
    assert result.verdict == "inconclusive"
    assert result.culprits == []
    assert "skipped commits 1, 2, 3" in result.reason


def test_a_candidate_that_does_not_move_again_backs_up_a_step_and_is_never_named():
    levels = step_at(4, 3)

    class Flaky(Exact):
        def __call__(self, lo: int, hi: int, look: int) -> Estimate:
            est = super().__call__(lo, hi, look)
            verifying = (lo, hi) == (2, 3) and sum(c[:2] == (2, 3) for c in self.calls) > 1
            return Estimate(0.0, self.se, 200.0, 200) if verifying else est

    measure = Flaky(levels)
    result = bisect(4, measure)
    assert result.verdict == "inconclusive"
    assert result.culprits == []
    assert "did not move again" in result.reason
    assert "backed up to commits 2..4" in result.reason
    backed = [s for s in result.steps if s.purpose == "back-up"]
    assert {(s.lo, s.hi) for s in backed} == {(2, 3), (3, 4)}
    assert [c[2] for c in measure.calls[-2:]] == [1, 1]  # the back-up starts with more pairs


def test_a_back_up_step_can_still_verify_the_culprit():
    levels = step_at(4, 3)

    class Once(Exact):
        """The first verification reads nothing (a stall of the host); later ones are right."""

        def __call__(self, lo: int, hi: int, look: int) -> Estimate:
            est = super().__call__(lo, hi, look)
            pair_calls = sum(c[:2] == (2, 3) for c in self.calls)
            return Estimate(0.0, self.se, 200.0, 200) if pair_calls == 2 else est

    result = bisect(4, Once(levels))
    assert result.verdict == "culprit", result.reason
    assert [c.index for c in result.culprits] == [3]
    assert any(s.purpose == "back-up" for s in result.steps)


def test_two_culprits_in_both_halves_each_get_their_share():
    levels = [0.0, 0.0, 0.1, 0.1, 0.1, 0.1, 0.25, 0.25, 0.25]
    result = bisect(8, Exact(levels))
    assert result.verdict == "culprit"
    assert [c.index for c in result.culprits] == [2, 6]
    shares = [c.explained for c in result.culprits]
    assert shares == pytest.approx([0.4, 0.6])


def test_a_move_spread_over_small_commits_is_inconclusive():
    levels = [0.02 * i for i in range(9)]  # +2 % each, +17 % in all
    result = bisect(8, Exact(levels, se=0.002))
    assert result.verdict == "inconclusive"
    assert "spread over several smaller changes" in result.reason


def test_undecided_comparisons_get_more_looks_then_stop():
    # a 6 % move read with a wide error: undecided at every look
    measure = Exact([0.0, math.log(1.06)], se=0.03)
    result = bisect(1, measure, Plan(looks=3))
    assert [c[2] for c in measure.calls] == [0, 1, 2]
    assert result.verdict == "not-reproducible"
    assert "at this precision" in result.reason


def test_a_broken_end_is_an_error_not_a_skip():
    with pytest.raises(UnmeasurableError):
        bisect(4, Exact(step_at(4, 2), broken={0: "the good side does not build"}))
    with pytest.raises(ValueError, match="at least one commit"):
        bisect(0, Exact([0.0]))


def test_the_search_is_bounded():
    # every commit +6 % with a tiny error: every half moves, the whole range is searched
    levels = [0.06 * i for i in range(65)]
    measure = Exact(levels, se=0.001)
    result = bisect(64, measure)
    assert len(result.steps) <= MAX_COMPARISONS
    assert result.verdict == "inconclusive"
