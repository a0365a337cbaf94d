"""The pure analysis of a calibration: verdict JSON of many runs -> rates, MDEs, Markdown.

Input: one `GateOutcome` per suite run (its label, injected slowdown, 0 = A/A, and the verdict
JSON the history gate or the A/B command wrote for it). Output (`analyse`, schema 1): the
realised false-alarm rate of the A/A runs, the detection rate per injected slowdown, and per
benchmark and metric the MDE, the noise and what was caught; `render_markdown` writes it up.
Both modes' JSON have the same per-entry fields (`fullname`, `metric`, `kind`, `verdict`,
`ratio`, `mde`, `threshold`), so one analysis serves both.

No I/O, no subprocesses: `run` and `ab` produce the outcomes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SCHEMA = 1
# Metrics a slowed forward is expected to move: each benchmark's own timing (kind "timing") and
# the per-run timings phasebench adds (mirrors reports/analysis/metrics.py SCALAR_TIMINGS; the
# harness
# never imports reports). Memory and exact byte counts must not move: a `fail` there under a
# slowdown is a false alarm, not a detection.
SLOWED_SCALARS = ("ttft_s", "tpot_s", "itl_p50_s", "itl_p90_s", "itl_p99_s")
NOISY_KINDS = ("timing", "scalar")
NOT_JUDGED = ("new", "missing")
_Z95 = 1.959963984540054


@dataclass(frozen=True)
class GateOutcome:
    """One suite run judged by the gate: its label, injected slowdown (0 = A/A) and gate JSON."""

    label: str
    slowdown: float
    gate: Mapping[str, Any]
    exit_code: int = 0

    @property
    def judged(self) -> list[Mapping[str, Any]]:
        """The gate's verdict entries that compare something (not `new` / `missing`)."""
        return [b for b in self.gate.get("benchmarks", ()) if b.get("verdict") not in NOT_JUDGED]

    @property
    def failed(self) -> bool:
        """True when the gate would have failed the build (any `fail` verdict)."""
        return any(b.get("verdict") == "fail" for b in self.judged)


def expected_to_slow(entry: Mapping[str, Any]) -> bool:
    """Whether an injected slowdown should move this metric (a timing, not memory or bytes)."""
    return entry.get("kind") == "timing" or entry.get("metric") in SLOWED_SCALARS


def wilson_interval(successes: int, trials: int) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion (honest for 0 of 8, unlike p ± 2 se)."""
    if trials == 0:
        return (0.0, 1.0)
    p = successes / trials
    z2 = _Z95 * _Z95
    denominator = 1.0 + z2 / trials
    centre = (p + z2 / (2 * trials)) / denominator
    half = _Z95 * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def _rate(successes: int, trials: int) -> dict[str, Any]:
    low, high = wilson_interval(successes, trials)
    return {
        "count": successes,
        "of": trials,
        "rate": successes / trials if trials else None,
        "ci95": [low, high],
    }


def median_of(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(present) if present else None


def _key(entry: Mapping[str, Any]) -> tuple[str, str]:
    return (str(entry.get("fullname")), str(entry.get("metric")))


def false_alarms(aa: Sequence[GateOutcome]) -> dict[str, Any]:
    """Realised false alarms of the A/A gates: per suite run, per verdict, per timing benchmark."""
    judged = [e for o in aa for e in o.judged]
    timing = [e for e in judged if e.get("kind") == "timing"]
    return {
        "suite_runs": _rate(sum(o.failed for o in aa), len(aa)),
        "verdicts": _rate(sum(e.get("verdict") == "fail" for e in judged), len(judged)),
        "timing_verdicts": _rate(sum(e.get("verdict") == "fail" for e in timing), len(timing)),
        "inconclusive_timing": _rate(
            sum(e.get("verdict") == "inconclusive" for e in timing), len(timing)
        ),
        # How tight the A/A intervals are: (ci_high - ci_low) / 2 of the ratio, median.
        "half_width_median": median_of([half_width(e) for e in timing]),
    }


def half_width(entry: Mapping[str, Any]) -> float | None:
    """Half the 95 % interval of a verdict's ratio (a fraction: 0.01 is +-1 %), if it has one."""
    low, high = entry.get("ci_low"), entry.get("ci_high")
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return None
    return (float(high) - float(low)) / 2


def robust_change(
    slowed_runs: Sequence[GateOutcome], aa: Sequence[GateOutcome], key: tuple[str, str]
) -> float | None:
    """Median current value of the slowed runs / median of the A/A runs - 1, for one metric.

    The gate's own ratio compares with the *mean* of the baseline runs, so one A/A run caught
    in a burst of machine load drags every slowed run's ratio down; medians over runs do not
    move for one such run, which shows whether the knob slowed what it should.
    """
    slowed_value = median_of(
        [e.get("current_value") for o in slowed_runs for e in o.judged if _key(e) == key]
    )
    aa_value = median_of([e.get("current_value") for o in aa for e in o.judged if _key(e) == key])
    if slowed_value is None or aa_value is None or aa_value <= 0:
        return None
    return slowed_value / aa_value - 1


