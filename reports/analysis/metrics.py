"""Which metrics a benchmark has, and how to turn a comparison's runs into `MetricSeries`.

- The **primary timing** is pytest-benchmark's own statistic, from the raw rounds
  (`stats.data`), named after phasebench's measurement: `prefill_s` (test_prefill),
  `decode_step_s` (test_decode), `e2e_s` (test_generate), `time_s` for anything else.
- **Scalar timings** phasebench adds per run in `extra_info` (`ttft_s`, `tpot_s`, ITL
  percentiles) and **peak memory** (`peak_*_bytes`) are noisy single values per run.
- **Exact** metrics are deterministic byte counts: every `kv_*_bytes`, the weights' stored bytes
  (`weights_bytes`), the same parameters unquantized (`weights_dense_bytes`), their prediction
  (`weights_analytic_bytes`) and a quantized KV cache's packed bytes per cached position
  (`kv_quant_bytes_per_token`; scales amortized, so it may be a fraction, still deterministic).
  The dense `kv_bytes_per_token` stays unjudged as before: the judged `kv_*_final_bytes` hold it.
- **Accuracy** fields (`accuracy_*`: a quantized cell's distance from the unquantized model) are
  neither: not timings (no run effect, no noise model) and not exact (a kernel or library change
  moves a logit by 1e-6 with nothing broken, which an exact comparison would fail). They are not
  judged against history at all; what they mean is whether the cell is within its method's
  bound in this run (`reports.analysis.accuracy`), which is said, never a verdict.

Throughputs (`*_tok_per_s`) are derived from the timings and not judged twice; the decode slope
can be negative and has no meaningful ratio.

Every timing series carries the suite-wide run effect of each of its baseline runs
(`noise_model.estimate_run_effects` over the primary timings of all benchmarks), so one loaded
run neither hides nor creates a regression. Byte counts and memory peaks do not.

Which benchmarks are judged: every one in the current run, plus every one of the newest baseline
run (and of the newest complete one, when the newest is partial) that the current run lacks:
`missing` (the gate fails), unless the current run recorded its planned cells and the benchmark
is not among them (`removed_cells`: the matrix dropped it; reported, not judged). A sharded run
with a shard missing (`Run.whole` false) removes nothing: its planned list is partial.

The host-probe records of a run (`Run.probes`, DESIGN §3) are never series: `comparison_host`
turns them into the machine's probe evidence (`probes.host_evidence`), one `ProbeRun` per kind
(a run's records of one kind pooled; points that phasebench marked as run beside other
processes' CPU left out). A probe record needs only its name, `extra_info.host_probe` and its
`stats`; phasebench's also carry per point `others_cores` (and the record `others_cpus`).

Deliberately not here: statistics (`analysis`), file reading (`history`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from reports.analysis.levels import common_rounds, location_at
from reports.analysis.noise_model import RunEffects, estimate_run_effects
from reports.analysis.probes import HostEvidence, ProbeRun, host_evidence, probe_run
from reports.analysis.series import MetricKind, MetricSeries
from reports.analysis.timeline import timelines
from reports.analysis.timing_model import Levels
from reports.history.load import BenchmarkResult, Run
from reports.history.rounds import RATE_FLOOR
from reports.history.selection import Comparison

PRIMARY_BY_MEASUREMENT = {
    "prefill": "prefill_s",
    "decode": "decode_step_s",
    "generate": "e2e_s",
    "serve": "serve_pass_s",  # one load pass (DESIGN §13)
}
SCALAR_TIMINGS = ("ttft_s", "tpot_s", "itl_p50_s", "itl_p90_s", "itl_p99_s")
MEMORY_METRICS = (
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "peak_allocated_sampled_bytes",  # MPS: maxima of samples (a lower bound, named apart)
    "peak_reserved_sampled_bytes",
    "peak_rss_bytes",
)


#: Metric names ending so are higher-is-better (throughputs); everything else judged here,
#: seconds and bytes, is lower-is-better. None of them is judged today (derived from timings),
#: but the direction is explicit for when one is.
HIGHER_IS_BETTER_SUFFIXES = ("_tok_per_s", "_per_s")


def higher_is_better(metric: str) -> bool:
    """True for throughputs (`*_tok_per_s`, `*_per_s`), False for seconds and bytes."""
    return metric.endswith(HIGHER_IS_BETTER_SUFFIXES)


def primary_metric(bench: BenchmarkResult) -> str:
    """The name of the benchmark's own timing statistic (see the module docstring); a record
    that names its rounds' statistic (`rounds_statistic`, read into its rounds by `runfile`)
    is judged under that name."""
    named = bench.extra.get("rounds_statistic")
    if isinstance(named, str) and named and isinstance(bench.extra.get("round_series"), dict):
        return named
    measurement = bench.extra.get("measurement")
    key = measurement if isinstance(measurement, str) else bench.group
    return PRIMARY_BY_MEASUREMENT.get(key, "time_s")


#: Byte counts judged exactly beside every `kv_*_bytes` (module docstring).
EXACT_METRICS = frozenset(
    {
        "weights_bytes",
        "weights_dense_bytes",
        "weights_analytic_bytes",
        "kv_quant_bytes_per_token",
        # A serving cell's failed requests (DESIGN §13): one more fails, as a byte more would.
        "errors",
    }
)
#: Every exact metric's name ends so: a cheap first test over extra_info, which also holds long
#: per-step lists.
EXACT_SUFFIXES = ("_bytes", "_bytes_per_token", "errors")
ACCURACY_PREFIX = "accuracy_"


def is_accuracy_metric(name: str) -> bool:
    """True for a quantized cell's accuracy fields (`accuracy_*`): never judged (docstring)."""
    return name.startswith(ACCURACY_PREFIX)


