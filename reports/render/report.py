"""Assemble everything the outputs show: verdicts, trends with steps, curves, tables, diffs.

`build_report(history, selection, config)` is the single stage between loading and rendering.
It returns frozen values holding base units only (seconds, bytes, fractions); the templates
format them. Trend series are aggregated here (per-run medians, at most `max_points` per chart)
so that a history of 1,000 runs renders quickly into a small file.

Deliberately not here: file reading (`history`), statistics (`analysis`), HTML (`render`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from reports.analysis.metrics import comparison_series, removed_cells
from reports.analysis.series import (
    VERDICT_ORDER,
    AnalysisConfig,
    Verdict,
    VerdictName,
    judge_suite,
    summarize,
)
from reports.analysis.trends import (
    DecodeCurve,
    StepMark,
    Trend,
    decode_curves,
    run_ticks,
    stack_positions,
    trends,
)
from reports.history.load import History, Run, SkippedFile
from reports.history.selection import Comparison, Selection, StackChange, StackMark
from reports.render.roofline import RooflineChart
from reports.render.runmode import Table as RunModeTable
from reports.render.runmode import comparison_tables
from reports.render.tables import (
    MatrixGrid,
    NowRow,
    TableRow,
    kv_rows,
    matrix_grids,
    memory_rows,
    now_axes,
    now_rows,
    roofline_rows,
)

Status = Literal["fail", "pass", "no-baseline", "error"]


@dataclass(frozen=True)
class EnvChange:
    """One environment field: its values across baseline runs and in the current run."""

    key: str
    baseline: tuple[str, ...]
    current: str
    changed: bool


@dataclass(frozen=True)
class MachineReport:
    """Everything shown for one machine's comparison."""

    machine_id: str
    label: str
    current: Run
    baseline_count: int
    baseline_rule: str
    history_count: int
    verdicts: tuple[Verdict, ...]
    trends: tuple[Trend, ...]
    steps: tuple[StepMark, ...]
    decode_curves: tuple[DecodeCurve, ...]
    kv_rows: tuple[TableRow, ...]
    memory_rows: tuple[TableRow, ...]
    roofline_rows: tuple[TableRow, ...]
    env: tuple[EnvChange, ...]
    methodology: Mapping[str, str]
    roofline: RooflineChart = field(default_factory=RooflineChart)  # current run only
    stack_change: tuple[StackChange, ...] = ()
    stack_marks: tuple[StackMark, ...] = ()
    removed: tuple[str, ...] = ()
    partial: bool = False
    now: tuple[NowRow, ...] = ()
    grids: tuple[MatrixGrid, ...] = ()
    run_ticks: tuple[str, ...] = ()
    stack_x: tuple[tuple[int, str], ...] = ()
    runmodes: tuple[RunModeTable, ...] = ()  # current run's decode by attention x cache x compile

    @property
    def counts(self) -> dict[VerdictName, int]:
        """Verdict counts of this machine."""
        return summarize(self.verdicts)

    @property
    def now_axes(self) -> tuple[str, ...]:
        """Run-mode axes shown as columns of the "now" table (none without run-mode cells)."""
        return now_axes(self.now)

    @property
    def stack_change_text(self) -> str:
        """The changed stack fields ("torch 2.13.0 → 2.14.1, ..."), or ""."""
        return ", ".join(str(c) for c in self.stack_change)


@dataclass(frozen=True)
class Report:
    """The whole report: one `MachineReport` per judged machine plus what was left out."""

    machines: tuple[MachineReport, ...]
    stale: tuple[tuple[str, str], ...]
    skipped: tuple[SkippedFile, ...]
    suspect_current: tuple[str, ...]
    config: AnalysisConfig
    base_branch: str
    counts: Mapping[VerdictName, int]
    status: Status
    status_reason: str
    artifact_url: str = ""
    verdict_order: tuple[VerdictName, ...] = field(default=VERDICT_ORDER)

    @property
    def verdicts(self) -> list[Verdict]:
        """Every verdict over all machines."""
        return [v for m in self.machines for v in m.verdicts]

    def ranked(self, names: Sequence[VerdictName]) -> list[tuple[MachineReport, Verdict]]:
        """Verdicts with one of `names`, worst ratio first (largest for fail, smallest else)."""
        rows = [(m, v) for m in self.machines for v in m.verdicts if v.verdict in names]
        return sorted(rows, key=lambda mv: -abs(math.log(mv[1].ratio or 1.0)))


def _env_diff(comparison: Comparison) -> list[EnvChange]:
    keys = list(comparison.current.env)
    for run in comparison.baseline:
        keys += [k for k in run.env if k not in keys]
    out = []
    for key in keys:
        seen: list[str] = []
        for run in reversed(comparison.baseline):
            value = run.env.get(key, "(absent)")
            if value not in seen:
                seen.append(value)
        current = comparison.current.env.get(key, "(absent)")
        changed = bool(seen) and (seen != [current])
        out.append(EnvChange(key, tuple(seen), current, changed))
    return sorted(out, key=lambda e: (not e.changed, e.key))