def detection(
    slowed_runs: Sequence[GateOutcome], slowdown: float, aa: Sequence[GateOutcome] = ()
) -> dict[str, Any]:
    """How often the gate caught an injected slowdown, and what it flagged that it should not."""
    moved = [e for o in slowed_runs for e in o.judged if expected_to_slow(e)]
    timing = [e for e in moved if e.get("kind") == "timing"]
    unmoved = [e for o in slowed_runs for e in o.judged if not expected_to_slow(e)]
    timing_keys = sorted({_key(e) for e in timing})
    return {
        "slowdown": slowdown,
        "suite_runs": _rate(sum(o.failed for o in slowed_runs), len(slowed_runs)),
        "timing_verdicts": _rate(sum(e.get("verdict") == "fail" for e in timing), len(timing)),
        "timing_by_metric": {
            metric: _rate(
                sum(e.get("verdict") == "fail" for e in timing if e.get("metric") == metric),
                sum(e.get("metric") == metric for e in timing),
            )
            for metric in sorted({str(e.get("metric")) for e in timing})
        },
        "slowed_verdicts": _rate(sum(e.get("verdict") == "fail" for e in moved), len(moved)),
        "false_fails_on_unslowed_metrics": sum(e.get("verdict") == "fail" for e in unmoved),
        "realised_change_median": median_of(
            [e["ratio"] - 1 for e in timing if isinstance(e.get("ratio"), int | float)]
        ),
        "realised_change_robust_median": median_of(
            [robust_change(slowed_runs, aa, key) for key in timing_keys]
        ),
    }


def benchmark_rows(outcomes: Sequence[GateOutcome]) -> list[dict[str, Any]]:
    """One row per noisy (benchmark, metric): MDE, noise, A/A fails, detection per slowdown.

    The MDE and CVs are medians over the A/A gates (each judged against the other K - 1 A/A
    runs), i.e. what this benchmark could guard with that many baseline runs on this machine.
    """
    aa = [o for o in outcomes if o.slowdown == 0.0]
    slowdowns = sorted({o.slowdown for o in outcomes if o.slowdown > 0.0})
    keys: dict[tuple[str, str], str] = {}
    for o in outcomes:
        for e in o.judged:
            if e.get("kind") in NOISY_KINDS:
                keys.setdefault(_key(e), str(e.get("kind")))
    rows = []
    for key in sorted(keys, key=lambda k: (keys[k] != "timing", k)):
        aa_entries = [e for o in aa for e in o.judged if _key(e) == key]
        row: dict[str, Any] = {
            "fullname": key[0],
            "metric": key[1],
            "kind": keys[key],
            "mde": median_of([e.get("mde") for e in aa_entries]),
            "threshold": median_of([e.get("threshold") for e in aa_entries]),
            "between_run_cv": median_of([e.get("between_run_cv") for e in aa_entries]),
            "within_run_cv": median_of([e.get("within_run_cv") for e in aa_entries]),
            "aa_fails": _rate(sum(e.get("verdict") == "fail" for e in aa_entries), len(aa_entries)),
            "aa_inconclusive": sum(e.get("verdict") == "inconclusive" for e in aa_entries),
            "detection": [],
        }
        for slowdown in slowdowns:
            entries = [
                e for o in outcomes if o.slowdown == slowdown for e in o.judged if _key(e) == key
            ]
            row["detection"].append(
                {
                    "slowdown": slowdown,
                    **_rate(sum(e.get("verdict") == "fail" for e in entries), len(entries)),
                    "realised_change_median": median_of(
                        [e["ratio"] - 1 for e in entries if isinstance(e.get("ratio"), int | float)]
                    ),
                    "realised_change_robust": robust_change(
                        [o for o in outcomes if o.slowdown == slowdown], aa, key
                    ),
                }
            )
        rows.append(row)
    return rows


