"""History-mode calibration: run the matrix K times unchanged and M times slowed, gate each run.

`python -m benchmarks.calibration` (`nox -s calibrate`): run the matrix K times
unchanged (A/A) and M times per injected slowdown, interleaved, each as its own
pytest-benchmark save in `out/calibrate/history/` (never `.benchmarks/`: calibration runs must
not become real history); gate each A/A run against the other A/A runs (leave-one-out) and each
slowed run against all A/A runs with `python -m reports gate --json`; then
`analysis.analyse` the gate JSON into the realised false-alarm rate, the detection
rate per slowdown and each benchmark's minimum detectable effect (MDE), written to
`calibration.json` (schema 1) and `calibration.md`. `--ab` hands over to `ab`.

It deliberately does not judge anything itself: verdicts, intervals and MDEs are the reports
package's, called as a subprocess (the harness never imports reports, DESIGN §1), and pytest
runs are subprocesses too.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.calibration.analysis import (
    GateOutcome,
    analyse,
    median_of,
    pct,
    render_markdown,
)
from benchmarks.calibration.slowdown import ENV_VAR, CalibrationError, parse_slowdown
from benchmarks.harness.matrix.parse import load_matrix

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MATRIX = Path("matrix/smoke.yaml")
DEFAULT_OUT = Path("out/calibrate")
REAL_HISTORY = ROOT / ".benchmarks"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


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


def say(line: str) -> None:
    print(f"calibrate: {line}", flush=True)


def run_suite(plan: Plan, spec: RunSpec, index: int, total: int) -> tuple[Path, float]:
    """Run the matrix once with `spec`'s slowdown; return its history file and 1-min load."""
    existing = saved_file(plan.history, spec.label)
    what = "A/A" if spec.slowdown == 0.0 else f"{pct(spec.slowdown, 0)} slowdown"
    if existing is not None and plan.reuse:
        say(f"[{index}/{total}] {spec.label} ({what}): reusing {existing}")
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
    say(
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
        "load_average_1m": median_of(loads),
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
