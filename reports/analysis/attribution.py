"""Machine or code: what a timing's move is judged against (DESIGN §6, "Machine or code").

A move shared by many benchmarks is the code's unless something that is not the code moved with
it. Per machine, on the log scale, for every timed metric (`metrics.is_timed_metric`), the
reading order of "why did this timing fail":

1. `timing_model`: with host probes, the timing's **own loadings on every probe kind**, fitted
   over the baseline and shrunk toward its metric group's, at the probe levels **of its own
   window**: what the host predicts for it, with every error propagated (the move beyond the
   prediction and its variance, `Fit.judge`).
2. `evidence`: how the move is attributed. With the probes and a fit: the move beyond the
   prediction; a kind that moved beyond its usual spread also keeps the move with its part
   given back to the code. Without a fit: the best probe's run effect taken out, or each kind
   credited up to its gain's upper end when the host moved. Without probes: the raw move, and
   the move beyond the suite's common move when that is named (`shift`). Re-runs pooled with
   the state they share (`rerun_rho`).
3. `groups`: the whole suite and each primary metric as one move, its variance measured from
   the baseline's group-mean residuals.
4. `decision`: each attribution decided at once: FAIL only when every attribution clears the
   threshold, PASS only when every interval lies below it, improved only when all clear its
   mirror; otherwise inconclusive, and `attributed` (here, `mark_attributed`) when they
   disagree (machine or code). So a suite moving with steady probes is the code's, a host move
   beyond its usual spread is never a verdict on the code, and nothing is called improved
   because others got slower.

This module ties them together per machine (`attribute`) and says why (`reason`).

Deliberately not here: the threshold rule (`decision`), the probes' arithmetic (`probes`), Holm
and the lean (`judge`, `lean`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from reports.analysis.decision import interval
from reports.analysis.evidence import Mode, make_context, with_evidence
from reports.analysis.groups import SUITE, group_verdicts, trimmed_mean
from reports.analysis.probes import HostEvidence
from reports.analysis.series import AnalysisConfig, Verdict
from reports.analysis.shift import SuiteShift

__all__ = [
    "SUITE",
    "Attribution",
    "attribute",
    "by_machine",
    "mark_attributed",
    "reason",
    "trimmed_mean",
]


@dataclass(frozen=True)
class Attribution:
    """One machine's machine-or-code evidence (module docstring).

    `common`: the suite's common move; `host`: the probes' evidence (None: no probe records in
    the current run); `mode`: what the attributions used; `run_term`, `run_df`: the current run's
    effect's variance and its degrees of freedom; `rho`: the re-runs' shared state; `groups`:
    the group verdicts, decided with the suite (`judge`).
    """

    machine_id: str
    common: SuiteShift | None
    host: HostEvidence | None
    mode: Mode
    run_term: float
    run_df: float
    rho: float
    groups: tuple[Verdict, ...] = ()
    host_named: bool = False
    banded: bool = False

    @property
    def named(self) -> bool:
        """True when the move the attributions credit is beyond its own noise: the probes'
        (some kind beyond its interval at the gate's level), else the suite's common move."""
        if self.mode == "probes":
            return self.host_named
        return self.mode == "common"

    @property
    def probes_used(self) -> bool:
        """True when the timings were judged for every attribution of the probes' move."""
        return self.mode == "probes" and self.banded

    @property
    def suite(self) -> Verdict | None:
        """The whole suite's group verdict."""
        return next((g for g in self.groups if g.fullname == SUITE), None)

    @property
    def undecided_by_attribution(self) -> bool:
        """True when a group move is undecided because the machine and the code disagree."""
        return any(g.attributed for g in self.groups)


def attribute(
    verdicts: Sequence[Verdict],
    timed: Sequence[bool],
    host: HostEvidence | None,
    config: AnalysisConfig,
) -> tuple[list[Verdict], Attribution, list[Verdict]]:
    """One machine's provisional verdicts with their evidence set for machine or code, its
    `Attribution` (groups not yet decided) and the provisional group verdicts.

    `timed[i]` says whether verdict i is a timed metric (seconds: the run effect moves it).
    """
    noisy = [v for v, t in zip(verdicts, timed, strict=True) if t and v.parts is not None]
    ctx = make_context(noisy, host, config)
    out = [with_evidence(v, ctx, t) for v, t in zip(verdicts, timed, strict=True)]
    machine = verdicts[0].machine_id if verdicts else ""
    raw = [v.log_ratio or 0.0 for v, t in zip(verdicts, timed, strict=True) if t]
    groups = group_verdicts([v for v, t in zip(out, timed, strict=True) if t], ctx, raw)
    found = Attribution(
        machine,
        ctx.common,
        host,
        ctx.mode,
        ctx.run_term,
        ctx.run_df,
        ctx.rho,
        host_named=ctx.host_named,
        banded=ctx.banded,
    )
    return out, found, groups


def mark_attributed(v: Verdict, ci_level: float, attribution: Attribution) -> Verdict:
    """An inconclusive verdict whose attributions disagree about the threshold (one's interval
    below it and another's not, or one's above it and another's not, or the mirror for a
    speed-up) is `attributed`, with the reason, when the move they credit is named."""
    if v.verdict != "inconclusive" or not v.alternatives or v.log_ratio is None or not v.se:
        return v
    if not attribution.named:
        return v
    limit = 1.0 + v.threshold
    ends = [
        interval(d, se, v.df or math.inf, ci_level)
        for d, se in ((v.log_ratio, v.se), *v.alternatives)
    ]
    # a side on which some attribution's interval decides and another's does not: below the
    # threshold (pass), above it (a slowdown), below its mirror (a speed-up)
    sides = (
        [hi < limit for _, hi in ends],
        [lo > limit for lo, _ in ends],
        [hi < 1.0 / limit for _, hi in ends],
    )
    if not any(any(side) and not all(side) for side in sides):
        return v
    note = "; ".join(n for n in (v.note, reason(attribution)) if n)
    return replace(v, attributed=True, note=note)


def reason(attribution: Attribution) -> str:
    """Why a verdict depends on who moved: the probes' ratio, or no probe."""
    if attribution.mode == "probes" and attribution.host is not None:
        return f"machine or code: the host probes moved {attribution.host.text()}"
    common = attribution.common
    moved = f" (the suite moved \u00d7{common.ratio:.2f} together)" if common else ""
    return f"machine or code: no host probe{moved}; an A/B run (nox -s ab) shares the host"


def by_machine(items: Sequence[Verdict]) -> Mapping[str, list[int]]:
    """Indices of `items` per machine, in order."""
    out: dict[str, list[int]] = {}
    for i, v in enumerate(items):
        out.setdefault(v.machine_id, []).append(i)
    return out
