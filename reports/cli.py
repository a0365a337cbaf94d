"""`python -m reports`: render, gate, simulate, bench-scale, runmode, quant, tp, engines.

- `render --history DIR --out DIR` writes `index.html` and `summary.md` (exit 0; 2 on bad
  input or when there is no current run to judge — the files are still written then).
- `gate --history DIR [--json FILE]` prints one line per failing or missing benchmark and
  metric and a status line, and exits 0 (pass, or no-baseline: nothing was compared), 1 (a
  failure), 2 (bad input, no current run, an unreadable file that may be the current run, or
  no-baseline with `--require-baseline`), 3 (inconclusive, never a pass: the machine was busy,
  every timing moved together far enough to reach the threshold, undecided timings lean to a
  slowdown, or nothing could be decided: `reports.render.headline`). BUSY, SHIFT, LEAN, POOLED,
  IMPLAUSIBLE, ACCURACY (said, never failing) and DRIFT lines name what a human must look at.
- `simulate --seed 1` prints the false-alarm and detection table (see `reports.analysis.simulate`).
- `bench-scale --runs 1000 --benchmarks 100` times a render of a synthetic history.
- `runmode FILE...` prints decode tok/s by attention x cache x compile (`reports.render.runmode`).
- `quant` / `tp` / `engines FILE_OR_DIR...` print each machine's newest run's quantization
  (ACCURACY lines too) / tp / torch-vs-MLX view (`reports.render.*`); a missing path: exit 2.

Shared options: `--base-branch`, `--merge-base SHA`, `--rerun` / `--no-pool`, `--require-baseline`,
`--threshold` (repeatable: `5%`, `0.05`, `decode_step_s=3%`), `--alpha`, `--current FILE`,
`--baseline FILE...`, `--artifact-url`.

User errors print one line (`error: ...`) and exit 2; nothing here imports torch.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from reports.analysis.series import AnalysisConfig
from reports.analysis.thresholds import parse_thresholds
from reports.errors import ReportError
from reports.history.load import History, load_history, run_from_paths
from reports.history.selection import (
    Selection,
    SelectOptions,
    files_that_could_be_current,
    select_comparisons,
)
from reports.render import engines, quant, tp
from reports.render import runmode as runmode_tables
from reports.render.gate import (
    EXIT_BAD_INPUT,
    EXIT_FAIL,
    EXIT_INCONCLUSIVE,
    EXIT_OK,
    gate_exit_code,
    gate_lines,
)
from reports.render.gatejson import verdict_json
from reports.render.html import render_html, render_summary
from reports.render.report import Report, build_report

__all__ = ["EXIT_FAIL", "EXIT_INCONCLUSIVE", "gate_exit_code", "gate_lines", "main"]


def _config(args: argparse.Namespace) -> AnalysisConfig:
    default, per_metric = parse_thresholds(args.threshold)
    if not 0.0 < args.alpha < 1.0:
        raise ReportError(f"--alpha {args.alpha} is out of range: use 0 < alpha < 1, e.g. 0.01")
    return AnalysisConfig(
        threshold=AnalysisConfig.threshold if default is None else default,
        per_metric=per_metric,
        alpha=args.alpha,
    )


def build_from_args(args: argparse.Namespace) -> Report:
    """Load history and overrides named by the arguments and build the report."""
    config = _config(args)
    paths = [Path(p) for p in args.history]
    if not paths and not args.current:
        raise ReportError("no history given: pass --history DIR (e.g. .benchmarks) or --current")
    history = load_history(paths) if paths else History(machines={}, skipped=())
    extra_skipped = []
    current_override = None
    baseline_override = None
    suspects: list[str] = []
    if args.current:
        runs, skipped = run_from_paths([Path(args.current)])
        extra_skipped.extend(skipped)
        if not runs:
            suspects = [s.path for s in skipped] or [args.current]
        else:
            current_override = runs[-1]
    if args.baseline:
        baseline_override, skipped = run_from_paths([Path(p) for p in args.baseline])
        extra_skipped.extend(skipped)
        if not baseline_override:
            reasons = "; ".join(f"{s.path}: {s.reason}" for s in skipped)
            raise ReportError(f"no --baseline file could be read ({reasons}): pass readable files")
    if args.current and current_override is None:
        selection = Selection((), ())  # the named current run is unreadable: nothing to judge
    else:
        options = SelectOptions(
            base_branch=args.base_branch,
            merge_base=args.merge_base,
            merge_base_time=_commit_time(args.merge_base) if args.merge_base else None,
            pool_reruns=args.pool,
        )
        selection = select_comparisons(history, options, current_override, baseline_override)
        if current_override is None:
            suspects = files_that_could_be_current(history, selection.comparisons)
    return build_report(
        history,
        selection,
        config,
        base_branch=args.base_branch,
        suspect_current=suspects,
        extra_skipped=extra_skipped,
        artifact_url=args.artifact_url,
        matrix=args.matrix or "",
    )


def _commit_time(sha: str) -> str | None:
    """The commit time of `sha` from git in the working directory (None without git or commit).

    Only used when the merge-base itself has no run in the history: base-branch runs of commits
    not newer than it are then its baseline.
    """
    try:
        out = subprocess.run(
            ["git", "show", "-s", "--format=%cI", sha],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    stamp = out.stdout.strip()
    if out.returncode != 0 or not stamp:
        return None
    # commit_info.time is written in UTC-offset ISO form too; compare as UTC strings
    parsed = datetime.fromisoformat(stamp).astimezone(timezone.utc)
    return parsed.isoformat()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def cmd_render(args: argparse.Namespace) -> int:
    """Write index.html and summary.md."""
    report = build_from_args(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = _now()
    (out / "index.html").write_text(render_html(report, stamp), encoding="utf-8")
    (out / "summary.md").write_text(render_summary(report, stamp), encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps(verdict_json(report), indent=1), encoding="utf-8")
    print(f"{report.status}: {report.status_reason}; wrote {out / 'index.html'} and summary.md")
    for skipped in report.skipped:
        print(f"skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    return EXIT_BAD_INPUT if report.status == "error" else EXIT_OK


def cmd_gate(args: argparse.Namespace) -> int:
    """Print failures, write --json, exit 0/1/2."""
    report = build_from_args(args)
    for line in gate_lines(report):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(verdict_json(report), indent=1), encoding="utf-8")
    return gate_exit_code(report, args.require_baseline)


def cmd_simulate(args: argparse.Namespace) -> int:
    """Print the simulation table."""
    from reports.analysis.simulate import SimulationConfig, format_table, run_all  # noqa: PLC0415 - optional verb

    if args.only == "machine":
        from reports.analysis import gate_rows, robustness  # noqa: PLC0415 - optional verb

        start = time.perf_counter()
        n = args.robustness_suites
        for title, rows, world in gate_rows.TABLES:
            print(f"{title}:\n\n{robustness.format_rows(rows(n, args.seed), n, world)}")
        print(f"\n({time.perf_counter() - start:.1f} s)")
        return EXIT_OK
    sim = SimulationConfig(
        benchmarks=args.benchmarks,
        baseline_runs=args.baseline_runs,
        suites=args.suites,
        seed=args.seed,
        slowed=min(args.slowed, args.benchmarks),
        current_runs=args.current_runs,
    )
    config = _config(args)
    start = time.perf_counter()
    print(format_table(sim, run_all(sim, config=config), config))
    if args.scenario_trials > 0:
        print("\nIssue-13 scenarios (the real gate on synthetic history files):\n")
        # In a child: the scenarios drive this CLI end to end, so importing them here would
        # make a circle (cli -> scenarios -> cli).
        scenarios = [sys.executable, "-m", "reports.scenarios", "--seed", str(args.seed)]
        scenarios += ["--trials", str(args.scenario_trials)]
        done = subprocess.run(scenarios, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ReportError(f"the scenarios failed: {done.stderr.strip()[-300:]}")
        print(done.stdout, end="")
    if (n := args.robustness_suites) > 0:
        from reports.analysis import gate_rows, headline_rows, robustness  # noqa: PLC0415

        for title, rows in headline_rows.TABLES:
            print(f"\n{title}:\n\n{robustness.format_rows(rows(n, args.seed), n)}")
        for title, rows, world in gate_rows.TABLES:
            print(f"\n{title}:\n\n{robustness.format_rows(rows(n, args.seed), n, world)}")
    print(f"\n({time.perf_counter() - start:.1f} s)")
    return EXIT_OK


def cmd_bench_scale(args: argparse.Namespace) -> int:
    """Generate a synthetic history, then time load + judge + render of it."""
    import tempfile  # noqa: PLC0415 - only this verb needs it

    from reports.history.scale import write_synthetic_history  # noqa: PLC0415 - optional verb

    with tempfile.TemporaryDirectory() as tmp:
        hist = Path(tmp) / "history"
        out = Path(args.out) if args.out else Path(tmp) / "out"
        write_synthetic_history(hist, runs=args.runs, benchmarks=args.benchmarks)
        ns = build_parser().parse_args(["render", "--history", str(hist), "--out", str(out)])
        start, start_cpu = time.perf_counter(), time.process_time()
        code = cmd_render(ns)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        size = (out / "index.html").stat().st_size
        summary = (out / "summary.md").stat().st_size
        # the gate alone (what CI waits for), its lines kept out of the figure's output
        gate_ns = build_parser().parse_args(["gate", "--history", str(hist)])
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            cmd_gate(gate_ns)
        gate_s = time.perf_counter() - start
    print(
        f"bench-scale: {args.runs} runs x {args.benchmarks} benchmarks: render {elapsed:.2f} s "
        f"wall ({cpu:.2f} s CPU), gate {gate_s:.2f} s wall, "
        f"index.html {size / 1e6:.2f} MB, summary.md {summary / 1e3:.1f} kB"
    )
    return code


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--history",
        action="append",
        default=[],
        metavar="DIR",
        help="history directory or file (repeatable; directories are read recursively)",
    )
    p.add_argument("--base-branch", default="main", help="branch whose runs form the baseline")
    p.add_argument(
        "--matrix",
        metavar="FILE",
        help="the matrix the current run ran: a failed timing's bisect command names it",
    )
    p.add_argument(
        "--merge-base",
        metavar="SHA",
        default=None,
        help="baseline: base-branch runs up to and including this commit (a PR's merge-base)",
    )
    pool = p.add_mutually_exclusive_group()
    pool.add_argument(
        "--rerun",
        dest="pool",
        action="store_const",
        const=True,
        help="pool earlier runs of the same commit, dirty state, stack and cells with the "
        "current run, dirty trees included (default: clean commits only, when other runs "
        "remain to compare with)",
    )
    pool.add_argument(
        "--no-pool",
        dest="pool",
        action="store_const",
        const=False,
        help="never pool: earlier runs of the same commit are the current run's baseline",
    )
    p.add_argument(
        "--require-baseline",
        action="store_true",
        help="exit 2 when nothing could be compared (no baseline), instead of 0",
    )
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="[METRIC=]FRACTION",
        help="practical threshold: 5%% or 0.05 (default 5%%), or per metric: decode_step_s=3%%",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=AnalysisConfig.alpha,
        help="Holm family-wise level across the suite: the chance that an unchanged suite "
        "gets any false fail (default 0.01)",
    )
    p.add_argument("--current", metavar="FILE", help="judge this file as the current run")
    p.add_argument("--baseline", nargs="+", metavar="FILE", help="compare against these files only")
    p.add_argument("--json", metavar="FILE", help="also write the verdicts as JSON")
    p.add_argument(
        "--artifact-url",
        default="",
        help="link to the HTML report in summary.md (default: the {{ARTIFACT_URL}} placeholder)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `python -m reports`."""
    parser = argparse.ArgumentParser(
        prog="python -m reports", description="phasebench history: verdicts, report, gate"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    render = sub.add_parser("render", help="write index.html and summary.md")
    _add_common(render)
    render.add_argument("--out", required=True, metavar="DIR")
    render.set_defaults(func=cmd_render)
    gate = sub.add_parser("gate", help="exit 1 on a regression beyond threshold and noise")
    _add_common(gate)
    gate.set_defaults(func=cmd_gate)
    sim = sub.add_parser("simulate", help="false alarms and detection on synthetic suites")
    sim.add_argument("--seed", type=int, default=1)
    sim.add_argument("--suites", type=int, default=200)
    sim.add_argument("--benchmarks", type=int, default=100)
    sim.add_argument("--baseline-runs", type=int, default=20)
    sim.add_argument("--slowed", type=int, default=10)
    sim.add_argument(
        "--current-runs", type=int, default=1, help="re-runs of the PR commit pooled (default 1)"
    )
    sim.add_argument(
        "--scenario-trials",
        type=int,
        default=100,
        help="trials per issue-13 scenario (reports.scenarios; 0 = skip them)",
    )
    sim.add_argument(
        "--robustness-suites",
        type=int,
        default=40,
        help="suites per row of the issue-17, 28 and 41 tables (0 = skip them)",
    )
    sim.add_argument(
        "--only",
        choices=("all", "machine"),
        default="all",
        help="machine: only the issue-41 rows (machine or code: probes, heavy tails, re-runs)",
    )
    sim.add_argument("--threshold", action="append", default=[], metavar="FRACTION")
    sim.add_argument("--alpha", type=float, default=AnalysisConfig.alpha)
    sim.set_defaults(func=cmd_simulate)
    scale = sub.add_parser("bench-scale", help="time a render of a large synthetic history")
    scale.add_argument("--runs", type=int, default=1000)
    scale.add_argument("--benchmarks", type=int, default=100)
    scale.add_argument("--out", metavar="DIR", help="keep the rendered report here")
    scale.set_defaults(func=cmd_bench_scale)
    runmode = sub.add_parser("runmode", help="decode tok/s by attention x cache x compile")
    runmode.add_argument("files", nargs="+", metavar="FILE", help="pytest-benchmark JSON files")
    runmode.set_defaults(func=lambda a: runmode_tables.print_files(a.files))
    for view in (quant, tp, engines):  # VERB FILE_OR_DIR...: a view of each machine's newest run
        p = sub.add_parser(view.VERB, help=view.HELP)
        p.add_argument("paths", nargs="+", metavar="FILE_OR_DIR", help="history files or folders")
        p.set_defaults(func=lambda a, view=view: view.print_paths(a.paths))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return code
