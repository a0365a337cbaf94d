"""`--ab` calibration: A/B mode and history mode judged on the same runs, side by side.

`python -m benchmarks.calibration --ab` (`nox -s calibrate -- --ab ...`) runs the A/B
command (`python -m benchmarks.ab`) K times with nothing changed (A/A: both sides the
working tree's stack, measured with its apparatus) and M times per injected slowdown, the head
slowed through `--head-env PHASEBENCH_CALIBRATION_SLOWDOWN=s` (the base gets `=0`, so both
sides time the same wrapped code path). Every run leaves `ab.json` (its paired verdicts) and the
two sides' pytest-benchmark files. From the same files:

* **A/B mode**: each run's `ab.json` is its outcome;
* **history mode**: each run's *head* file is gated as the current run (`python -m reports gate
  --current HEAD --baseline ...`) against the *base* files of the A/A runs: leave-one-out for
  an A/A run (its own base, timed interleaved with it, is left out), all K for a slowed run.

`analysis.analyse` turns each mode's outcomes into false-alarm and detection rates
and MDEs; `calibration.json` (schema 1) holds `{"ab": ..., "history": ...}`, and
`calibration.md` puts the headline figures of both modes side by side, then each mode's table.

It deliberately judges nothing itself (the reports package does, as subprocesses).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.ab.plan import BUDGET_S, DEFAULT_PAIRS, MAX_S, MIN_PAIRS, TARGET_HALF_WIDTH
from benchmarks.calibration.analysis import (
    SCHEMA,
    GateOutcome,
    analyse,
    median_of,
    pct,
    render_markdown,
)
from benchmarks.calibration.run import ROOT, Plan, RunSpec, run_gate, schedule
from benchmarks.calibration.slowdown import ENV_VAR, CalibrationError


def ab_command(plan: Plan, spec: RunSpec, pairs: int | None, base: str, seed: int) -> list[str]:
    """The A/B run of `spec`: the head slowed by `spec.slowdown`, the base by 0.

    `pairs` None leaves the A/B command's own default (its pairs and time budget).
    """
    return [
        sys.executable,
        "-m",
        "benchmarks.ab",
        "--base",
        base,
        "--apparatus",
        "head",
        "--matrix",
        str(plan.matrix),
        "--out",
        str(plan.out / "runs" / spec.label),
        *(["--pairs", str(pairs)] if pairs is not None else []),
        "--seed",
        str(seed),
        "--base-env",
        f"{ENV_VAR}=0",
        "--head-env",
        f"{ENV_VAR}={spec.slowdown!r}",
        *plan.gate_args,
        *plan.pytest_args,
    ]


def run_ab(plan: Plan, spec: RunSpec, command: list[str], step: str) -> GateOutcome:
    """Run one A/B comparison (or reuse its `ab.json`); its JSON becomes the outcome."""
    folder = plan.out / "runs" / spec.label
    found = folder / "ab.json"
    if plan.reuse and found.is_file():
        print(f"calibrate: {step} {spec.label}: reusing {found}, judged anew", flush=True)
        rejudge(plan, folder)
    else:
        found.unlink(missing_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with (folder / "ab.log").open("w", encoding="utf-8") as sink:
            code = subprocess.call(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
        print(
            f"calibrate: {step} {spec.label}: A/B exit {code} in "
            f"{time.perf_counter() - started:.0f} s; log {folder / 'ab.log'}",
            flush=True,
        )
        # 3: the run was judged inconclusive (unstable, busy): a verdict, not a broken run.
        if code not in (0, 1, 3) or not found.is_file():
            raise CalibrationError(
                f"A/B run {spec.label} failed (exit {code}); read {folder / 'ab.log'}"
            )
    document = json.loads(found.read_text(encoding="utf-8"))
    return GateOutcome(spec.label, spec.slowdown, document, int(document["status"] == "fail"))


def rejudge(plan: Plan, folder: Path) -> None:
    """Judge a finished A/B run again with this calibration's gate options (`reports.ab`).

    So `--reuse --threshold 0.02` reads the same rounds at another threshold. The run's own
    between-process term (recorded in its `ab.json`) is kept unless the options name one.
    """
    previous = json.loads((folder / "ab.json").read_text(encoding="utf-8"))
    args = [*plan.gate_args]
    if "--process-cv" not in args and previous.get("process_cv") is not None:
        args += ["--process-cv", str(previous["process_cv"])]
    command = [sys.executable, "-m", "reports.ab", "--out", str(folder), *args]
    with (folder / "rejudge.log").open("w", encoding="utf-8") as sink:
        code = subprocess.call(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    if code not in (0, 1, 3):
        raise CalibrationError(
            f"judging {folder} again failed (exit {code}): read {folder / 'rejudge.log'}, "
            "or run the calibration without --reuse"
        )


def wall_summary(outcomes: Sequence[GateOutcome]) -> dict[str, float | None]:
    """Median, least and most wall time of the A/B runs (their `context.wall_s`)."""
    walls = [o.gate.get("context", {}).get("wall_s") for o in outcomes]
    present = [float(w) for w in walls if isinstance(w, int | float)]
    return {
        "median": median_of(present),
        "min": min(present, default=None),
        "max": max(present, default=None),
    }


def headline(ab: Mapping[str, Any], history: Mapping[str, Any]) -> list[str]:
    """The side-by-side table: each mode's false alarms, detections and median MDE."""

    def share(rate: Mapping[str, Any]) -> str:
        return "n/a" if not rate["of"] else f"{rate['count']}/{rate['of']} ({pct(rate['rate'])})"

    lines = [
        "| measure | A/B (paired rounds) | history (gate against A/A runs) |",
        "| --- | --- | --- |",
    ]
    for label, key in (
        ("A/A runs with any `fail`", "suite_runs"),
        ("A/A timing `fail`s", "timing_verdicts"),
    ):
        lines.append(
            f"| {label} | {share(ab['false_alarm'][key])} | {share(history['false_alarm'][key])} |"
        )
    for mine, theirs in zip(ab["detection"], history["detection"], strict=True):
        s = pct(mine["slowdown"], 0)
        lines.append(
            f"| {s} slowdown: timings caught | {share(mine['timing_verdicts'])} | "
            f"{share(theirs['timing_verdicts'])} |"
        )
        lines.append(
            f"| {s} slowdown: runs failed | {share(mine['suite_runs'])} | "
            f"{share(theirs['suite_runs'])} |"
        )
    lines.append(
        f"| timing MDE, median | {pct(ab['mde']['median'])} | {pct(history['mde']['median'])} |"
    )
    widths = [mode["false_alarm"].get("half_width_median") for mode in (ab, history)]
    lines.append(f"| A/A timing 95 % half-width, median | {pct(widths[0])} | {pct(widths[1])} |")
    for mine, theirs in zip(ab["detection"], history["detection"], strict=True):
        s = pct(mine["slowdown"], 0)
        for metric in ("prefill_s", "decode_step_s"):
            a, h = (d.get("timing_by_metric", {}).get(metric) for d in (mine, theirs))
            if a is not None and h is not None:
                lines.append(f"| {s} slowdown: `{metric}` caught | {share(a)} | {share(h)} |")
    return lines


