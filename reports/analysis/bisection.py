"""Which commit made a timing slower: bisection by paired comparisons (issue 52, docs/bisect.md).

Commits are indexed 0..n along the first-parent line: 0 the good end, n the bad one. The only
source of numbers is `Measure(lo, hi, look)`: commit `lo` (base) against commit `hi` (head) in
interleaved pairs on one machine, as A/B mode runs them, returning the paired `Estimate` of
log(hi / lo) (positive = hi slower); `look` 0, 1, 2... asks for more pairs each time (the
driver doubles them). Two numbers taken in different minutes are never compared: every
decision reads one paired estimate.

Each estimate is read one way of three (`read`):
- `moved`: H0 "ratio <= 1 + threshold" rejected at `Plan.alpha_each` (`decision.p_fail`) - a
  slowdown beyond it;
- `flat`: H0 "ratio >= 1 + threshold" rejected at `FLAT_ALPHA` - no slowdown beyond it. A wrong
  `flat` can only drop a culprit, never name a wrong one (the other half must still move, and
  what is named is verified and must explain the move), so it is read at a plain 5 %: at the
  strict level the between-process term alone (`BISECT_PROCESS_CV`) would keep every unchanged
  half undecided, look after look;
- `undecided`: neither; measured again at the next look, up to `Plan.looks`. A look is a
  fresh run (the driver also doubles its pairs), and the looks of one comparison are pooled
  (`pooled`): the between-process term shrinks with more runs, not with more pairs. Bonferroni
  over the looks (below) holds whatever the looks' dependence.

The search (`bisect`):
1. **Reproduce** 0 vs n. Not `moved` -> `not-reproducible`, no culprit named.
2. **Split** a range (lo, hi) that moved at its middle m and measure both halves, (lo, m) and
   (m, hi) (the three arms of issue 52 as two paired comparisons sharing m). A half that moved
   is searched; one that is flat is dropped; both moved -> more than one culprit, both searched;
   neither moved after every look -> the move is spread over commits each below the threshold
   (or lost in the noise) and that range ends `inconclusive`.
3. **Verify** a range of one commit (its parent lo, the candidate hi) with fresh pairs: it must
   move again. Its share of the good->bad move is `explained` (log-ratio over log-ratio). One
   that does not (after every look) **backs up a step**: the range it was narrowed from is
   searched again from the second look on (twice the pairs); a candidate that fails after the
   back-up too ends `inconclusive`, never named.
4. A commit that cannot be built or run (`UnmeasurableError`) is skipped like `git bisect skip`:
   the nearest measurable commit to the middle is used instead; a range whose inner commits
   are all skipped ends `inconclusive` naming them.

The verdict: `culprit` when every range that moved ended in a verified commit and together
they explain at least `MIN_EXPLAINED` of the good->bad move (a half beside a moved one that
stayed undecided may hold a smaller second culprit: the share is what rules it out);
`not-reproducible` when step 1 did not move; otherwise `inconclusive`, with what was found and
what is open.

Error budget: at most `looks` readings of `2 + 2 * ceil(log2 n) + 3` comparisons lie on the path
to one culprit (reproduce, two halves per level, verify, and a back-up's two halves and
verification); each is read at `alpha / (looks * (5 + 2 * ceil(log2 n)))`, so the chance that a
wrong reading on that path names a wrong commit is at most `alpha` (Bonferroni over the path; a
second culprit's path has its own budget). `tests/reports/analysis/test_bisection.py` checks the
realised rates on simulated ranges with this host's paired noise.

Deliberately not here: running the comparisons (`benchmarks.bisect`), git, files.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from reports.analysis.decision import p_fail
from reports.analysis.distributions import t_ppf
from reports.analysis.paired import correlated_estimate

Reading = Literal["moved", "flat", "undecided"]
Purpose = Literal["reproduce", "split", "verify", "back-up"]
Verdict = Literal["culprit", "not-reproducible", "inconclusive"]

#: The culprits named must explain at least this share of the good->bad move together, or the
#: range holds more than they account for (changes below the threshold, or one missed): one of
#: two equal culprits explains ~50 %, the only one ~100 % (+-17 % here: two paired estimates
#: with a 2 % between-process term each, of a +20 % move).
MIN_EXPLAINED = 0.75
#: The between-process term every comparison carries at least: two A/B runs of identical sides
#: on this 2-core VM read x0.960 and x0.978 with intervals that excluded 1 (docs/bisect.md), so
#: the pinned A/B default of 0 would let a process's own state pass for a commit's move.
BISECT_PROCESS_CV = 0.02
#: The readings a back-up step adds to a culprit's path: both halves again and the verification.
BACK_UP_READINGS = 3
#: The one-sided 95 % normal quantile the explained share is read with.
EXPLAINED_Z = 1.645
#: The level of a `flat` reading (module docstring).
FLAT_ALPHA = 0.05
#: The most comparisons one search makes (a guard: 64 commits with two culprits need ~30).
MAX_COMPARISONS = 60


@dataclass(frozen=True)
class Estimate:
    """A paired estimate of log(head / base): its value, standard error, degrees of freedom
    and how many pairs made it."""

    log_ratio: float
    se: float
    df: float
    pairs: int

    @property
    def ratio(self) -> float:
        """head / base."""
        return math.exp(self.log_ratio)


def estimate_from_pairs(diffs: Sequence[float], process_cv: float = BISECT_PROCESS_CV) -> Estimate:
    """The A/B report's estimate of one timing from its pairs' log-ratios: Yuen's trimmed mean,
    its error inflated for neighbouring pairs' correlation, with the between-process term
    `process_cv` (`BISECT_PROCESS_CV`, or the A/B run's own where that is larger)."""
    evidence = correlated_estimate(diffs).evidence(0.0, process_cv)
    return Estimate(evidence.log_ratio, evidence.se, evidence.df, len(diffs))


class UnmeasurableError(Exception):
    """Commit `index` cannot be built or run (a broken dependency spec, a failing cell)."""

    def __init__(self, index: int, why: str) -> None:
        super().__init__(f"commit {index}: {why}")
        self.index = index
        self.why = why


Measure = Callable[[int, int, int], Estimate]
"""(lo, hi, look) -> the paired estimate of log(commit hi / commit lo), or UnmeasurableError."""


@dataclass(frozen=True)
class Plan:
    """The rule's settings: the practical threshold (a fraction), the error budget of one
    culprit's path and how many looks an undecided comparison gets."""

    threshold: float = 0.05
    alpha: float = 0.05
    looks: int = 3

    def alpha_each(self, commits: int) -> float:
        """The level each reading is taken at, for a range of `commits` commits (module doc)."""
        return self.alpha / (self.looks * (path_comparisons(commits) + BACK_UP_READINGS))


def levels_of(commits: int) -> int:
    """How many times a range of `commits` commits is halved down to one: ceil(log2 n)."""
    return max(1, (commits - 1).bit_length())


def path_comparisons(commits: int) -> int:
    """The comparisons on one culprit's path without a back-up: reproduce, two halves per
    level, verify."""
    return 2 + 2 * levels_of(commits)


def pooled(estimates: Sequence[Estimate]) -> Estimate:
    """Independent estimates of one comparison, inverse-variance weighted (df: Welch's)."""
    if len(estimates) == 1 or any(e.se == 0 for e in estimates):
        return estimates[-1]
    weights = [1.0 / e.se**2 for e in estimates]
    total = sum(weights)
    log_ratio = sum(w * e.log_ratio for w, e in zip(weights, estimates, strict=True)) / total
    # Welch-Satterthwaite: each part of the pooled variance is w_i / total^2
    parts = sum((w / total**2) ** 2 / e.df for w, e in zip(weights, estimates, strict=True))
    df = (1.0 / total) ** 2 / parts
    return Estimate(log_ratio, math.sqrt(1.0 / total), df, sum(e.pairs for e in estimates))


def read(est: Estimate, threshold: float, alpha: float, flat_alpha: float = FLAT_ALPHA) -> Reading:
    """`moved` at level `alpha`, `flat` at `flat_alpha`, or `undecided` (module docstring)."""
    if p_fail(est.log_ratio, est.se, est.df, threshold) <= alpha:
        return "moved"
    limit = math.log1p(threshold)
    if est.se == 0:
        return "flat" if est.log_ratio < limit else "undecided"
    upper = est.log_ratio + t_ppf(1.0 - flat_alpha, est.df) * est.se
    return "flat" if upper < limit else "undecided"


@dataclass(frozen=True)
class Step:
    """One comparison: the arms (commit indices), why it was made, each look's estimate and
    the final reading."""

    lo: int
    hi: int
    purpose: Purpose
    looks: tuple[Estimate, ...]
    reading: Reading

    @property
    def estimate(self) -> Estimate:
        """Every look's estimate pooled (the one the reading is of)."""
        return pooled(self.looks)


@dataclass(frozen=True)
class Culprit:
    """A verified commit: its index, its parent's, the pooled estimate of every reading of it
    against its parent, and its share of the good->bad move on the log scale with that share's
    standard error."""

    index: int
    parent: int
    estimate: Estimate
    explained: float
    explained_se: float = 0.0


@dataclass
class Result:
    """The search's outcome (module docstring): verdict, why, culprits, steps, the commits it
    skipped (index -> why), the ranges it left open (lo, hi, why), the halves beside a moved
    one that it could not tell from the threshold (lo, hi), and what it did on the way that a
    reader should know (a back-up step)."""

    verdict: Verdict
    reason: str
    alpha_each: float
    culprits: list[Culprit] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)
    open_ranges: list[tuple[int, int, str]] = field(default_factory=list)
    undecided: list[tuple[int, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> Estimate | None:
        """The reproduction's estimate of the good->bad move."""
        first = self.steps[0] if self.steps else None
        return first.estimate if first is not None and first.purpose == "reproduce" else None


class _Search:
    def __init__(self, commits: int, measure: Measure, plan: Plan) -> None:
        self.n = commits
        self.measure = measure
        self.plan = plan
        self.alpha = plan.alpha_each(commits)
        self.result = Result("inconclusive", "", self.alpha)

    def compare(self, lo: int, hi: int, purpose: Purpose, first_look: int = 0) -> Step:
        """Measure lo vs hi, look after look (from `first_look`: a back-up starts with more
        pairs), until the reading is decided or the looks run out; UnmeasurableError propagates
        (the caller skips the commit)."""
        if len(self.result.steps) >= MAX_COMPARISONS:
            raise _ExhaustedError
        looks: list[Estimate] = []
        reading: Reading = "undecided"
        for look in range(first_look, first_look + self.plan.looks):
            looks.append(self.measure(lo, hi, look))
            reading = read(pooled(looks), self.plan.threshold, self.alpha)
            if reading != "undecided":
                break
        step = Step(lo, hi, purpose, tuple(looks), reading)
        self.result.steps.append(step)
        return step

    def middle(self, lo: int, hi: int) -> int | None:
        """The measurable commit strictly inside (lo, hi) nearest to its middle, or None."""
        inner = [i for i in range(lo + 1, hi) if i not in self.result.skipped]
        centre = (lo + hi) / 2
        return min(inner, key=lambda i: (abs(i - centre), i)) if inner else None

    def search(self, lo: int, hi: int, total: Estimate, backing: bool = False) -> None:
        """Find the culprits of the range (lo, hi), known to have moved. `backing`: this is the
        one step backed up to after a candidate did not move again (more pairs, no second
        back-up)."""
        before: tuple[int, int] | None = None  # the range this one was narrowed from
        split: Purpose = "back-up" if backing else "split"
        first = 1 if backing else 0
        while True:
            if hi - lo == 1:
                why = self.verify(lo, hi, total)
                if why and before is not None and not backing:
                    self.result.notes.append(
                        f"commit {hi} did not move again on fresh pairs ({why}): backed up "
                        f"to commits {before[0]}..{before[1]} with more pairs"
                    )
                    self.search(*before, total, backing=True)
                elif why:
                    self.open(lo, hi, f"the candidate did not move again on fresh pairs ({why})")
                return
            mid = self.middle(lo, hi)
            if mid is None:
                names = ", ".join(str(i) for i in range(lo + 1, hi))
                self.open(lo, hi, f"the change lies among skipped commits {names}")
                return
            try:
                left = self.compare(lo, mid, split, first)
                right = self.compare(mid, hi, split, first)
            except UnmeasurableError as broken:
                if broken.index in (lo, hi) or broken.index in self.result.skipped:
                    # measured before: a failure now is the commit's flakiness, not a skip
                    self.open(lo, hi, f"commit {broken.index} failed this time: {broken.why}")
                    return
                self.result.skipped[broken.index] = broken.why
                continue
            halves = (((lo, mid), left), ((mid, hi), right))
            moved = [span for span, s in halves if s.reading == "moved"]
            if not moved:
                undecided = left.reading == "undecided" or right.reading == "undecided"
                why = (
                    "no half moved beyond the threshold, and one could not be told from it"
                    if undecided
                    else "neither half moved beyond the threshold: the move is spread over "
                    "several smaller changes"
                )
                self.open(lo, hi, why)
                return
            # a half that could not be told from the threshold may hold a smaller second
            # culprit: the verdict then rests on what the named commits explain
            self.result.undecided += [span for span, s in halves if s.reading == "undecided"]
            for a, b in moved[1:]:
                self.search(a, b, total, backing)
            before = (lo, hi)
            lo, hi = moved[0]

    def verify(self, parent: int, index: int, total: Estimate) -> str:
        """Fresh pairs of the candidate against its parent; it must move again. "" when it did
        (the culprit is recorded), else why not."""
        try:
            step = self.compare(parent, index, "verify")
        except UnmeasurableError as broken:
            return f"commit {broken.index} failed this time: {broken.why}"
        if step.reading != "moved":
            return step.reading
        # every reading of this very pair (the split that found it, the verification) together
        seen = [s.estimate for s in self.result.steps if (s.lo, s.hi) == (parent, index)]
        both = pooled(seen)
        share = both.log_ratio / total.log_ratio
        # the share's error by the delta method (a ratio of two independent estimates)
        share_se = math.sqrt(both.se**2 + share**2 * total.se**2) / total.log_ratio
        if all(c.index != index for c in self.result.culprits):  # a back-up may verify it again
            self.result.culprits.append(Culprit(index, parent, both, share, share_se))
        return ""

    def open(self, lo: int, hi: int, why: str) -> None:
        self.result.open_ranges.append((lo, hi, why))


class _ExhaustedError(Exception):
    """MAX_COMPARISONS reached."""


def bisect(commits: int, measure: Measure, plan: Plan | None = None) -> Result:
    """Search the range of `commits` commits after the good one (indices 0..commits; module
    docstring). UnmeasurableError for the good or the bad end propagates: there is no range."""
    if commits < 1:
        raise ValueError(f"a range needs at least one commit after the good one, got {commits}")
    search = _Search(commits, measure, plan or Plan())
    result = search.result
    reproduce = search.compare(0, commits, "reproduce")
    total = reproduce.estimate
    if reproduce.reading != "moved":
        result.verdict = "not-reproducible"
        result.reason = f"good vs bad: \u00d7{total.ratio:.3f}, " + (
            "no slowdown beyond the threshold"
            if reproduce.reading == "flat"
            else "not beyond the threshold at this precision"
        )
        return result
    try:
        search.search(0, commits, total)
    except _ExhaustedError:
        search.open(0, commits, f"stopped after {MAX_COMPARISONS} comparisons")
    result.culprits.sort(key=lambda c: c.index)
    explained = sum(c.explained for c in result.culprits)
    # the share must not lie credibly below MIN_EXPLAINED (its one-sided 95 % upper end)
    spread = math.sqrt(sum(c.explained_se**2 for c in result.culprits))
    enough = explained + EXPLAINED_Z * spread >= MIN_EXPLAINED
    if result.culprits and not result.open_ranges and enough:
        result.verdict = "culprit"
        result.reason = (
            f"{len(result.culprits)} commit(s) verified, explaining {explained:.0%} of "
            f"\u00d7{total.ratio:.3f}"
        )
    elif result.culprits and not result.open_ranges:
        unsure = "".join(f"; commits {lo}..{hi} could not be told" for lo, hi in result.undecided)
        result.reason = (
            f"the verified commit(s) explain only {explained:.0%} of \u00d7{total.ratio:.3f}: "
            f"the range holds more than they account for{unsure}"
        )
    else:
        found = f"{len(result.culprits)} verified; " if result.culprits else ""
        result.reason = found + "; ".join(
            [f"commits {lo}..{hi}: {why}" for lo, hi, why in result.open_ranges] + result.notes
        )
    return result