def is_timed_metric(name: str, kind: str) -> bool:
    """True for noisy seconds (`*_s`, not exact): the metrics a run's suite-wide effect moves.

    Not a rate (`*_per_s`, higher is better): a slower host does not move a serving cell's
    goodput as it moves its seconds (below saturation, goodput is the offered rate)."""
    return (
        name.endswith("_s")
        and kind != "exact"
        and not is_accuracy_metric(name)
        and not higher_is_better(name)
    )


def is_exact_metric(name: str) -> bool:
    """True for deterministic byte counts: `kv_*_bytes` and `EXACT_METRICS`."""
    return name in EXACT_METRICS or (name.startswith("kv_") and name.endswith("_bytes"))


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def round_series(bench: BenchmarkResult) -> dict[str, tuple[float, ...]]:
    """Further per-round series a record carries (`extra_info.round_series`, e.g. a serving
    cell's TTFT p50/p90, TPOT p50 and goodput: each round one load pass), judged like the
    primary timing's rounds. A rate's zero is `RATE_FLOOR`; a round without a figure (null: no
    request of that pass completed, which fails the cell on its `errors` anyway) is left out of
    its series; a series with another value that is not a positive number is left out (nothing
    to judge on the log scale)."""
    raw = bench.extra.get("round_series")
    out: dict[str, tuple[float, ...]] = {}
    if not isinstance(raw, dict):
        return out
    for name, values in raw.items():
        if not isinstance(values, list) or not values:
            continue
        numbers = [_number(v) for v in values if v is not None]
        if not numbers:
            continue
        if higher_is_better(str(name)):
            numbers = [RATE_FLOOR if v is not None and v <= 0 else v for v in numbers]
        if all(v is not None and v > 0 and math.isfinite(v) for v in numbers):
            out[str(name)] = tuple(v for v in numbers if v is not None)
    return out


def metric_values(bench: BenchmarkResult) -> dict[str, tuple[MetricKind, tuple[float, ...]]]:
    """Every judged metric of one benchmark in one run: name -> (kind, values).

    A record with per-round series (`round_series`) is judged on those, not on its scalar
    timings of the same family (a serving record's ITL percentiles are shown, not judged)."""
    primary = primary_metric(bench)
    out: dict[str, tuple[MetricKind, tuple[float, ...]]] = {primary: ("timing", bench.rounds_s)}
    series = round_series(bench)
    for name, values in series.items():
        out[name] = ("timing", values)
    scalars = () if series else SCALAR_TIMINGS
    for name in (*scalars, *MEMORY_METRICS):
        value = _number(bench.extra.get(name))
        if name != primary and value is not None and value > 0:
            out[name] = ("scalar", (value,))
    for name, raw in bench.extra.items():
        if name.endswith(EXACT_SUFFIXES) and is_exact_metric(name):
            value = _number(raw)
            if value is not None:
                out[name] = ("exact", (value,))
    return out