def wall_line(wall: Mapping[str, Any] | None) -> list[str]:
    """'Wall time per A/B run: median ... s (... to ... s).' and a blank line; [] if unknown."""
    if not wall or wall.get("median") is None:
        return []
    spread = f"{wall['min']:.0f}-{wall['max']:.0f} s"
    return [f"Wall time per A/B run: median {wall['median']:.0f} s ({spread}).", ""]


def pairs_text(pairs: int | None) -> str:
    """'30 pairs', or the A/B default's bounds when the calibration left them to it."""
    if pairs is not None:
        return f"{pairs} pairs"
    bounds = (
        f"up to {DEFAULT_PAIRS}, at least {MIN_PAIRS} and {BUDGET_S:g} s, then until "
        f"±{TARGET_HALF_WIDTH:.1%} or {MAX_S:g} s"
    )
    return f"the A/B default pairs ({bounds})"


def calibrate_ab(plan: Plan, pairs: int | None, base: str, command: str) -> dict[str, Any]:
    """Run every A/B run, gate the same files as history, analyse both; write JSON and Markdown."""
    if pairs is not None and pairs < 3:
        raise CalibrationError(f"--pairs {pairs}: paired statistics need at least 3 pairs")
    runs = schedule(plan.aa_runs, plan.slow_runs, plan.slowdowns)
    ab_outcomes = [
        run_ab(plan, spec, ab_command(plan, spec, pairs, base, i), f"[{i}/{len(runs)}]")
        for i, spec in enumerate(runs, 1)
    ]
    side = {s.label: plan.out / "runs" / s.label for s in runs}
    aa_bases = [side[s.label] / "base.json" for s in runs if s.slowdown == 0.0]
    history_outcomes = []
    for spec in runs:
        own = side[spec.label] / "base.json"
        baseline = [p for p in aa_bases if p != own]
        history_outcomes.append(run_gate(plan, spec, side[spec.label] / "head.json", baseline))
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "context": {
            "mode": "ab",
            "matrix": str(plan.matrix),
            "aa_runs": plan.aa_runs,
            "slow_runs": plan.slow_runs,
            "slowdowns": list(plan.slowdowns),
            "pairs": pairs,
            "ab_wall_s": wall_summary(ab_outcomes),
            "base": base,
            "gate_args": list(plan.gate_args),
            "pytest_args": list(plan.pytest_args),
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command,
        },
        "ab": analyse(ab_outcomes),
        "history": analyse(history_outcomes),
    }
    (plan.out / "calibration.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    (plan.out / "calibration.md").write_text(render_both(result), encoding="utf-8")
    return result


def render_both(result: Mapping[str, Any]) -> str:
    """`calibration.md` of an `--ab` calibration: the side-by-side table, then each mode's."""
    context = result["context"]
    lines = [
        "# Calibration: A/B mode and history mode on the same runs",
        "",
        f"Matrix `{context['matrix']}`, {context['aa_runs']} A/A runs and {context['slow_runs']} "
        f"runs per head slowdown ({', '.join(pct(s, 0) for s in context['slowdowns'])}), "
        f"{pairs_text(context['pairs'])} per benchmark. Created {context['created']}.",
        "",
        f"Reproduce: `{context['command']}`",
        "",
        *headline(result["ab"], result["history"]),
        "",
        *wall_line(context.get("ab_wall_s")),
    ]
    sections: Sequence[tuple[str, str]] = (("A/B mode", "ab"), ("History mode", "history"))
    for title, key in sections:
        body = render_markdown(result[key]).split("\n", 1)[1]  # drop its own title
        lines += [f"## {title}", body]
    return "\n".join(lines)