def analyse(outcomes: Sequence[GateOutcome]) -> dict[str, Any]:
    """The calibration result (schema 1) from every run's gate JSON; pure."""
    aa = [o for o in outcomes if o.slowdown == 0.0]
    slowdowns = sorted({o.slowdown for o in outcomes if o.slowdown > 0.0})
    rows = benchmark_rows(outcomes)
    timing_rows = [r for r in rows if r["kind"] == "timing"]
    guarded = [r for r in timing_rows if r["mde"] is not None and r["threshold"] is not None]
    return {
        "schema": SCHEMA,
        "runs": [
            {
                "label": o.label,
                "slowdown": o.slowdown,
                "gate_status": o.gate.get("status"),
                "gate_exit": o.exit_code,
                "failed": o.failed,
                "counts": dict(o.gate.get("counts", {})),
                "fails": sorted(
                    f"{e.get('fullname')} {e.get('metric')}"
                    for e in o.judged
                    if e.get("verdict") == "fail"
                ),
            }
            for o in outcomes
        ],
        "false_alarm": false_alarms(aa),
        "detection": [
            detection([o for o in outcomes if o.slowdown == s], s, aa) for s in slowdowns
        ],
        "mde": {
            "timing_benchmarks": len(timing_rows),
            "median": median_of([r["mde"] for r in timing_rows]),
            "max": max((r["mde"] for r in guarded), default=None),
            "at_or_below_threshold": sum(r["mde"] <= r["threshold"] for r in guarded),
        },
        "benchmarks": rows,
    }


# --- rendering ------------------------------------------------------------------------------------


def pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value * 100:.{digits}f} %"


def _share(rate: Mapping[str, Any]) -> str:
    if not rate["of"]:
        return "n/a"
    low, high = rate["ci95"]
    return f"{rate['count']}/{rate['of']} = {pct(rate['rate'])} (95 % CI {pct(low)} to {pct(high)})"


def _short(fullname: str) -> str:
    return fullname.rsplit("::", 1)[-1]


def render_markdown(result: Mapping[str, Any]) -> str:
    """`calibration.md`: the headline rates, then the per-benchmark table with MDE per cell."""
    context = result.get("context", {})
    fa = result["false_alarm"]
    lines = [
        "# A/A calibration of the regression gate",
        "",
    ]
    if context:
        load = context.get("load_average_1m")
        lines += [
            f"Matrix `{context.get('matrix')}`, {context.get('aa_runs')} A/A runs, "
            f"{context.get('slow_runs')} runs per injected slowdown "
            f"({', '.join(pct(s, 0) for s in context.get('slowdowns', []))}); gate threshold "
            f"{context.get('threshold') or 'default (5 %)'}, alpha "
            f"{context.get('alpha') or 'default (0.01)'}. Machine `{context.get('machine_id')}` "
            f"({context.get('cpu')}, {context.get('torch_num_threads')} torch threads); load "
            f"average {'n/a' if load is None else f'{load:.2f}'} (1 min, median at the start "
            "of the runs). Created "
            f"{context.get('created')}.",
            "",
            f"Reproduce: `{context.get('command')}`",
            "",
        ]
    lines += [
        "| measure | result |",
        "| --- | --- |",
        f"| A/A suite runs with any `fail` (false alarm per run) | {_share(fa['suite_runs'])} |",
        f"| A/A `fail` verdicts, all judged metrics | {_share(fa['verdicts'])} |",
        f"| A/A `fail` verdicts, benchmark timings | {_share(fa['timing_verdicts'])} |",
        f"| A/A `inconclusive` benchmark timings | {_share(fa['inconclusive_timing'])} |",
    ]
    for d in result["detection"]:
        s = pct(d["slowdown"], 0)
        lines += [
            f"| {s} slowdown: suite runs the gate fails | {_share(d['suite_runs'])} |",
            f"| {s} slowdown: benchmark timings caught | {_share(d['timing_verdicts'])} |",
            f"| {s} slowdown: realised change of the timings, median (gate ratio / robust) | "
            f"{pct(d['realised_change_median'])} / {pct(d['realised_change_robust_median'])} |",
            f"| {s} slowdown: `fail` on metrics it should not move | "
            f"{d['false_fails_on_unslowed_metrics']} |",
        ]
    mde = result["mde"]
    lines += [
        f"| MDE of benchmark timings, median / max | {pct(mde['median'])} / {pct(mde['max'])} |",
        f"| benchmark timings whose MDE ≤ threshold | {mde['at_or_below_threshold']} of "
        f"{mde['timing_benchmarks']} |",
        "",
        "## Per benchmark",
        "",
        "MDE and run-to-run CV: medians over the A/A gates (each against the other A/A runs). "
        "Caught: slowed runs the gate failed on this metric; realised: median slowed run / "
        "median A/A run - 1.",
        "",
    ]
    slowdowns = [d["slowdown"] for d in result["detection"]]
    header = ["benchmark", "metric", "MDE", "run-to-run CV", "A/A fails"]
    header += [f"caught at {pct(s, 0)} (realised)" for s in slowdowns]
    lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in result["benchmarks"]:
        cells = [
            f"`{_short(row['fullname'])}`",
            f"`{row['metric']}`",
            pct(row["mde"]),
            pct(row["between_run_cv"]),
            f"{row['aa_fails']['count']}/{row['aa_fails']['of']}",
        ]
        cells += [
            f"{d['count']}/{d['of']} ({pct(d['realised_change_robust'])})" for d in row["detection"]
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
