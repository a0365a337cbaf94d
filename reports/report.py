"""Assemble everything the outputs show: verdicts, trends with steps, curves, tables, diffs.

`build_report(history, selection, config)` is the single stage between loading and rendering.
It returns frozen values holding base units only (seconds, bytes, fractions); the templates
format them. Trend series are aggregated here (per-run medians, at most `max_points` per chart)
so that a history of 1,000 runs renders quickly into a small file.

Deliberately not here: file reading (`history`), statistics (`analysis`), HTML (`render`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from reports.analysis import (
    VERDICT_ORDER,
    AnalysisConfig,
    Verdict,
    VerdictName,
    judge_suite,
    summarize,
)
from reports.changepoints import detect_steps
from reports.history import Comparison, History, Run, Selection, SkippedFile
from reports.metrics import SCALAR_TIMINGS, comparison_series, primary_metric
from reports.roofline import RooflineChart

Status = Literal["fail", "pass", "error"]


@dataclass(frozen=True)
class StepMark:
    """A detected step in a metric's base-branch history, located at a run's commit."""

    fullname: str
    metric: str
    run_index: int
    commit_id: str
    datetime: str
    rel_change: float


@dataclass(frozen=True)
class Trend:
    """Per-run medians of one benchmark's primary timing (aggregated to at most max_points).

    `x` is the run's position in the comparison (0 = oldest baseline run), `y_s` its median
    seconds (a bucket's median of run medians when aggregated), `label` its commit and time;
    the last point is the current run.
    """

    fullname: str
    cell_id: str
    metric: str
    x: tuple[float, ...]
    y_s: tuple[float, ...]
    label: tuple[str, ...]
    steps: tuple[StepMark, ...]
    aggregated: bool
    verdict: VerdictName | None


@dataclass(frozen=True)
class DecodeCurve:
    """Decode step latency against context position (`prompt_len + step`) for one benchmark."""

    fullname: str
    cell_id: str
    position: tuple[int, ...]
    current_s: tuple[float, ...]
    baseline_s: tuple[float | None, ...]


@dataclass(frozen=True)
class TableRow:
    """A row of one of the per-cell tables: the cell and its named values (None = n/a)."""

    fullname: str
    cell_id: str
    group: str
    values: Mapping[str, float | str | None]


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

    @property
    def counts(self) -> dict[VerdictName, int]:
        """Verdict counts of this machine."""
        return summarize(self.verdicts)


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


def _downsample(
    x: Sequence[float], y: Sequence[float], labels: Sequence[str], max_points: int
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[str, ...], bool]:
    """Keep the newest points, and bucket older ones into medians, to at most `max_points`."""
    n = len(y)
    if n <= max_points:
        return tuple(x), tuple(y), tuple(labels), False
    keep_tail = max_points // 4
    head = n - keep_tail
    buckets = max_points - keep_tail
    xs: list[float] = []
    ys: list[float] = []
    ls: list[str] = []
    for b in range(buckets):
        lo, hi = b * head // buckets, (b + 1) * head // buckets
        if hi <= lo:
            continue
        xs.append(statistics.fmean(x[lo:hi]))
        ys.append(statistics.median(y[lo:hi]))
        ls.append(f"median of {hi - lo} runs ({labels[lo]} .. {labels[hi - 1]})")
    return (*xs, *x[head:]), (*ys, *y[head:]), (*ls, *labels[head:]), True


def _run_label(run: Run) -> str:
    return f"{run.short_commit} {run.branch} {run.datetime[:19]}"


def _steps_for(
    fullname: str, metric: str, runs: Sequence[Run], values: Sequence[float | None]
) -> list[StepMark]:
    points = [(i, v) for i, v in enumerate(values) if v is not None and v > 0]
    if len(points) < 6:
        return []
    found = detect_steps([math.log(v) for _, v in points])
    marks = []
    for step in found:
        run_index = points[step.index][0]
        run = runs[run_index]
        marks.append(
            StepMark(fullname, metric, run_index, run.commit_id, run.datetime, step.rel_change)
        )
    return marks


def _metric_value(run: Run, fullname: str, metric: str) -> float | None:
    bench = run.benchmarks.get(fullname)
    if bench is None:
        return None
    if metric == primary_metric(bench):
        return bench.median_s
    value = bench.extra.get(metric)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _trends(
    comparison: Comparison, verdicts: Sequence[Verdict], max_points: int
) -> tuple[list[Trend], list[StepMark]]:
    runs = [*comparison.baseline, comparison.current]
    run_labels = [_run_label(r) for r in runs]  # once per run, not per benchmark and run
    by_key = {(v.fullname, v.metric): v.verdict for v in verdicts}
    trends: list[Trend] = []
    steps: list[StepMark] = []
    for fullname, bench in comparison.current.benchmarks.items():
        metric = primary_metric(bench)
        # the primary timing is the run's median round (the same statistic in every run)
        values: list[float | None] = [
            b.median_s if (b := r.benchmarks.get(fullname)) is not None else None for r in runs
        ]
        base_values = values[:-1]
        bench_steps = _steps_for(fullname, metric, comparison.baseline, base_values)
        steps.extend(bench_steps)
        for scalar in SCALAR_TIMINGS:
            if scalar in bench.extra:
                scalar_values = [_metric_value(r, fullname, scalar) for r in comparison.baseline]
                steps.extend(_steps_for(fullname, scalar, comparison.baseline, scalar_values))
        pts = [(float(i), v, run_labels[i]) for i, v in enumerate(values) if v]
        x, y, labels, aggregated = _downsample(
            [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts], max_points
        )
        trends.append(
            Trend(
                fullname=fullname,
                cell_id=bench.cell_id,
                metric=metric,
                x=x,
                y_s=y,
                label=labels,
                steps=tuple(bench_steps),
                aggregated=aggregated,
                verdict=by_key.get((fullname, metric)),
            )
        )
    return trends, steps


def _decode_curves(comparison: Comparison, max_points: int) -> list[DecodeCurve]:
    curves: list[DecodeCurve] = []
    last_base = comparison.baseline[-1] if comparison.baseline else None
    for fullname, bench in comparison.current.benchmarks.items():
        step_s = bench.extra.get("step_s")
        if not isinstance(step_s, list) or not step_s:
            continue
        prompt = bench.params.get("prompt_len", bench.extra.get("prompt_len", 0))
        p0 = int(prompt) if isinstance(prompt, int | float) else 0
        base_bench = last_base.benchmarks.get(fullname) if last_base else None
        base_steps = base_bench.extra.get("step_s") if base_bench else None
        stride = max(1, math.ceil(len(step_s) / max_points))
        idx = range(0, len(step_s), stride)
        curves.append(
            DecodeCurve(
                fullname=fullname,
                cell_id=bench.cell_id,
                position=tuple(p0 + i + 1 for i in idx),
                current_s=tuple(float(step_s[i]) for i in idx),
                baseline_s=tuple(
                    float(base_steps[i])
                    if isinstance(base_steps, list) and i < len(base_steps)
                    else None
                    for i in idx
                ),
            )
        )
    return curves


KV_FIELDS = (
    "kv_bytes_per_token",
    "kv_analytic_after_prefill_bytes",
    "kv_measured_after_prefill_bytes",
    "kv_analytic_final_bytes",
    "kv_measured_final_bytes",
    "kv_storage_final_bytes",
)
MEMORY_FIELDS = ("weights_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes")
ROOFLINE_FIELDS = (
    "prefill_flop_per_s",
    "prefill_pct_of_peak_flops",
    "decode_bytes_per_s",
    "decode_pct_of_peak_bandwidth",
    "peak_flop_per_s",
    "peak_bandwidth_bytes_per_s",
    "peak_source",
)


def _rows(run: Run, fields: Sequence[str], require_any: bool = True) -> list[TableRow]:
    rows: list[TableRow] = []
    for fullname, bench in run.benchmarks.items():
        values: dict[str, float | str | None] = {}
        for name in fields:
            raw = bench.extra.get(name)
            if isinstance(raw, bool):
                values[name] = str(raw)
            elif isinstance(raw, int | float | str):
                values[name] = raw
            else:
                values[name] = None
        if require_any and all(v is None for v in values.values()):
            continue
        rows.append(TableRow(fullname, bench.cell_id, bench.group, values))
    return rows


def _kv_rows(run: Run) -> list[TableRow]:
    rows = []
    for row in _rows(run, KV_FIELDS):
        values = dict(row.values)
        pairs = [
            (
                values.get("kv_analytic_after_prefill_bytes"),
                values.get("kv_measured_after_prefill_bytes"),
            ),
            (values.get("kv_analytic_final_bytes"), values.get("kv_measured_final_bytes")),
        ]
        compared = [(a, m) for a, m in pairs if a is not None and m is not None]
        values["match"] = (
            ("yes" if all(a == m for a, m in compared) else "NO") if compared else None
        )
        rows.append(TableRow(row.fullname, row.cell_id, row.group, values))
    return rows


def _memory_rows(run: Run) -> list[TableRow]:
    rows = []
    for row in _rows(run, MEMORY_FIELDS):
        labels = run.benchmarks[row.fullname].extra.get("memory_labels")
        values = dict(row.values)
        if isinstance(labels, dict):
            values["label_allocated"] = str(labels.get("allocated", ""))
            values["label_reserved"] = str(labels.get("reserved", ""))
        rows.append(TableRow(row.fullname, row.cell_id, row.group, values))
    return rows


def _roofline_rows(run: Run, verdicts: Sequence[Verdict]) -> list[TableRow]:
    mde = {v.fullname: v.mde for v in verdicts if v.kind == "timing"}
    rows = []
    for row in _rows(run, ROOFLINE_FIELDS):
        values = dict(row.values)
        values["mde"] = mde.get(row.fullname)
        rows.append(TableRow(row.fullname, row.cell_id, row.group, values))
    return rows


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
    comparison: Comparison, verdicts: Sequence[Verdict], max_points: int
) -> MachineReport:
    """The `MachineReport` of one comparison given its (already BH-corrected) verdicts."""
    trends, steps = _trends(comparison, verdicts, max_points)
    current = comparison.current
    return MachineReport(
        machine_id=comparison.machine_id,
        label=comparison.machine_label,
        current=current,
        baseline_count=len(comparison.baseline),
        baseline_rule=comparison.baseline_rule,
        history_count=len(comparison.history),
        verdicts=tuple(verdicts),
        trends=tuple(trends),
        steps=tuple(steps),
        decode_curves=tuple(_decode_curves(comparison, max_points)),
        kv_rows=tuple(_kv_rows(current)),
        memory_rows=tuple(_memory_rows(current)),
        roofline_rows=tuple(_roofline_rows(current, verdicts)),
        env=tuple(_env_diff(comparison)),
        methodology=_methodology(current, comparison),
        roofline=RooflineChart.from_benchmarks(current.benchmarks.values()),
    )


def _sort_key(v: Verdict) -> tuple[int, float]:
    return VERDICT_ORDER.index(v.verdict), -abs(math.log(v.ratio or 1.0))


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
    """Judge every comparison (BH across all of them together) and assemble the report.

    Status: `error` when nothing could be judged or a skipped file may be the current run;
    else `fail` when any verdict is `fail`; else `pass`.
    """
    all_series = [
        (c, s)
        for c in selection.comparisons
        for s in comparison_series(c, config.max_baseline_runs)
    ]
    verdicts = judge_suite([s for _, s in all_series], config)
    per_machine: dict[str, list[Verdict]] = {}
    for v in verdicts:
        per_machine.setdefault(v.machine_id, []).append(v)
    machines = tuple(
        build_machine(c, sorted(per_machine.get(c.machine_id, []), key=_sort_key), max_points)
        for c in selection.comparisons
    )
    counts = summarize(verdicts)
    skipped = (*history.skipped, *extra_skipped)
    status: Status
    if not machines:
        status, reason = "error", "no current run to judge"
    elif suspect_current:
        status = "error"
        reason = f"{len(suspect_current)} unreadable file(s) may be the current run"
    elif counts["fail"]:
        status, reason = "fail", f"{counts['fail']} regression(s) beyond threshold and noise"
    else:
        status, reason = "pass", "no regression beyond threshold and noise"
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