def exact_values(bench: BenchmarkResult) -> dict[str, float]:
    """The benchmark's deterministic byte counts (`is_exact_metric`); never the `accuracy_*`
    fields, which are not judged (module docstring)."""
    out: dict[str, float] = {}
    for name, value in bench.extra.items():
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and name.endswith(EXACT_SUFFIXES) and is_exact_metric(name):
            out[name] = float(value)
    return out


def _log_location(bench: BenchmarkResult | None, rounds: int) -> float | None:
    if bench is None or not bench.rounds_s or min(bench.rounds_s) <= 0:
        return None
    if higher_is_better(primary_metric(bench)):
        return None  # a rate (a capacity cell's): a slower host does not move it as seconds
    return math.log(location_at(bench.rounds_s, min(rounds, len(bench.rounds_s))))


def run_effects(baseline: Sequence[Run], current: Run | None = None) -> RunEffects:
    """The suite-wide effect of each baseline run, from every benchmark's primary timing.

    Runs are summarised as the verdicts summarise them: `levels.location_at` at the
    benchmark's common round count over the baseline runs and `current`.
    """
    names = sorted({n for r in baseline for n in r.benchmarks})
    runs = [*baseline, current] if current is not None else list(baseline)
    rounds = {
        n: common_rounds([b.rounds_s for r in runs if (b := r.benchmarks.get(n)) is not None])
        for n in names
    }
    table = [[_log_location(r.benchmarks.get(n), rounds[n]) for n in names] for r in baseline]
    return estimate_run_effects(table)


def _others_shares(bench: BenchmarkResult) -> list[float | None]:
    """Each probe point's share of the machine other processes used (None: unknown)."""
    points = bench.extra.get("points")
    cpus = _number(bench.extra.get("others_cpus"))
    if not isinstance(points, list) or not cpus:
        return []
    shares: list[float | None] = []
    for point in points:
        cores = _number(point.get("others_cores")) if isinstance(point, dict) else None
        shares.append(None if cores is None else cores / cpus)
    return shares


def run_probes(run: Run) -> dict[str, ProbeRun]:
    """The run's probe points per kind (`probes.probe_run`: busy points left out)."""
    values: dict[str, list[float]] = {}
    shares: dict[str, list[float | None]] = {}
    for bench in run.probes:
        kind = bench.host_probe
        if kind is None:
            continue
        points = list(bench.rounds_s)
        own = _others_shares(bench)
        values.setdefault(kind, []).extend(points)
        shares.setdefault(kind, []).extend(own + [None] * (len(points) - len(own)))
    return {k: probe_run(v, shares[k]) for k, v in values.items()}


def window_levels(run: Run) -> Callable[[BenchmarkResult], Levels]:
    """Each benchmark's probe levels in its own window of `run` (`timeline.Timeline.at` on the
    points of its own file, at `extra_info.session_window_s`); the run's median point per kind
    (with its error) for a record without a window or a file without timed points."""
    lines = timelines(run)
    whole = {
        k: (level, p.point_var)
        for k, p in run_probes(run).items()
        if (level := p.level) is not None
    }

    def levels(bench: BenchmarkResult) -> Levels:
        window = bench.extra.get("session_window_s")
        line = lines.get(bench.source)
        if line is None or not isinstance(window, list) or len(window) != 2:
            return whole
        if not all(isinstance(t, int | float) and not isinstance(t, bool) for t in window):
            return whole
        span = (float(window[0]), float(window[1]))
        return {**whole, **line.levels(span)}

    return levels


