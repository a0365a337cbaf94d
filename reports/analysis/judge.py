"""The suite's judgement: every verdict, machine or code per machine, and the lean test.

`judge(series, config, hosts)` is what the report and the gate use; `judge_suite` returns its
verdicts alone. Per machine:

1. Each series gets its provisional evidence (`series.judge_noisy`, `exact.judge_exact`) with
   the pieces of its variance (`series.Parts`).
2. Machine or code (`attribution.attribute`): the current run's own effect is var_e, or what
   the host probes (`hosts`, `probes.HostEvidence`) leave unexplained; pooled re-runs carry it
   by how much they share a state; each timed metric gets the attributions it must hold under
   (the probes' move credited, or, without probes, the suite's named common move); the whole
   suite and each primary metric become group moves judged the same way.
3. Holm over every noisy metric of the suite and every group move (`series.apply_holm`); an
   undecided verdict whose attributions disagree is marked (`attribution.mark_attributed`).
4. The lean test (`lean.lean_test`), calibrated by leave-one-run-out over the baseline.

Nothing is re-centred on a common move without evidence: a suite-wide move with steady probes
is the code's (its group move fails), a host move is never the code's, and without probes a
move shared by the suite is "machine or code" (`outcome` "shift").

Deliberately not here: the noise model, the threshold rule, files and formatting.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from reports.analysis.attribution import (
    Attribution,
    attribute,
    by_machine,
    mark_attributed,
)
from reports.analysis.exact import judge_exact
from reports.analysis.groups import SUITE
from reports.analysis.lean import LEAN_ALPHA, LEAN_LIST_P, Lean, lean_test, leans, run_table
from reports.analysis.metrics import is_timed_metric
from reports.analysis.priors import group_priors, suite_prior
from reports.analysis.probes import HostEvidence
from reports.analysis.series import (
    AnalysisConfig,
    MetricSeries,
    Verdict,
    apply_holm,
    judge_noisy,
)
from reports.analysis.tails import tail_dfs

__all__ = [
    "LEAN_ALPHA",
    "LEAN_LIST_P",
    "Attribution",
    "Lean",
    "SuiteJudgement",
    "Undecided",
    "leans",
    "undecided",
]

Outcome = Literal["fail", "shift", "lean", "undecided", "pass"]


#: A PASS needs more than this share of the compared primary timings decided (pass, fail or
#: improved): a headline that reads the memory peaks' passes while the timings said nothing
#: claimed what the data did not support (issue 51).
DECIDED_SHARE = 0.5


@dataclass(frozen=True)
class Undecided:
    """The compared primary timings, how many stayed undecided, and their median MDE."""

    compared: int
    undecided: int
    median_mde: float | None
    #: without a compared timing: whether every other noisy verdict stayed undecided
    others_all: bool = False

    @property
    def mostly(self) -> bool:
        """True when no more than `DECIDED_SHARE` of the compared timings were decided (with
        none compared: when every noisy verdict stayed undecided)."""
        if self.compared == 0:
            return self.others_all
        return self.compared - self.undecided <= DECIDED_SHARE * self.compared

    def text(self, threshold: float) -> str:
        """ "3 of 4 timings undecided (median MDE 23 %, against a 5 % threshold)" """
        if self.compared == 0:
            return "nothing could be decided, every noisy metric straddles the threshold"
        mde = "" if self.median_mde is None else f"median MDE {self.median_mde:.0%}, against "
        return (
            f"{self.undecided} of {self.compared} timings undecided ({mde}a {threshold:.0%} "
            "threshold)"
        )


def undecided(verdicts: Sequence[Verdict]) -> Undecided:
    """The primary timings (`kind` "timing", not the scalar timings or memory peaks) that were
    compared, and those left `inconclusive`."""
    timings = [v for v in verdicts if v.compared and v.kind == "timing" and v.verdict != "missing"]
    if not timings:
        noisy = [v for v in verdicts if v.compared and v.kind != "exact"]
        left = [v for v in noisy if v.verdict == "inconclusive"]
        return Undecided(0, 0, None, bool(noisy) and len(left) == len(noisy))
    left = [v for v in timings if v.verdict == "inconclusive"]
    mdes = [v.mde for v in left if v.mde is not None]
    return Undecided(len(timings), len(left), statistics.median(mdes) if mdes else None)


@dataclass(frozen=True)
class SuiteJudgement:
    """Verdicts (input order) plus, per machine, machine or code and the lean test."""

    verdicts: tuple[Verdict, ...]
    shifts: dict[str, Attribution]
    leans: dict[str, Lean]

    def outcome(self, threshold: float) -> Outcome:
        """What the headline says of a quiet run (`reports.render.headline`, in its order):
        a fail or missing metric, or a group move that fails; a move that cannot be told
        machine or code (a verdict or group move undecided by its attributions); a lean;
        most primary timings undecided (`undecided`); else pass. `threshold` is kept for
        callers (the rule is per verdict)."""
        del threshold
        groups = [g for a in self.shifts.values() for g in a.groups]
        if any(v.verdict in ("fail", "missing") for v in (*self.verdicts, *groups)):
            return "fail"
        if any(v.attributed for v in (*self.verdicts, *groups)):
            return "shift"
        if any(lean.rejected for lean in self.leans.values()):
            return "lean"
        return "undecided" if undecided(self.verdicts).mostly else "pass"


def judge(
    series: Sequence[MetricSeries],
    config: AnalysisConfig,
    hosts: Mapping[str, HostEvidence | None] | None = None,
) -> SuiteJudgement:
    """The suite's judgement (module docstring); `hosts` holds each machine's probe evidence
    (absent or None: the history has no probe records)."""
    priors = suite_prior(series, config)
    groups_of = group_priors(series, config)
    provisional = [
        judge_exact(s, config)
        if s.kind == "exact"
        else judge_noisy(
            s, config, priors.get(s.machine_id), groups_of.get((s.machine_id, s.metric))
        )
        for s in series
    ]
    timed = [is_timed_metric(v.metric, v.kind) for v in provisional]
    nu = _tails(series)
    provisional = [
        replace(v, tails=nu.get(v.machine_id, (math.inf, math.inf))) if t and v.parts else v
        for v, t in zip(provisional, timed, strict=True)
    ]
    adjusted = list(provisional)
    found: dict[str, Attribution] = {}
    groups: list[Verdict] = []
    for machine, idx in by_machine(provisional).items():
        out, attribution, machine_groups = attribute(
            [provisional[i] for i in idx],
            [timed[i] for i in idx],
            (hosts or {}).get(machine),
            config,
        )
        for i, v in zip(idx, out, strict=True):
            adjusted[i] = v
        found[machine] = attribution
        groups += machine_groups
    groups = _weighted(groups, sum(v.se is not None and v.log_ratio is not None for v in adjusted))
    decided = apply_holm([*adjusted, *groups], config)
    verdicts = [
        mark_attributed(v, config.ci_level, found[v.machine_id]) for v in decided[: len(adjusted)]
    ]
    for machine, idx in by_machine(decided[len(adjusted) :]).items():
        mine = [decided[len(adjusted) + i] for i in idx]
        found[machine] = replace(
            found[machine],
            groups=tuple(mark_attributed(g, config.ci_level, found[machine]) for g in mine),
        )
    pairs_by_machine: dict[str, list[tuple[Verdict, MetricSeries]]] = {}
    for v, s in zip(verdicts, series, strict=True):
        pairs_by_machine.setdefault(v.machine_id, []).append((v, s))
    leans_found = {
        machine: lean_test(machine, pairs, _pool_factor(pairs, found[machine].rho))
        for machine, pairs in pairs_by_machine.items()
    }
    return SuiteJudgement(tuple(verdicts), found, leans_found)


def _weighted(groups: Sequence[Verdict], noisy: int) -> list[Verdict]:
    """The group moves' Holm weights: together as much as the `noisy` verdicts together, half
    of it the whole suite's (the question a suite-wide regression asks), half the others'."""
    total = float(max(noisy, 1))
    others = sum(g.fullname != SUITE for g in groups)
    suite = len(groups) - others
    suite_share = (total / 2 if others else total) if suite else 0.0
    rest = (total - suite_share) / others if others else 0.0
    return [replace(g, holm_weight=suite_share if g.fullname == SUITE else rest) for g in groups]


def _tails(series: Sequence[MetricSeries]) -> dict[str, tuple[float, float]]:
    """Each machine's (slow, fast) t degrees of freedom from its primary timings' baseline
    residuals (`tails.tail_dfs`)."""
    out = {}
    for machine in dict.fromkeys(s.machine_id for s in series):
        rows, _ = run_table([s for s in series if s.machine_id == machine and s.kind == "timing"])
        out[machine] = tail_dfs(list(zip(*rows, strict=True))) if rows else (math.inf, math.inf)
    return out


def _pool_factor(pairs: Sequence[tuple[Verdict, MetricSeries]], rho: float) -> float:
    repeats = max((1 + len(s.current_repeats) for _, s in pairs if s.current), default=1)
    return rho + (1.0 - rho) / repeats


def judge_suite(
    series: Sequence[MetricSeries],
    config: AnalysisConfig,
    hosts: Mapping[str, HostEvidence | None] | None = None,
) -> list[Verdict]:
    """The verdicts of `judge`, in the input order."""
    return list(judge(series, config, hosts).verdicts)
