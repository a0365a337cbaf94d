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

from reports.analysis.accuracy import Accuracy, accuracy_flags
from reports.analysis.consistency import (
    ConsistencyRow,
    ConsistencySummary,
    consistency_rows,
    summarize_consistency,
)
from reports.analysis.flags import (
    DriftRow,
    busy_reason,
    comparison_drift,
    distinct_extra,
    implausible,
    mark_busy,
    process_state_rows,
    quiet_baseline,
    quiet_repeats,
    run_busy_pct,
    suite_drift,
)
from reports.analysis.judge import Attribution, Lean, judge
from reports.analysis.metrics import comparison_host, comparison_series, removed_cells
from reports.analysis.series import (
    VERDICT_ORDER,
    AnalysisConfig,
    Verdict,
    VerdictName,
    summarize,
)
from reports.analysis.trends import (
    DecodeCurve,
    StepMark,
    Trend,
    decode_curves,
    host_trends,
    run_ticks,
    stack_positions,
    trends,
)
from reports.history.load import History, Run, SkippedFile
from reports.history.selection import Comparison, Selection, StackChange, StackMark
from reports.render.bisectcmd import bisect_commands
from reports.render.capacity import CapacityRow, capacity_rows, capacity_section_html
from reports.render.engines import EngineTable, engine_tables
from reports.render.headline import EarlierRun, Status, status
from reports.render.quant import QuantTable, quant_tables
from reports.render.roofline import RooflineChart
from reports.render.runmode import Table as RunModeTable
from reports.render.runmode import comparison_tables
from reports.render.serve import ServeTable, serve_tables
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
from reports.render.tp import TpTable, tp_tables


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
    busy_cpu_pct: float | None = None  # other processes' CPU share when the run was disturbed
    drifts: tuple[DriftRow, ...] = ()  # benchmarks that crept beyond the threshold
    suite_drift: float | None = None  # the suite-wide creep, when most benchmarks drifted
    consistency: tuple[ConsistencyRow, ...] = ()  # one computation timed by two modules
    shift: Attribution | None = None  # machine or code: probes, common move, group moves
    lean: Lean | None = None  # the lean test of the undecided timings (`analysis.judge`)
    earlier: tuple[EarlierRun, ...] = ()  # this commit's earlier runs, pooled with the current
    quant: tuple[QuantTable, ...] = ()  # current run's quantized cells against unquantized ones
    accuracy_flags: tuple[Accuracy, ...] = ()  # current run's cells outside their accuracy bound
    tp: tuple[TpTable, ...] = ()  # current run's tp > 1 cells against their tp-1 twins
    serve: tuple[ServeTable, ...] = ()  # current run's serving cells: latency against rate
    capacity_html: str = ""  # current run's capacity cells and Pareto view (`capacity`)
    capacity: tuple[CapacityRow, ...] = ()  # current run's capacity cells (the PR summary's)
    engines: tuple[EngineTable, ...] = ()  # current run's torch and MLX cells side by side
    host_trends: tuple[Trend, ...] = ()  # the host probes' levels per run: the machine's trend
    baseline_commit: str = ""  # the newest baseline run's: a bisection's good end

    def bisect(self, matrix: str = "") -> list[tuple[str, str]]:
        """(test id, `nox -s bisect` command) for each failed primary timing, from the newest
        baseline commit to the current one (none for a dirty current tree)."""
        bad = None if self.current.dirty else self.current.commit_id
        failed = [(v.fullname, v.metric) for v in self.verdicts if v.verdict == "fail"]
        return bisect_commands(self.baseline_commit, bad, failed, matrix)

    @property
    def lean_said(self) -> bool:
        """Whether the report names the lean: it rejected, and an undecided timing leans or
        nothing failed (a failing run whose lean names no undecided timing says nothing more
        than its failures: they are what leans)."""
        if self.lean is None or not self.lean.rejected:
            return False
        return bool(self.lean.leaning) or not any(v.verdict == "fail" for v in self.verdicts)

    @property
    def consistency_summary(self) -> ConsistencySummary:
        """How many of the run's module pairs agree within the noise, and the furthest one."""
        return summarize_consistency(self.consistency)

    @property
    def busy_text(self) -> str:
        """ "machine busy (other processes used 40 % of the CPU)", or "" when quiet."""
        return busy_reason(self.busy_cpu_pct) if self.busy_cpu_pct is not None else ""

    @property
    def implausible(self) -> list[Verdict]:
        """Timed changes of 3x or more either way: for a human to check."""
        return [v for v in self.verdicts if implausible(v)]

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
    matrix: str = ""  # the matrix the current run ran (`--matrix`), for the bisect commands

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
    rounds = sorted({len(b.rounds_s) for b in run.benchmarks.values()})
    return {
        "warmup rounds": distinct_extra(run, "warmup"),
        "timed rounds (recorded)": ", ".join(str(r) for r in rounds),
        "timer": distinct_extra(run, "timer"),
        "device sync": distinct_extra(run, "sync"),
        **process_state_rows(run),
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
    threshold: float = 0.05,
    *,
    shift: Attribution | None = None,
    lean: Lean | None = None,
    earlier: tuple[EarlierRun, ...] = (),
) -> MachineReport:
    """The `MachineReport` of one comparison given its (already Holm-corrected) verdicts."""
    trend_list, steps = trends(comparison, verdicts, max_points)
    current = comparison.current
    drift_rows = comparison_drift(comparison, threshold)
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
        host_trends=tuple(host_trends(comparison, max_points)),
        baseline_commit=comparison.baseline[-1].commit_id if comparison.baseline else "",
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
        busy_cpu_pct=run_busy_pct(current),
        drifts=tuple(drift_rows),
        suite_drift=suite_drift(drift_rows, len(current.benchmarks)),
        stack_marks=comparison.stack_marks,
        removed=tuple(removed_cells(comparison, max_runs)),
        partial=current.partial,
        runmodes=tuple(comparison_tables(current.benchmarks.values())),
        quant=tuple(quant_tables(current.benchmarks.values())),
        accuracy_flags=accuracy_flags(current.benchmarks.values()),
        tp=tuple(tp_tables(current.benchmarks.values())),
        serve=tuple(serve_tables(current.benchmarks.values())),
        capacity=tuple(capacity_rows(current.benchmarks.values())),
        capacity_html=capacity_section_html(
            current.benchmarks.values(), section_id=f"capacity-{_anchor(comparison.machine_id)}"
        ),
        engines=tuple(engine_tables(current.benchmarks.values())),
        consistency=tuple(consistency_rows(current)),
        shift=shift,
        lean=lean,
        earlier=earlier,
    )


