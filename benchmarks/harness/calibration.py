"""A/A calibration of the regression gate on this machine, and the slowdown knob it needs.

Two parts:

* **The knob.** `PHASEBENCH_CALIBRATION_SLOWDOWN=0.05` makes every forward call of the suite's
  model take 5 % longer: after a device sync the wrapper busy-waits 0.05 x the call's own
  synchronized duration, inside the benchmark's synchronized timed region. Prefill, each decode
  step and whole generations therefore slow by (about) that fraction; what the harness does
  around the forward (argmax, id copies) is not slowed, so the realised change is a little
  smaller, and the report shows it. The variable is read here only
  (`slowdown_from_env`, `maybe_inject_slowdown`, `extra_info`); every benchmark of such a run
  records `extra_info.calibration_slowdown`. Set to `0`, the wrapper runs with no wait, so A/A
  runs time exactly the code path the slowed runs time.
* **The orchestration** (`python -m benchmarks.harness.calibration`, `nox -s calibrate`): run the
  matrix K times unchanged (A/A) and M times per injected slowdown, interleaved, each as its own
  pytest-benchmark save in `out/calibrate/history/` (never `.benchmarks/`: calibration runs must
  not become real history); gate each A/A run against the other A/A runs (leave-one-out) and each
  slowed run against all A/A runs with `python -m reports gate --json`; then `analyse` the gate
  JSON (pure functions) into the realised false-alarm rate, the detection rate per slowdown and
  each benchmark's minimum detectable effect (MDE), written to `calibration.json` (schema 1)
  and `calibration.md`.

It deliberately does not judge anything itself: verdicts, intervals and MDEs are the reports
package's, called as a subprocess (the harness never imports reports, DESIGN §1), and pytest
runs are subprocesses too.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.devices import device_sync, resolve_device
from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.matrix import load_matrix

ENV_VAR = "PHASEBENCH_CALIBRATION_SLOWDOWN"
SCHEMA = 1
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MATRIX = Path("matrix/smoke.yaml")
DEFAULT_OUT = Path("out/calibrate")
REAL_HISTORY = ROOT / ".benchmarks"
# Metrics a slowed forward is expected to move: each benchmark's own timing (kind "timing") and
# the per-run timings phasebench adds (mirrors reports/metrics.py SCALAR_TIMINGS; the harness
# never imports reports). Memory and exact byte counts must not move: a `fail` there under a
# slowdown is a false alarm, not a detection.
SLOWED_SCALARS = ("ttft_s", "tpot_s", "itl_p50_s", "itl_p90_s", "itl_p99_s")
NOISY_KINDS = ("timing", "scalar")
NOT_JUDGED = ("new", "missing")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_MARK = "_phasebench_calibration_slowdown"  # set on the wrapper: makes wrapping idempotent
_Z95 = 1.959963984540054


class CalibrationError(PhasebenchError):
    """A calibration input (the slowdown variable, a CLI option) or run is invalid."""


# --- the slowdown knob ----------------------------------------------------------------------------


def parse_slowdown(text: str, *, source: str = ENV_VAR) -> float:
    """'0.05' or '5%' -> 0.05; CalibrationError naming `source` unless 0 <= value <= 1."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:  # also refuses nan and inf
        raise CalibrationError(
            f"{source}={text!r} is not a slowdown fraction: use a number from 0 to 1 "
            "(0.05 or 5% slows every forward by 5 %), or unset it"
        )
    return value


