"""The headline: one status and the sentence that says why, and the lines a human must look at.

The status claims only what the verdicts support (DESIGN §7's statuses):

- `error`: nothing could be judged, or an unreadable file may be the current run.
- `fail`: a verdict is `fail` or `missing` (a cell that did not run is not a pass).
- `no-baseline`: nothing was compared.
- `fail` too when a machine's group move (the whole suite, or every timing of one metric) fails
  (`attribution`: the probes held, or moved less than the timings: the code's).
- `inconclusive` (exit 3 at the gate), never PASS, when: a machine's run was busy; a timing or
  group move is undecided because the machine and the code disagree (`Verdict.attributed`:
  the host probes moved, or without probes the suite moved together: machine or code); its
  timings lean to a slowdown (`judge.Lean.rejected`); or most primary timings are undecided
  (`judge.undecided`: the memory peaks' and scalars' passes do not make a PASS), named with
  their count and median MDE. The reason names the causes.
- `pass` otherwise; a named move below the threshold and implausible changes are said.

Quantized cells outside their accuracy bound (`reports.analysis.accuracy`) are said on every
status but `error`, and decide none: a finding for a human, like an implausible change.

Deliberately not here: the statistics (`reports.analysis`), assembling the report
(`reports.render.report`), formatting beyond one sentence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from reports.analysis.accuracy import Accuracy
from reports.analysis.flags import DriftRow, implausible_text
from reports.analysis.judge import Attribution, Lean, undecided
from reports.analysis.series import Verdict, VerdictName
from reports.render.changes import change_text

Status = Literal["fail", "pass", "inconclusive", "no-baseline", "error"]


@dataclass(frozen=True)
class EarlierRun:
    """An earlier run of the current commit pooled with it, and what it said alone."""

    datetime: str
    outcome: str  # `SuiteJudgement.outcome`: fail, shift, lean, undecided, pass
    fails: int

    @property
    def text(self) -> str:
        """ "2026-12-01 12:00 FAIL (3 fails)" """
        word = {"fail": "FAIL", "pass": "PASS"}.get(self.outcome, "INCONCLUSIVE")
        return f"{self.datetime[:16].replace('T', ' ')} {word}" + (
            f" ({self.fails} fails)" if self.fails else ""
        )


class MachineReport(Protocol):
    """What the headline reads of `reports.render.report.MachineReport` (which imports this
    module, so the type is named by its shape)."""

    @property
    def machine_id(self) -> str: ...
    @property
    def busy_text(self) -> str: ...
    @property
    def shift(self) -> Attribution | None: ...
    @property
    def lean(self) -> Lean | None: ...
    @property
    def earlier(self) -> tuple[EarlierRun, ...]: ...
    @property
    def drifts(self) -> tuple[DriftRow, ...]: ...
    @property
    def suite_drift(self) -> float | None: ...
    @property
    def stack_change_text(self) -> str: ...
    @property
    def implausible(self) -> list[Verdict]: ...
    @property
    def accuracy_flags(self) -> tuple[Accuracy, ...]: ...
    @property
    def verdicts(self) -> tuple[Verdict, ...]: ...


#: Leaning timings named in the headline (the rest: "and N more"; all in the report's table).
LEAN_NAMED = 3


def shift_text(machine_id: str, shift: Attribution) -> str:
    """What moved on the machine and how its timings were judged: the probes' ratios (the
    host), the suite's common move, and each group move that failed or stayed undecided."""
    parts = []
    if shift.mode == "probes" and shift.host is not None:
        how = (
            "moved"
            if shift.host_named
            else ("read" if shift.banded else "held within their usual spread")
        )
        parts.append(f"the host probes on {machine_id} {how}: {shift.host.text()}")
    common = shift.common
    if common is not None:
        parts.append(
            f"the suite's timings moved {change_text(common.ratio)} together (interval "
            f"{change_text(common.ci_low)} … {change_text(common.ci_high)}; a whole run strays "
            f"±{common.run_effect_var**0.5:.1%} here)"
        )
    for g in shift.groups:
        if g.verdict == "fail":
            parts.append(f"{g.fullname} {change_text(g.ratio or 1.0)}: FAIL, the code's")
        elif g.attributed:
            parts.append(f"{g.fullname} {change_text(g.ratio or 1.0)}: machine or code")
    if shift.probes_used:
        parts.append(
            "a timing is judged against the probes' move only as far as they measured it "
            "(FAIL beyond it, PASS only when its raw move is below the threshold)"
        )
    elif shift.mode == "common":
        parts.append(
            "no host probe tells the machine from the code: a timing that moved with the suite "
            "is inconclusive; confirm with an A/B run (nox -s ab)"
        )
    return "; ".join(parts)


