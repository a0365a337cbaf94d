"""Which metrics a benchmark has, and how to turn a comparison's runs into `MetricSeries`.

- The **primary timing** is pytest-benchmark's own statistic, from the raw rounds
  (`stats.data`), named after phasebench's measurement: `prefill_s` (test_prefill),
  `decode_step_s` (test_decode), `e2e_s` (test_generate), `time_s` for anything else.
- **Scalar timings** phasebench adds per run in `extra_info` (`ttft_s`, `tpot_s`, ITL
  percentiles) and **peak memory** (`peak_*_bytes`) are noisy single values per run.
- **Exact** metrics are deterministic byte counts: every `kv_*_bytes` and `weights_bytes`.

Throughputs (`*_tok_per_s`) are derived from the timings and not judged twice; the decode slope
can be negative and has no meaningful ratio.

Deliberately not here: statistics (`analysis`), file reading (`history`).
"""

from __future__ import annotations

from collections.abc import Sequence

from reports.analysis import MetricKind, MetricSeries
from reports.history import BenchmarkResult, Comparison, Run

PRIMARY_BY_MEASUREMENT = {
    "prefill": "prefill_s",
    "decode": "decode_step_s",
    "generate": "e2e_s",
}
SCALAR_TIMINGS = ("ttft_s", "tpot_s", "itl_p50_s", "itl_p90_s", "itl_p99_s")
MEMORY_METRICS = ("peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes")


def primary_metric(bench: BenchmarkResult) -> str:
    """The name of the benchmark's own timing statistic (see the module docstring)."""
    measurement = bench.extra.get("measurement")
    key = measurement if isinstance(measurement, str) else bench.group
    return PRIMARY_BY_MEASUREMENT.get(key, "time_s")


def is_exact_metric(name: str) -> bool:
    """True for deterministic byte counts: `kv_*_bytes` and `weights_bytes`."""
    return name == "weights_bytes" or (name.startswith("kv_") and name.endswith("_bytes"))


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def metric_values(bench: BenchmarkResult) -> dict[str, tuple[MetricKind, tuple[float, ...]]]:
    """Every judged metric of one benchmark in one run: name -> (kind, values)."""
    primary = primary_metric(bench)
    out: dict[str, tuple[MetricKind, tuple[float, ...]]] = {primary: ("timing", bench.rounds_s)}
    for name in (*SCALAR_TIMINGS, *MEMORY_METRICS):
        value = _number(bench.extra.get(name))
        if name != primary and value is not None and value > 0:
            out[name] = ("scalar", (value,))
    for name, raw in bench.extra.items():
        # cheap suffix test first: extra_info also holds long per-step lists
        if name.endswith("_bytes") and is_exact_metric(name):
            value = _number(raw)
            if value is not None:
                out[name] = ("exact", (value,))
    return out


def comparison_series(comparison: Comparison, max_runs: int | None = None) -> list[MetricSeries]:
    """One `MetricSeries` per (benchmark, metric) seen in the current run or the last baseline.

    Only the newest `max_runs` baseline runs are used (all when None). Benchmarks of older
    baseline runs only (removed long ago) are not reported as missing.
    """
    current = comparison.current
    repeats = comparison.current_repeats
    baseline: Sequence[Run] = comparison.baseline[-max_runs:] if max_runs else comparison.baseline
    names = list(current.benchmarks)
    if baseline:
        names += [n for n in baseline[-1].benchmarks if n not in current.benchmarks]
    series: list[MetricSeries] = []
    for fullname in names:
        cur_bench = current.benchmarks.get(fullname)
        cur = metric_values(cur_bench) if cur_bench else {}
        per_run = [
            metric_values(r.benchmarks[fullname]) for r in baseline if fullname in r.benchmarks
        ]
        metric_names = list(cur) + [m for m in (per_run[-1] if per_run else {}) if m not in cur]
        for metric in metric_names:
            kind = cur[metric][0] if metric in cur else per_run[-1][metric][0]
            series.append(
                MetricSeries(
                    machine_id=comparison.machine_id,
                    fullname=fullname,
                    metric=metric,
                    kind=kind,
                    baseline=tuple(run[metric][1] for run in per_run if metric in run),
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
                )
            )
    return series