def slowdown_from_env(environ: Mapping[str, str] | None = None) -> float | None:
    """The injected slowdown fraction, or None when the variable is unset or empty."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_VAR)
    if raw is None or not raw.strip():
        return None
    return parse_slowdown(raw)


def busy_wait(seconds: float, clock: Callable[[], float] = time.perf_counter) -> None:
    """Spin until `clock` has advanced by `seconds` (sleep is too coarse for sub-ms steps)."""
    deadline = clock() + seconds
    while clock() < deadline:
        pass


def slowed(
    forward: Callable[..., Any],
    fraction: float,
    sync: Callable[[], None],
    clock: Callable[[], float] = time.perf_counter,
) -> Callable[..., Any]:
    """`forward`, followed by a busy-wait of `fraction` x its own synchronized duration."""

    @functools.wraps(forward)  # keeps the signature: compat.cache_kwarg inspects it
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sync()
        started = clock()
        out = forward(*args, **kwargs)
        sync()  # the forward's kernels are done: its duration is real, not queued work
        elapsed = clock() - started  # read at 0 too: A/A runs time the same code path
        if fraction > 0.0:
            busy_wait(fraction * elapsed, clock)
        return out

    setattr(wrapper, _MARK, fraction)
    return wrapper


def refuse_real_history(fraction: float, storage: str | None) -> None:
    """CalibrationError when a calibration run would save into a `.benchmarks/` folder.

    `storage` is pytest-benchmark's `--benchmark-storage` (`file://./.benchmarks` by default).
    Slowed or A/A-labelled runs must never become the history real runs are judged against.
    """
    if storage is None:
        return
    path = storage.removeprefix("file://")
    if ".benchmarks" in Path(path).parts:
        raise CalibrationError(
            f"{ENV_VAR}={fraction:g} is set but history goes to {storage}: calibration runs must "
            "never become real history; unset the variable, or save elsewhere with "
            "--benchmark-storage=file://out/calibrate/history (nox -s calibrate does)"
        )


def maybe_inject_slowdown(
    model: torch.nn.Module,
    device: torch.device | str,
    *,
    storage: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> torch.nn.Module:
    """Wrap `model.forward` in place when the slowdown variable is set; else do nothing.

    The same model object is returned (an engine built around it sees the wrapper too).
    Calling it again on a wrapped model does nothing, so a fixture may call it per test.
    `storage` (the run's `--benchmark-storage`) is checked with `refuse_real_history`.
    """
    fraction = slowdown_from_env(environ)
    if fraction is None:
        return model
    refuse_real_history(fraction, storage)
    if getattr(model.forward, _MARK, None) is not None:
        return model
    dev = resolve_device(device)
    model.forward = slowed(model.forward, fraction, functools.partial(device_sync, dev))
    return model


def extra_info(environ: Mapping[str, str] | None = None) -> dict[str, float]:
    """`{"calibration_slowdown": fraction}` for a calibration run; `{}` for a real one."""
    fraction = slowdown_from_env(environ)
    return {} if fraction is None else {"calibration_slowdown": fraction}


# --- the pure analysis ----------------------------------------------------------------------------


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


def _median(values: Sequence[float | None]) -> float | None:
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
    }


def robust_change(
    slowed_runs: Sequence[GateOutcome], aa: Sequence[GateOutcome], key: tuple[str, str]
) -> float | None:
    """Median current value of the slowed runs / median of the A/A runs - 1, for one metric.

    The gate's own ratio compares with the *mean* of the baseline runs, so one A/A run caught
    in a burst of machine load drags every slowed run's ratio down; medians over runs do not
    move for one such run, which shows whether the knob slowed what it should.
    """
    slowed_value = _median(
        [e.get("current_value") for o in slowed_runs for e in o.judged if _key(e) == key]
    )
    aa_value = _median([e.get("current_value") for o in aa for e in o.judged if _key(e) == key])
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
        "slowed_verdicts": _rate(sum(e.get("verdict") == "fail" for e in moved), len(moved)),
        "false_fails_on_unslowed_metrics": sum(e.get("verdict") == "fail" for e in unmoved),
        "realised_change_median": _median(
            [e["ratio"] - 1 for e in timing if isinstance(e.get("ratio"), int | float)]
        ),
        "realised_change_robust_median": _median(
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
            "mde": _median([e.get("mde") for e in aa_entries]),
            "threshold": _median([e.get("threshold") for e in aa_entries]),
            "between_run_cv": _median([e.get("between_run_cv") for e in aa_entries]),
            "within_run_cv": _median([e.get("within_run_cv") for e in aa_entries]),
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
                    "realised_change_median": _median(
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
            "median": _median([r["mde"] for r in timing_rows]),
            "max": max((r["mde"] for r in guarded), default=None),
            "at_or_below_threshold": sum(r["mde"] <= r["threshold"] for r in guarded),
        },
        "benchmarks": rows,
    }


# --- rendering ------------------------------------------------------------------------------------


def _pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value * 100:.{digits}f} %"


def _share(rate: Mapping[str, Any]) -> str:
    if not rate["of"]:
        return "n/a"
    low, high = rate["ci95"]
    return (
        f"{rate['count']}/{rate['of']} = {_pct(rate['rate'])} (95 % CI {_pct(low)} to {_pct(high)})"
    )


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
            f"({', '.join(_pct(s, 0) for s in context.get('slowdowns', []))}); gate threshold "
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
        s = _pct(d["slowdown"], 0)
        lines += [
            f"| {s} slowdown: suite runs the gate fails | {_share(d['suite_runs'])} |",
            f"| {s} slowdown: benchmark timings caught | {_share(d['timing_verdicts'])} |",
            f"| {s} slowdown: realised change of the timings, median (gate ratio / robust) | "
            f"{_pct(d['realised_change_median'])} / {_pct(d['realised_change_robust_median'])} |",
            f"| {s} slowdown: `fail` on metrics it should not move | "
            f"{d['false_fails_on_unslowed_metrics']} |",
        ]
    mde = result["mde"]
    lines += [
        f"| MDE of benchmark timings, median / max | {_pct(mde['median'])} / {_pct(mde['max'])} |",
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
    header += [f"caught at {_pct(s, 0)} (realised)" for s in slowdowns]
    lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in result["benchmarks"]:
        cells = [
            f"`{_short(row['fullname'])}`",
            f"`{row['metric']}`",
            _pct(row["mde"]),
            _pct(row["between_run_cv"]),
            f"{row['aa_fails']['count']}/{row['aa_fails']['of']}",
        ]
        cells += [
            f"{d['count']}/{d['of']} ({_pct(d['realised_change_robust'])})"
            for d in row["detection"]
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# --- orchestration --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    """One pytest run of the matrix: its save label and injected slowdown (0 = A/A)."""

    label: str
    slowdown: float


def schedule(aa_runs: int, slow_runs: int, slowdowns: Sequence[float]) -> list[RunSpec]:
    """Every run, interleaved evenly: a drift in machine load then hits A/A and slowed alike."""
    queues = [[RunSpec(f"aa-{i:02d}", 0.0) for i in range(1, aa_runs + 1)]]
    for s in slowdowns:
        queues.append([RunSpec(f"slow-{s * 100:g}pct-{i:02d}", s) for i in range(1, slow_runs + 1)])
    keyed = [
        ((i + 0.5) / len(queue), q, spec)
        for q, queue in enumerate(queues)
        for i, spec in enumerate(queue)
    ]
    return [spec for _, _, spec in sorted(keyed, key=lambda k: (k[0], k[1]))]


@dataclass(frozen=True)
class Plan:
    """What `main` runs: the matrix, the run counts, where everything goes, what to pass on."""

    matrix: Path
    aa_runs: int
    slow_runs: int
    slowdowns: tuple[float, ...]
    out: Path
    reuse: bool
    pytest_args: tuple[str, ...]
    gate_args: tuple[str, ...]

    @property
    def history(self) -> Path:
        """The calibration's own pytest-benchmark storage (never `.benchmarks/`)."""
        return self.out / "history"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Plan:
        """Validate the CLI's options (CalibrationError / MatrixError on bad input)."""
        if args.aa_runs < 2:
            raise CalibrationError(
                f"--aa-runs {args.aa_runs}: leave-one-out needs at least 2 A/A runs (8 is a "
                "useful minimum)"
            )
        if args.slow_runs < 0:
            raise CalibrationError(f"--slow-runs {args.slow_runs} is negative: use 0 or more")
        slowdowns = tuple(
            parse_slowdown(item, source="--slowdowns")
            for item in args.slowdowns.split(",")
            if item.strip()
        )
        if any(s == 0.0 for s in slowdowns):
            raise CalibrationError("--slowdowns holds 0: the A/A runs are the 0 % case; drop it")
        out = Path(args.out).resolve()
        if out == REAL_HISTORY or REAL_HISTORY in out.parents:
            raise CalibrationError(
                f"--out {args.out} is inside .benchmarks/: calibration runs must never become "
                "real history; use out/calibrate"
            )
        load_matrix(Path(args.matrix))  # a broken matrix fails here, before any run
        gate_args: list[str] = []
        if args.threshold:
            gate_args += ["--threshold", args.threshold]
        if args.alpha is not None:
            gate_args += ["--alpha", str(args.alpha)]
        return cls(
            matrix=Path(args.matrix).resolve(),
            aa_runs=args.aa_runs,
            slow_runs=args.slow_runs if slowdowns else 0,
            slowdowns=slowdowns,
            out=out,
            reuse=args.reuse,
            pytest_args=tuple(shlex.split(args.pytest_args or "")),
            gate_args=tuple(gate_args),
        )


def pytest_command(plan: Plan, spec: RunSpec) -> list[str]:
    """The pytest run that saves `spec`'s history file into the calibration storage."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "benchmarks",
        f"--matrix={plan.matrix}",
        # Peaks are irrelevant here, and measuring them would write .phasebench/peaks.json.
        "--peaks=none",
        f"--benchmark-save={spec.label}",
        "--benchmark-save-data",
        f"--benchmark-storage=file://{plan.history}",
        "-p",
        "no:cacheprovider",
        "-q",
        *plan.pytest_args,
    ]


def gate_command(plan: Plan, current: Path, baseline: Sequence[Path], json_path: Path) -> list[str]:
    """`python -m reports gate` judging `current` against exactly `baseline`."""
    return [
        sys.executable,
        "-m",
        "reports",
        "gate",
        "--current",
        str(current),
        "--baseline",
        *(str(p) for p in baseline),
        "--json",
        str(json_path),
        *plan.gate_args,
    ]


def saved_file(history: Path, label: str) -> Path | None:
    """The newest history file pytest-benchmark saved under `label` (`NNNN_<label>.json`)."""
    found = sorted(history.rglob(f"[0-9][0-9][0-9][0-9]_{label}.json"))
    return found[-1] if found else None


def _say(line: str) -> None:
    print(f"calibrate: {line}", flush=True)


def run_suite(plan: Plan, spec: RunSpec, index: int, total: int) -> tuple[Path, float]:
    """Run the matrix once with `spec`'s slowdown; return its history file and 1-min load."""
    existing = saved_file(plan.history, spec.label)
    what = "A/A" if spec.slowdown == 0.0 else f"{_pct(spec.slowdown, 0)} slowdown"
    if existing is not None and plan.reuse:
        _say(f"[{index}/{total}] {spec.label} ({what}): reusing {existing}")
        return existing, math.nan
    for stale in plan.history.rglob(f"[0-9][0-9][0-9][0-9]_{spec.label}.json"):
        stale.unlink()  # a fresh calibration must not mix in an older run of the same label
    logs = plan.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{spec.label}.log"
    # pytest-benchmark disables itself when PYTEST_XDIST_WORKER is set, which a calibration
    # started from an xdist worker (the test suite) would hand down to its pytest runs.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env[ENV_VAR] = repr(spec.slowdown)
    load_1m = os.getloadavg()[0]
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as sink:
        code = subprocess.call(
            pytest_command(plan, spec), cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    saved = saved_file(plan.history, spec.label)
    _say(
        f"[{index}/{total}] {spec.label} ({what}): pytest exit {code} in "
        f"{time.perf_counter() - started:.1f} s, load {load_1m:.2f}; log {log}"
    )
    if saved is None:
        raise CalibrationError(
            f"run {spec.label} saved no history (pytest exit {code}); read {log} and fix the "
            "matrix or the failing cells"
        )
    return saved, load_1m


def run_gate(plan: Plan, spec: RunSpec, current: Path, baseline: Sequence[Path]) -> GateOutcome:
    """Gate `current` against `baseline`; the gate's JSON becomes the outcome."""
    gates = plan.out / "gate"
    gates.mkdir(parents=True, exist_ok=True)
    json_path = gates / f"{spec.label}.json"
    json_path.unlink(missing_ok=True)
    done = subprocess.run(
        gate_command(plan, current, baseline, json_path),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if not json_path.is_file():
        raise CalibrationError(
            f"the gate wrote no JSON for {spec.label} (exit {done.returncode}): "
            f"{done.stderr.strip() or done.stdout.strip()}"
        )
    gate = json.loads(json_path.read_text(encoding="utf-8"))
    return GateOutcome(spec.label, spec.slowdown, gate, done.returncode)


def _machine(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    info = data.get("machine_info", {}).get("phasebench", {})
    fingerprint = info.get("fingerprint", {})
    return {
        "machine_id": info.get("fingerprint_id"),
        "cpu": fingerprint.get("cpu"),
        "accelerator": fingerprint.get("accelerator"),
        "torch": fingerprint.get("torch"),
        "transformers": fingerprint.get("transformers"),
        "torch_num_threads": fingerprint.get("torch_num_threads"),
    }


def check_reuse(plan: Plan) -> None:
    """Record what the saved runs measured; refuse `--reuse` of runs made with other settings."""
    manifest = plan.out / "calibration-runs.json"
    settings = {
        "matrix": _display(plan.matrix),
        "pytest_args": list(plan.pytest_args),
        "threads": {k: os.environ.get(k) for k in THREAD_VARIABLES},
    }
    if plan.reuse and manifest.is_file():
        saved = json.loads(manifest.read_text(encoding="utf-8"))
        if saved != settings:
            raise CalibrationError(
                f"--reuse: the runs in {plan.history} were made with {saved}, not {settings}; "
                "use the same settings, or drop --reuse (or pick another --out)"
            )
    manifest.write_text(json.dumps(settings), encoding="utf-8")


def calibrate(plan: Plan, command: str) -> dict[str, Any]:
    """Run (or reuse) every suite run, gate them all, analyse; write the JSON and Markdown."""
    plan.history.mkdir(parents=True, exist_ok=True)
    check_reuse(plan)
    runs = schedule(plan.aa_runs, plan.slow_runs, plan.slowdowns)
    files: dict[str, Path] = {}
    loads: list[float] = []
    for index, spec in enumerate(runs, 1):
        files[spec.label], load_1m = run_suite(plan, spec, index, len(runs))
        loads.append(load_1m)
    aa = [spec for spec in runs if spec.slowdown == 0.0]
    aa_files = [files[s.label] for s in aa]
    outcomes = []
    for spec in runs:
        current = files[spec.label]
        # A/A: leave-one-out against the other A/A runs; slowed: against every A/A run.
        baseline = [p for p in aa_files if p != current]
        outcomes.append(run_gate(plan, spec, current, baseline))
    result = analyse(outcomes)
    result["context"] = {
        "matrix": _display(plan.matrix),
        "aa_runs": plan.aa_runs,
        "slow_runs": plan.slow_runs,
        "slowdowns": list(plan.slowdowns),
        "threshold": _option(plan.gate_args, "--threshold"),
        "alpha": _option(plan.gate_args, "--alpha"),
        "pytest_args": list(plan.pytest_args),
        "load_average_1m": _median(loads),
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "history": str(plan.history),
        **_machine(aa_files[0]),
    }
    for run in result["runs"]:
        run["history_file"] = str(files[run["label"]])
    (plan.out / "calibration.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    (plan.out / "calibration.md").write_text(render_markdown(result), encoding="utf-8")
    return result


def _display(path: Path) -> str:
    """`path` relative to the repository when it is inside it (what a user would type)."""
    return str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)


def _option(args: Sequence[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.harness.calibration",
        description="A/A calibration: the gate's false-alarm rate, detection power and MDE here",
    )
    p.add_argument("--matrix", default=str(DEFAULT_MATRIX), help="matrix file (default smoke)")
    p.add_argument("--aa-runs", type=int, default=8, help="unchanged runs (default 8)")
    p.add_argument("--slow-runs", type=int, default=4, help="runs per slowdown (default 4)")
    p.add_argument(
        "--slowdowns", default="0.05,0.10", help="injected slowdowns, comma-separated (0.05,10%%)"
    )
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (default out/calibrate)")
    p.add_argument(
        "--reuse", action="store_true", help="reuse runs already saved under the same labels"
    )
    p.add_argument("--threshold", help="passed to the gate (default: the gate's 5%%)")
    p.add_argument("--alpha", type=float, help="passed to the gate (default: the gate's 0.01)")
    p.add_argument("--pytest-args", default="", help='extra pytest arguments, e.g. "-k llama"')
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the calibration; 0 when done, 2 on bad input (one line on stderr)."""
    args = _parser().parse_args(argv)
    # Thread settings change every timing: the reproduce line carries them.
    threads = [f"{k}={os.environ[k]}" for k in THREAD_VARIABLES if k in os.environ]
    command = shlex.join(
        [
            *threads,
            "python",
            "-m",
            "benchmarks.harness.calibration",
            *(sys.argv[1:] if argv is None else argv),
        ]
    )
    try:
        plan = Plan.from_args(args)
        result = calibrate(plan, command)
    except PhasebenchError as error:
        print(str(error).replace("\n", " "), file=sys.stderr)
        return 2
    print(render_markdown(result), end="")
    _say(f"wrote {plan.out / 'calibration.json'} and {plan.out / 'calibration.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