def shift_said(shift: Attribution | None) -> bool:
    """Whether the SHIFT line is shown: the host or the suite moved beyond its spread, or a
    group move failed or stayed undecided by who moved."""
    if shift is None:
        return False
    groups = any(g.verdict == "fail" or g.attributed for g in shift.groups)
    return shift.named or shift.probes_used or groups


def lean_text(lean: Lean, names: int = LEAN_NAMED) -> str:
    """The undecided timings that lean to a slowdown, the largest lean first (`names` of them,
    by their test name: the headline names one, the gate's LEAN line three)."""
    named = [
        f"{v.fullname.split('::')[-1]} {v.metric} {change_text(v.ratio or 1.0)} "
        f"(up to {change_text(v.ci_high or 1.0)})"
        for v in lean.leaning[:names]
    ]
    more = len(lean.leaning) - len(named)
    listed = ", ".join(named) + (f" and {more} more" if more > 0 else "")
    head = (
        f"{len(lean.leaning)} undecided timing{'s' if len(lean.leaning) != 1 else ''} on "
        f"{lean.machine_id} lean{'s' if len(lean.leaning) == 1 else ''} to a slowdown"
        if lean.leaning
        else f"the undecided timings on {lean.machine_id} lean to a slowdown together"
    )
    return f"{head} (suite test p = {lean.p_value:.2g}){': ' + listed if listed else ''}"


def earlier_text(machine: MachineReport) -> str:
    """ "judged with this commit's 2 earlier run(s): 2026-12-01 12:00 FAIL (3 fails), ..." """
    runs = ", ".join(r.text for r in machine.earlier)
    return f"judged with this commit's {len(machine.earlier)} earlier run(s) ({runs})"


def attention_lines(machine: MachineReport) -> list[str]:
    """BUSY, SHIFT, PROBES, LEAN, POOLED, IMPLAUSIBLE, ACCURACY and DRIFT lines of one machine:
    what a human must see."""
    lines = []
    if machine.busy_text:
        lines.append(f"BUSY {machine.machine_id}: {machine.busy_text}: not judged as quiet")
    if machine.shift is not None and shift_said(machine.shift):
        lines.append(f"SHIFT {shift_text(machine.machine_id, machine.shift)}")
    host = machine.shift.host if machine.shift is not None else None
    if host is not None and not host.usable:
        lines.append(
            f"PROBES {machine.machine_id}: the current run's host probes are no evidence yet "
            f"({'; '.join(host.notes)}): a whole-run move is judged as without probes"
        )
    if machine.lean is not None and machine.lean.rejected:
        lines.append(f"LEAN {lean_text(machine.lean)}")
    if machine.earlier:
        lines.append(f"POOLED {machine.machine_id}: {earlier_text(machine)}")
    for v in machine.implausible:
        lines.append(
            f"IMPLAUSIBLE {v.fullname} {v.metric}: {implausible_text(v)} [{machine.machine_id}]"
        )
    lines += [flag.line(machine.machine_id) for flag in machine.accuracy_flags]
    for row in machine.drifts:
        lines.append(f"DRIFT {row.fullname} {row.metric}: {row.text} [{machine.machine_id}]")
    if machine.suite_drift is not None:
        lines.append(
            f"DRIFT suite-wide {machine.machine_id}: median {machine.suite_drift:+.1%} "
            "over the window"
        )
    return lines