def comparison_host(comparison: Comparison, max_runs: int | None = None) -> HostEvidence | None:
    """The machine's probe evidence for `comparison` (module docstring), None when the current
    run has no probe record (older runs, other tools): then nothing tells machine from code."""
    now = [run_probes(r) for r in (*comparison.current_repeats, comparison.current)]
    if not any(now):
        return None
    baseline: Sequence[Run] = comparison.baseline[-max_runs:] if max_runs else comparison.baseline
    effects = run_effects(baseline, comparison.current)
    return host_evidence([run_probes(r) for r in baseline], effects.offsets, now)


def _baseline_names(comparison: Comparison, baseline: Sequence[Run]) -> list[str]:
    if not baseline:
        return []
    names = list(baseline[-1].benchmarks)
    if baseline[-1].partial:
        complete = next((r for r in reversed(baseline) if not r.partial), None)
        if complete is not None:
            names += [n for n in complete.benchmarks if n not in names]
    return names


def removed_cells(comparison: Comparison, max_runs: int | None = None) -> list[str]:
    """Baseline benchmarks the current run lacks because its planned cells no longer hold them."""
    planned = comparison.current.planned
    if planned is None or not comparison.current.whole:
        return []  # a lost shard's cells are missing, not removed
    baseline = comparison.baseline[-max_runs:] if max_runs else comparison.baseline
    current = comparison.current.benchmarks
    return [
        n for n in _baseline_names(comparison, baseline) if n not in current and n not in planned
    ]


def comparison_series(comparison: Comparison, max_runs: int | None = None) -> list[MetricSeries]:
    """One `MetricSeries` per (benchmark, metric) judged (see the module docstring).

    Only the newest `max_runs` baseline runs are used (all when None).
    """
    current = comparison.current
    repeats = comparison.current_repeats
    baseline: Sequence[Run] = comparison.baseline[-max_runs:] if max_runs else comparison.baseline
    effects = run_effects(baseline, current)
    probing = any(r.probes for r in (*repeats, current))
    base_levels = [window_levels(r) for r in baseline] if probing else []
    now_levels = [window_levels(r) for r in (*repeats, current)] if probing else []
    removed = set(removed_cells(comparison, max_runs))
    names = list(current.benchmarks)
    names += [
        n
        for n in _baseline_names(comparison, baseline)
        if n not in current.benchmarks and n not in removed
    ]
    series: list[MetricSeries] = []
    for fullname in names:
        cur_bench = current.benchmarks.get(fullname)
        cur = metric_values(cur_bench) if cur_bench else {}
        runs_with = [i for i, r in enumerate(baseline) if fullname in r.benchmarks]
        per_run = [metric_values(baseline[i].benchmarks[fullname]) for i in runs_with]
        metric_names = list(cur) + [m for m in (per_run[-1] if per_run else {}) if m not in cur]
        for metric in metric_names:
            kind = cur[metric][0] if metric in cur else per_run[-1][metric][0]
            timed = is_timed_metric(metric, kind)
            present = [j for j, run in enumerate(per_run) if metric in run]
            series.append(
                MetricSeries(
                    machine_id=comparison.machine_id,
                    fullname=fullname,
                    metric=metric,
                    kind=kind,
                    baseline=tuple(per_run[j][metric][1] for j in present),
                    current=cur[metric][1] if metric in cur else None,
                    current_repeats=tuple(
                        values[metric][1]
                        for values in (
                            metric_values(r.benchmarks[fullname])
                            for r in repeats
                            if fullname in r.benchmarks
                        )
                        if metric in values
                    )
                    if metric in cur and kind != "exact"
                    else (),
                    baseline_offsets=tuple(
                        effects.offsets[runs_with[j]] if timed else 0.0 for j in present
                    ),
                    run_effect_var=effects.var if timed else 0.0,
                    higher_is_better=higher_is_better(metric),
                    baseline_probes=tuple(
                        base_levels[runs_with[j]](baseline[runs_with[j]].benchmarks[fullname])
                        for j in present
                    )
                    if timed and base_levels
                    else (),
                    current_probes=tuple(
                        now_levels[i](r.benchmarks[fullname])
                        for i, r in enumerate((*repeats, current))
                        if fullname in r.benchmarks
                    )
                    if timed and now_levels and metric in cur
                    else (),
                    baseline_index=tuple(runs_with[j] for j in present),
                )
            )
    return series