def _anchor(text: str) -> str:
    """An HTML id part from a machine id (letters, digits, dashes)."""
    return "".join(c if c.isalnum() else "-" for c in text)[:40]


def _sort_key(v: Verdict) -> tuple[int, float]:
    return VERDICT_ORDER.index(v.verdict), -abs(math.log(v.ratio or 1.0))


def earlier_runs(comparison: Comparison, config: AnalysisConfig) -> tuple[EarlierRun, ...]:
    """Each pooled earlier run of the commit judged alone against the same baseline: what a
    re-run until green would have hidden."""
    out = []
    for run in comparison.current_repeats:
        alone = replace(comparison, current=run, current_repeats=())
        hosts = {alone.machine_id: comparison_host(alone, config.max_baseline_runs)}
        judged = judge(comparison_series(alone, config.max_baseline_runs), config, hosts)
        fails = sum(v.verdict == "fail" for v in judged.verdicts)
        out.append(EarlierRun(run.datetime, judged.outcome(config.threshold), fails))
    return tuple(out)


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
    matrix: str = "",
) -> Report:
    """Judge every comparison (Holm across all of them together) and assemble the report.

    The status and its reason are `reports.render.headline.status`'s. Every verdict of a
    machine whose stack changed names the change; a busy machine's fails and improvements are
    not decided (`flags.mark_busy`).
    """
    comparisons = [quiet_repeats(quiet_baseline(c)) for c in selection.comparisons]
    all_series = [
        (c, s) for c in comparisons for s in comparison_series(c, config.max_baseline_runs)
    ]
    changes = {c.machine_id: c.stack_change_text for c in comparisons}
    busy = {c.machine_id: pct for c in comparisons if (pct := run_busy_pct(c.current)) is not None}
    hosts = {c.machine_id: comparison_host(c, config.max_baseline_runs) for c in comparisons}
    judged = judge([s for _, s in all_series], config, hosts)
    verdicts = [
        replace(v, stack_change=changes.get(v.machine_id, ""))
        for v in mark_busy(list(judged.verdicts), busy)
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
            config.threshold,
            shift=judged.shifts.get(c.machine_id),
            lean=judged.leans.get(c.machine_id),
            earlier=earlier_runs(c, config),
        )
        for c in comparisons
    )
    counts = summarize(verdicts)
    skipped = (*history.skipped, *extra_skipped)
    state, reason = status(machines, suspect_current, counts, verdicts, config.threshold)
    return Report(
        machines=machines,
        stale=selection.stale,
        skipped=tuple(skipped),
        suspect_current=tuple(suspect_current),
        config=config,
        base_branch=base_branch,
        counts=counts,
        status=state,
        status_reason=reason,
        artifact_url=artifact_url,
        matrix=matrix,
    )