def _methodology(run: Run, comparison: Comparison) -> dict[str, str]:
    def distinct(key: str) -> str:
        values = sorted({str(b.extra[key]) for b in run.benchmarks.values() if key in b.extra})
        return ", ".join(values) if values else "n/a (not recorded)"

    rounds = sorted({len(b.rounds_s) for b in run.benchmarks.values()})
    return {
        "warmup rounds": distinct("warmup"),
        "timed rounds (recorded)": ", ".join(str(r) for r in rounds),
        "timer": distinct("timer"),
        "device sync": distinct("sync"),
        "current run files": ", ".join(run.paths),
        "baseline": comparison.baseline_rule,
        "torch": run.env.get("torch", "n/a"),
        "transformers": run.env.get("transformers", "n/a"),
        "python": run.env.get("python", run.env.get("python_version", "n/a")),
    }


def build_machine(
    comparison: Comparison,
    verdicts: Sequence[Verdict],
    max_points: int,
    max_runs: int | None = None,
) -> MachineReport:
    """The `MachineReport` of one comparison given its (already Holm-corrected) verdicts."""
    trend_list, steps = trends(comparison, verdicts, max_points)
    current = comparison.current
    return MachineReport(
        machine_id=comparison.machine_id,
        label=comparison.machine_label,
        current=current,
        baseline_count=len(comparison.baseline),
        baseline_rule=comparison.baseline_rule,
        history_count=len(comparison.history),
        verdicts=tuple(verdicts),
        trends=tuple(trend_list),
        steps=tuple(steps),
        decode_curves=tuple(decode_curves(comparison, max_points)),
        kv_rows=tuple(kv_rows(current)),
        memory_rows=tuple(memory_rows(current)),
        roofline_rows=tuple(roofline_rows(current, verdicts)),
        now=tuple(now_rows(current)),
        grids=tuple(matrix_grids(current, verdicts)),
        run_ticks=run_ticks(comparison),
        stack_x=stack_positions(comparison),
        env=tuple(_env_diff(comparison)),
        methodology=_methodology(current, comparison),
        roofline=RooflineChart.from_benchmarks(current.benchmarks.values()),
        stack_change=comparison.stack_change,
        stack_marks=comparison.stack_marks,
        removed=tuple(removed_cells(comparison, max_runs)),
        partial=current.partial,
        runmodes=tuple(comparison_tables(current.benchmarks.values())),
    )


def _sort_key(v: Verdict) -> tuple[int, float]:
    return VERDICT_ORDER.index(v.verdict), -abs(math.log(v.ratio or 1.0))


def _status(
    machines: Sequence[MachineReport],
    suspect_current: Sequence[str],
    counts: Mapping[VerdictName, int],
    verdicts: Sequence[Verdict],
) -> tuple[Status, str]:
    if not machines:
        return "error", "no current run to judge"
    if suspect_current:
        return "error", f"{len(suspect_current)} unreadable file(s) may be the current run"
    stack = "; ".join(f"stack changed: {m.stack_change_text}" for m in machines if m.stack_change)
    suffix = f" ({stack})" if stack else ""
    if counts["fail"] or counts["missing"]:
        parts = []
        if counts["fail"]:
            parts.append(f"{counts['fail']} regression(s) beyond threshold and noise")
        if counts["missing"]:
            parts.append(f"{counts['missing']} baseline metric(s) missing from the current run")
        return "fail", "; ".join(parts) + suffix
    if not any(v.compared for v in verdicts):
        return "no-baseline", "nothing was compared: no baseline run has these benchmarks"
    return "pass", "no regression beyond threshold and noise" + suffix


def build_report(
    history: History,
    selection: Selection,
    config: AnalysisConfig,
    *,
    base_branch: str = "main",
    suspect_current: Sequence[str] = (),
    extra_skipped: Sequence[SkippedFile] = (),
    artifact_url: str = "",
    max_points: int = 200,
) -> Report:
    """Judge every comparison (Holm across all of them together) and assemble the report.

    Status: `error` when nothing could be judged or a skipped file may be the current run;
    else `fail` when any verdict is `fail` or `missing` (a cell that did not run is not a
    pass); else `no-baseline` when no verdict compared anything (all `new`): neutral, never
    PASS; else `pass`. Every verdict of a machine whose stack changed names the change.
    """
    all_series = [
        (c, s)
        for c in selection.comparisons
        for s in comparison_series(c, config.max_baseline_runs)
    ]
    changes = {c.machine_id: c.stack_change_text for c in selection.comparisons}
    verdicts = [
        replace(v, stack_change=changes.get(v.machine_id, ""))
        for v in judge_suite([s for _, s in all_series], config)
    ]
    per_machine: dict[str, list[Verdict]] = {}
    for v in verdicts:
        per_machine.setdefault(v.machine_id, []).append(v)
    machines = tuple(
        build_machine(
            c,
            sorted(per_machine.get(c.machine_id, []), key=_sort_key),
            max_points,
            config.max_baseline_runs,
        )
        for c in selection.comparisons
    )
    counts = summarize(verdicts)
    skipped = (*history.skipped, *extra_skipped)
    status, reason = _status(machines, suspect_current, counts, verdicts)
    return Report(
        machines=machines,
        stale=selection.stale,
        skipped=tuple(skipped),
        suspect_current=tuple(suspect_current),
        config=config,
        base_branch=base_branch,
        counts=counts,
        status=status,
        status_reason=reason,
        artifact_url=artifact_url,
    )
