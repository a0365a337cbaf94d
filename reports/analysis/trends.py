"""Trend series, change-point marks and decode curves of one machine's comparison.

The host probes' trend (`host_trends`) is drawn the same way, as the machine's own.
Trend series are aggregated here (per-run medians, at most `max_points` per chart) so that a
history of 1,000 runs renders quickly into a small file. Each point carries its run's commit and
date (axis ticks and hover); stack changes between the runs shown are marked like steps.

Deliberately not here: verdicts (`analysis`), per-cell tables (`tables`), HTML (`render`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from reports.analysis.changepoints import detect_steps_detrended
from reports.analysis.levels import common_rounds, location_at
from reports.analysis.metrics import SCALAR_TIMINGS, primary_metric, run_probes
from reports.analysis.series import Verdict, VerdictName
from reports.history.load import Run
from reports.history.selection import Comparison


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
    """Per-run values of one benchmark's metric (aggregated to at most max_points).

    `x` is the run's position in the comparison (0 = oldest baseline run), `y` its value in
    `unit` (a bucket's median of run values when aggregated), `label` its commit and time; the
    last point is the current run. The primary timing's value is the run's location at the
    benchmark's common round count (`levels.location_at`, `s`: what the verdict compares);
    energy trends (`J/tok`) plot the recorded `*_j_per_tok`, which are shown, not judged.
    """

    fullname: str
    cell_id: str
    metric: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    label: tuple[str, ...]
    steps: tuple[StepMark, ...]
    aggregated: bool
    verdict: VerdictName | None
    unit: str = "s"


@dataclass(frozen=True)
class DecodeCurve:
    """Decode step latency against context position (`prompt_len + step`) for one benchmark."""

    fullname: str
    cell_id: str
    position: tuple[int, ...]
    current_s: tuple[float, ...]
    baseline_s: tuple[float | None, ...]


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
    # detrended: slow drift is named as drift (`flags.drift`), not drawn as a staircase
    found = detect_steps_detrended([math.log(v) for _, v in points])
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
        return location_at(bench.rounds_s, len(bench.rounds_s)) if bench.rounds_s else None
    value = bench.extra.get(metric)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def trends(
    comparison: Comparison, verdicts: Sequence[Verdict], max_points: int
) -> tuple[list[Trend], list[StepMark]]:
    runs = [*comparison.baseline, comparison.current]
    run_labels = [_run_label(r) for r in runs]  # once per run, not per benchmark and run
    by_key = {(v.fullname, v.metric): v.verdict for v in verdicts}
    trends: list[Trend] = []
    steps: list[StepMark] = []
    for fullname, bench in comparison.current.benchmarks.items():
        metric = primary_metric(bench)
        # the primary timing is the run's location at the benchmark's common round count: the
        # statistic the verdict, its step cut and drift use, with one expectation in every run
        present = [b.rounds_s for r in runs if (b := r.benchmarks.get(fullname)) and b.rounds_s]
        rounds = common_rounds(present)
        values: list[float | None] = [
            location_at(b.rounds_s, rounds)
            if (b := r.benchmarks.get(fullname)) is not None and b.rounds_s
            else None
            for r in runs
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
                y=y,
                label=labels,
                steps=tuple(bench_steps),
                aggregated=aggregated,
                verdict=by_key.get((fullname, metric)),
            )
        )
        trends.extend(_energy_trends(comparison, fullname, run_labels, max_points))
    return trends, steps


# Energy per token per phase (DESIGN §3): a trend beside the phase's timing, never a verdict.
ENERGY_METRICS = ("prefill_j_per_tok", "decode_j_per_tok")


def _energy_trends(
    comparison: Comparison, fullname: str, run_labels: Sequence[str], max_points: int
) -> list[Trend]:
    runs = [*comparison.baseline, comparison.current]
    bench = comparison.current.benchmarks[fullname]
    out = []
    for metric in ENERGY_METRICS:
        if _metric_value(comparison.current, fullname, metric) is None:
            continue  # no counter for the current run: no chart (the "now" table says why)
        values = [_metric_value(r, fullname, metric) for r in runs]
        pts = [(float(i), v, run_labels[i]) for i, v in enumerate(values) if v]
        x, y, labels, aggregated = _downsample(
            [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts], max_points
        )
        marks = _steps_for(fullname, metric, comparison.baseline, values[:-1])
        out.append(
            Trend(
                fullname,
                bench.cell_id,
                metric,
                x,
                y,
                labels,
                tuple(marks),
                aggregated,
                None,
                "J/tok",
            )
        )
    return out


def host_trends(comparison: Comparison, max_points: int) -> list[Trend]:
    """The machine's own trend: per host-probe kind of the current run, each run's probe level
    (the median of its quiet points, `metrics.run_probes`) in seconds; drawn as the machine's,
    never judged as the code's (DESIGN §3)."""
    runs = [*comparison.baseline, comparison.current]
    levels = [run_probes(r) for r in runs]
    labels = [_run_label(r) for r in runs]
    out = []
    for kind in sorted(levels[-1]):
        values = [
            math.exp(level) if (p := lv.get(kind)) and (level := p.level) is not None else None
            for lv in levels
        ]
        pts = [(float(i), v, labels[i]) for i, v in enumerate(values) if v]
        x, y, label, aggregated = _downsample(
            [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts], max_points
        )
        name = f"host probe: {kind}"
        marks = _steps_for(name, kind, comparison.baseline, values[:-1])
        out.append(Trend(name, name, kind, x, y, label, tuple(marks), aggregated, None))
    return out


def decode_curves(comparison: Comparison, max_points: int) -> list[DecodeCurve]:
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


def run_ticks(comparison: Comparison) -> tuple[str, ...]:
    """Axis tick per trend x position: the run's short commit and date ("ab12cd3 01-05")."""
    runs = [*comparison.baseline, comparison.current]
    return tuple(f"{r.commit_id[:7]} {r.datetime[5:10]}" for r in runs)


def stack_positions(comparison: Comparison) -> tuple[tuple[int, str], ...]:
    """(x, "torch 2.13.0 → 2.14.1") wherever the stack changed between runs the trends show."""
    runs = [*comparison.baseline, comparison.current]
    marks = []
    for i in range(1, len(runs)):
        before, after = runs[i - 1].stack, runs[i].stack
        if dict(before) != dict(after):
            keys = sorted(set(before) | set(after))
            text = ", ".join(
                f"{k} {before.get(k, '(absent)')} → {after.get(k, '(absent)')}"
                for k in keys
                if before.get(k) != after.get(k)
            )
            marks.append((i, text))
    return tuple(marks)