def status(
    machines: Sequence[MachineReport],
    suspect_current: Sequence[str],
    counts: Mapping[VerdictName, int],
    verdicts: Sequence[Verdict],
    threshold: float,
) -> tuple[Status, str]:
    """The status and its reason (module docstring)."""
    if not machines or suspect_current:
        return "error", (
            "no current run to judge"
            if not machines
            else f"{len(suspect_current)} unreadable file(s) may be the current run"
        )
    notes = [f"stack changed: {m.stack_change_text}" for m in machines if m.stack_change_text]
    notes += [f"{m.machine_id}: {earlier_text(m)}" for m in machines if m.earlier]
    suffix = f" ({'; '.join(notes)})" if notes else ""
    odd = [v for m in machines for v in m.implausible]
    # Said on every status, never deciding one (reports.analysis.accuracy: a finding for a human).
    outside = sum(len(m.accuracy_flags) for m in machines)
    accuracy = [f"{outside} quantized cell(s) outside their accuracy bound to check"]
    accuracy = accuracy if outside else []
    also = "".join(f"; {text}" for text in accuracy)
    shifted = [m for m in machines if shift_said(m.shift)]
    shift_parts = [shift_text(m.machine_id, m.shift) for m in shifted if m.shift is not None]
    group_fails = [
        g
        for m in machines
        if m.shift is not None and not m.busy_text
        for g in m.shift.groups
        if g.verdict == "fail"
    ]
    if counts["fail"] or counts["missing"] or group_fails:
        parts = []
        if odd:
            parts.append(f"{len(odd)} implausible change(s) to check")
        parts += accuracy
        if counts["fail"]:
            parts.append(f"{counts['fail']} regression(s) beyond threshold and noise")
        if group_fails:
            parts.append(f"{len(group_fails)} suite-wide move(s) beyond threshold and noise")
        if counts["missing"]:
            parts.append(f"{counts['missing']} baseline metric(s) missing from the current run")
        return "fail", "; ".join([*parts, *shift_parts]) + suffix
    if not any(v.compared for v in verdicts):
        return "no-baseline", "nothing was compared: no baseline run has these benchmarks" + also
    busy = "; ".join(f"{m.machine_id}: {m.busy_text}" for m in machines if m.busy_text)
    if busy:
        return "inconclusive", (
            f"busy: the run was disturbed, {busy}: nothing judged as if quiet; re-run on a "
            "quiet machine" + also + suffix
        )
    if undecided := _undecided(machines, shifted, verdicts, threshold):
        return "inconclusive", undecided + also + suffix
    extra = [f"{len(odd)} implausible change(s) to check"] if odd else []
    extra += accuracy
    below = [f"{text} (below the threshold)" for text in shift_parts]
    return "pass", "; ".join(["no regression beyond threshold and noise", *below, *extra]) + suffix


def _undecided(
    machines: Sequence[MachineReport],
    shifted: Sequence[MachineReport],
    verdicts: Sequence[Verdict],
    threshold: float,
) -> str:
    """Why a quiet run with no fail is still not PASS ("" when it is PASS): its causes."""
    causes = []
    for m in shifted:
        shift = m.shift
        if shift is None:
            continue
        moved = [v for v in m.verdicts if v.attributed] + [g for g in shift.groups if g.attributed]
        if moved:
            causes.append(
                f"shift: {len(moved)} move(s) on {m.machine_id} machine or code "
                f"({shift_text(m.machine_id, shift)})"
            )
    if causes:
        return "; ".join(causes) + "; confirm with an A/B run (nox -s ab) or re-run quietly"
    more = "decide with more runs (re-run: runs of one commit are pooled) or an A/B run (nox -s ab)"
    parts = [
        f"lean: {lean_text(m.lean, 1)}" for m in machines if m.lean is not None and m.lean.rejected
    ]
    left = undecided(verdicts)
    if left.mostly:
        # A PASS needs most timings decided: the memory peaks' passes do not make one.
        parts.insert(0, f"undecided: {left.text(threshold)}")
    return "; ".join([*parts, more]) if parts else ""
