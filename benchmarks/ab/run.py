"""`python -m benchmarks.ab` (`nox -s ab`): build both sides, run them interleaved, judge.

    --base REF [--head REF] [--matrix FILE] [--out DIR] [--pairs N] [--min-pairs N]
    [--pair-budget-s S] [--apparatus base|head]
    [--base-env K=V]... [--head-env K=V]... [--threshold X] [--alpha A] [--seed S]
    [--interleave auto|rounds|process] [pytest/matrix options]

Steps: resolve the refs (`git rev-parse`; an unknown ref is one line and exit 2), check them
out into temporary worktrees, pick the apparatus tree (the base's by default; one from before
A/B mode is refused in one line), validate the matrix against both sides' model files, build
(or reuse) each side's Python environment, check that both models fit in memory at once, start
the coordinator and both pytest processes in the apparatus tree, wait, then run
`python -m reports.ab` on the two pytest-benchmark JSON files: it writes `DIR/ab.json`,
`index.html` and `summary.md`, and its exit code (0 pass, 1 regression, 2 error) is ours.

Everything a user can get wrong is an `ABError` (or a matrix/model error): one line, exit 2.
It deliberately does not compute statistics (the harness never imports reports).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from benchmarks.ab.coordinator import Coordinator
from benchmarks.ab.cpus import threads_in
from benchmarks.ab.plan import DEFAULT_PAIRS, LEGACY_PAIRS, Plan, parse_plan
from benchmarks.ab.sides import (
    ROOT,
    TURNSTILE,
    TURNSTILE_MODULE,
    ABError,
    EnvSpec,
    Side,
    Worktrees,
    environment,
    has_turnstile,
    probe_stack,
    resolve_ref,
    turnstile_of,
    turnstile_protocol,
)
from benchmarks.ab.turnstile import CPUS_VAR, PAIRS_VAR, PROTOCOL, SIDE_VAR, SOCKET_VAR
from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.matrix.cells import Matrix
from benchmarks.harness.matrix.parse import load_matrix

# pytest exit codes: 0 all passed, 1 some tests failed (their cells are `missing`), 5 nothing
# collected; anything else (interrupted, internal error, usage error) measured nothing usable.
_USABLE = (0, 1)
STALE = ("ab.json", "index.html", "summary.md", "context.json", "turns.jsonl")


def _say(line: str) -> None:
    print(f"ab: {line}", flush=True)


def prepared_matrix(
    plan: Plan, models_dirs: tuple[Path, Path], *, rounds_via_env: bool = True
) -> tuple[Path, Matrix, int]:
    """The matrix both sides run (validated against both model folders), and the pairs.

    With `rounds_via_env` (the current turnstile) the copy keeps the matrix's `rounds`: the
    turnstile gives only the timed rounds the pairs (`PHASEBENCH_AB_PAIRS`), so everything else
    the suite derives from `rounds` (the overhead module's untimed whole-loop comparison, a
    plain run's cost) is what a plain run of the matrix does. An older turnstile gets the pairs
    as the copy's `rounds`.
    """
    for models_dir in models_dirs:
        matrix = load_matrix(plan.matrix, models_dir=models_dir)  # MatrixError on bad input
    default = DEFAULT_PAIRS if rounds_via_env else LEGACY_PAIRS  # no stop message: all pairs run
    pairs = plan.pairs if plan.pairs is not None else max(matrix.rounds, default)
    data = yaml.safe_load(plan.matrix.read_text(encoding="utf-8"))
    if rounds_via_env:
        note = f"A/B copy: timed rounds up to {pairs} pairs, set by the turnstile"
    else:
        data["rounds"], note = pairs, f"A/B copy: {pairs} rounds"
    data["description"] = f"{data.get('description', '')} ({note})".strip()
    plan.out.mkdir(parents=True, exist_ok=True)
    copy = plan.out / plan.matrix.name
    copy.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return copy, load_matrix(copy, models_dir=models_dirs[0]), pairs


def side_tree(ref: str | None, trees: Worktrees) -> tuple[Path, str | None]:
    """The side's tree (a fresh worktree of `ref`, or the working tree) and its commit."""
    commit = None if ref is None else resolve_ref(ref)
    return (ROOT if commit is None else trees.add(commit)), commit


def build_side(name: str, ref: str | None, tree: Path, commit: str | None, plan: Plan) -> Side:
    """Build (or reuse) the side's environment and check that it imports the suite's stack."""
    env = plan.base_env if name == "base" else plan.head_env
    spec = EnvSpec.of(tree, env)
    try:
        python = environment(spec, EnvSpec.of(ROOT, {}), plan.out / "logs" / f"env-{name}.log")
    except ABError as error:  # which side could not be built (a bisection skips that commit)
        raise ABError(f"{name} side: {error}", side=name) from error
    label = "working tree" if ref is None else ref
    where = commit[:12] if commit else "uncommitted changes included"
    _say(f"{name}: {label} ({where}), python {python}")
    return Side(name, label, commit, tree, python, dict(env), dict(probe_stack(python)))


def side_command(
    side: Side, plan: Plan, matrix: Path, storage: Path, plugin: str = TURNSTILE_MODULE
) -> list[str]:
    """The pytest run of one side (in the apparatus tree, whose A/B plugin is `plugin`)."""
    peaks = [] if any(a.startswith("--peaks") for a in plan.pytest_args) else ["--peaks=none"]
    return [
        str(side.python),
        "-m",
        "pytest",
        "benchmarks",
        f"--matrix={matrix}",
        f"--models-dir={side.models_dir}",
        "-p",
        plugin,
        f"--benchmark-json={plan.out / f'{side.name}.json'}",
        f"--benchmark-storage=file://{storage / side.name}",
        "-p",
        "no:cacheprovider",
        *peaks,
        *plan.pytest_args,
    ]


def side_environment(
    side: Side,
    socket_path: Path | None,
    cpus: frozenset[int] | None = None,
    pairs: int | None = None,
) -> dict[str, str]:
    """The caller's environment (xdist markers dropped) + the side's variables + the turnstile."""
    # pytest-benchmark disables itself under PYTEST_XDIST_WORKER (set when tests start us).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    for name in (SOCKET_VAR, SIDE_VAR, CPUS_VAR, PAIRS_VAR):
        env.pop(name, None)
    env.update(side.env)
    if pairs is not None:
        env[PAIRS_VAR] = str(pairs)
    if socket_path is not None:
        env[SOCKET_VAR], env[SIDE_VAR] = str(socket_path), side.name
        if cpus is not None:
            env[CPUS_VAR] = ",".join(str(cpu) for cpu in sorted(cpus))
    return env


def run_sides(
    sides: Sequence[Side],
    plan: Plan,
    matrix: Path,
    apparatus: Path,
    mode: str,
    *,
    current: bool = True,
) -> dict[str, int]:
    """Run both sides' pytest (together through the coordinator, or one after the other).

    `current`: the apparatus turnstile speaks this tree's `PROTOCOL` (it sets the timed
    rounds and pins them); an older one gets the pairs from the matrix copy and has its
    processes pinned whole, as that release did.
    """
    logs = plan.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    codes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="phasebench-ab-") as tmp:
        storage = Path(tmp)
        coordinator = None
        if mode == "rounds":
            coordinator = Coordinator(
                storage / "turnstile.sock", plan.out / "turns.jsonl", plan.seed, plan.budget
            )
        running: list[tuple[Side, subprocess.Popen[bytes], Any]] = []
        try:
            for side in sides:
                sink = (logs / f"{side.name}.log").open("w", encoding="utf-8")
                socket_path = None if coordinator is None else coordinator.socket_path
                pin_rounds = coordinator is not None and current
                process = subprocess.Popen(
                    side_command(side, plan, matrix, storage, plugin_of(apparatus)),
                    cwd=apparatus,
                    env=side_environment(
                        side,
                        socket_path,
                        plan.cpus if pin_rounds else None,
                        plan.pairs if current else None,
                    ),
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
                if plan.cpus is not None and not pin_rounds:
                    # One side at a time (or an old turnstile): pinned whole, before the
                    # interpreter starts a thread (its threads inherit the mask).
                    os.sched_setaffinity(process.pid, plan.cpus)
                running.append((side, process, sink))
                if coordinator is None:  # process-level: one side after the other
                    codes[side.name] = process.wait()
                    sink.close()
            for side, process, sink in running:
                codes[side.name] = process.wait()
                sink.close()
        finally:
            # Interrupted (Ctrl-C, a CI timeout's SIGTERM): no side outlives the command.
            for _, process, _ in running:
                if process.poll() is None:
                    process.terminate()
                    process.wait()
            if coordinator is not None:
                coordinator.close()
    return codes


def plugin_of(apparatus: Path) -> str:
    """The module name of the apparatus tree's turnstile (its place moved in the re-layout)."""
    found = turnstile_of(apparatus)
    return found[1] if found else TURNSTILE_MODULE


def memory_check(matrix: Path, base: Side, head: Side) -> tuple[bool, str]:
    """`memory.fits_both` in a subprocess of the base's interpreter (no CUDA context here)."""
    command = [str(base.python), "-m", "benchmarks.ab.memory", str(matrix)]
    command += [str(base.models_dir), str(head.models_dir)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ABError(f"the memory check of {matrix} failed ({last}); pass --interleave rounds")
    check = json.loads(done.stdout.strip().splitlines()[-1])
    return bool(check["fits"]), str(check["note"])


def _last_error(log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines()]
    errors = [ln for ln in lines if ln.startswith(("ERROR", "E ", "error")) and len(ln) > 6]
    return (errors or [ln for ln in lines if ln] or ["no output"])[-1][:300]


def _measures(plan: Plan, apparatus: Path) -> str:
    return f"{plan.apparatus} tree" if plan.apparatus_tree is None else str(apparatus)


def ab(plan: Plan) -> int:
    """Run the whole A/B comparison; returns the exit code (raises ABError on bad input)."""
    started = time.perf_counter()
    plan.out.mkdir(parents=True, exist_ok=True)
    # A run that stops with exit 2 must not leave an older run's verdicts behind for CI to read.
    for name in (*STALE, "base.json", "head.json"):
        (plan.out / name).unlink(missing_ok=True)
    with Worktrees() as trees:
        # Trees first: an unknown ref, an old apparatus or a broken matrix cost no env build.
        base_tree, base_commit = side_tree(plan.base_ref, trees)
        head_tree, head_commit = side_tree(plan.head_ref, trees)
        apparatus = base_tree if plan.apparatus == "base" else head_tree
        if plan.apparatus_tree is not None:
            apparatus = plan.apparatus_tree
        if not has_turnstile(apparatus):
            ref = plan.base_ref if plan.apparatus == "base" else plan.head_ref
            raise ABError(
                f"the {plan.apparatus} {ref!r} predates A/B mode (no {TURNSTILE}): measure "
                "with --apparatus head, or pick a newer base"
            )
        protocol = turnstile_protocol(apparatus)
        current = protocol >= PROTOCOL
        if not current and plan.budget is not None:
            _say(
                f"the {plan.apparatus} tree's turnstile is protocol {protocol}: every benchmark "
                "runs all --pairs (no time budget), processes pinned whole"
            )
            plan = replace(plan, budget=None)
        models_dirs = (base_tree / "matrix" / "models", head_tree / "matrix" / "models")
        asked_pairs = plan.pairs
        matrix, loaded, pairs = prepared_matrix(plan, models_dirs, rounds_via_env=current)
        plan = replace(plan, pairs=pairs)
        base = build_side("base", plan.base_ref, base_tree, base_commit, plan)
        head = build_side("head", plan.head_ref, head_tree, head_commit, plan)
        mode = plan.interleave
        memory_note = "not checked (--interleave given)"
        if mode == "auto":
            fits, memory_note = memory_check(matrix, base, head)
            mode = "rounds" if fits else "process"
            if not fits:
                _say(f"{memory_note}: process-level interleaving (one side, then the other)")
        if mode == "process" and asked_pairs is None and current:
            # No coordinator stops a side early, and more rounds cannot narrow the run-level
            # term that dominates there (docs/ab.md): the first release's 100.
            pairs = max(loaded.rounds, LEGACY_PAIRS)
            plan = replace(plan, pairs=pairs)
        cells = f"{len(loaded.cells)} cells, up to {pairs} pairs each"
        if plan.budget is not None and plan.budget.min_pairs < pairs:
            budget = plan.budget
            cells += f" (or {budget.min_pairs}+ and {budget.budget_s:g}+ s"
            if budget.target_half_width > 0:
                cells += f", until ±{budget.target_half_width:.1%} or {budget.max_s:g} s"
            cells += ")"
        pinned = "" if plan.cpus is None else f"; both sides on CPUs {sorted(plan.cpus)}"
        _say(f"apparatus: {_measures(plan, apparatus)}; {cells}; interleave {mode}{pinned}")
        codes = run_sides((base, head), plan, matrix, apparatus, mode, current=current)
        for side in (base, head):
            log = plan.out / "logs" / f"{side.name}.log"
            if codes[side.name] not in _USABLE or not (plan.out / f"{side.name}.json").is_file():
                raise ABError(
                    f"{side.name} side: pytest exit {codes[side.name]} measured nothing usable: "
                    f"{_last_error(log)} (log {log})",
                    side=side.name,
                )
    context = {
        "matrix": str(plan.matrix),
        "pairs": pairs,
        "min_pairs": None if plan.budget is None else plan.budget.min_pairs,
        "pair_budget_s": None if plan.budget is None else plan.budget.budget_s,
        "pair_target": None if plan.budget is None else plan.budget.target_half_width,
        "pair_max_s": None if plan.budget is None else plan.budget.max_s,
        "interleave": mode,
        "memory": memory_note,
        "apparatus": plan.apparatus,
        "seed": plan.seed,
        "judge": judge_settings(plan.report_args),
        "cpus": None if plan.cpus is None else sorted(plan.cpus),
        "threads": threads_in(plan.pytest_args),
        "threads_from": plan.threads_from,
        "wall_s": time.perf_counter() - started,
        "command": shlex.join(["nox", "-s", "ab", "--", *plan.argv]),
        "sides": {s.name: _side_context(s, codes[s.name]) for s in (base, head)},
    }
    (plan.out / "context.json").write_text(json.dumps(context, indent=1), encoding="utf-8")
    report = [sys.executable, "-m", "reports.ab", "--out", str(plan.out), *plan.report_args]
    return subprocess.call(report, cwd=ROOT)


def judge_settings(report_args: Sequence[str]) -> dict[str, Any]:
    """The judging settings passed to `reports.ab`, recorded so that re-judging
    (`python -m reports.ab --out DIR`) uses them: process_cv, alpha, thresholds."""
    out: dict[str, Any] = {"threshold": []}
    it = iter(report_args)
    for flag in it:
        value = next(it, None)
        if value is None:
            break
        if flag == "--process-cv":
            out["process_cv"] = float(value)
        elif flag == "--alpha":
            out["alpha"] = float(value)
        elif flag == "--threshold":
            out["threshold"].append(value)
    return out


def _side_context(side: Side, code: int) -> dict[str, Any]:
    return {
        "label": side.label,
        "commit": side.commit,
        "env": dict(side.env),
        "stack": dict(side.stack),
        "pytest_exit": code,
        "json": f"{side.name}.json",
    }


def _terminated(signum: int, frame: object) -> None:
    # SIGTERM as an exception: the worktrees are removed and the sides stopped on the way out.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: 0 no regression, 1 a regression, 2 bad input (one line on stderr)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)
    try:
        return ab(parse_plan(sys.argv[1:] if argv is None else argv))
    except PhasebenchError as error:
        print(f"ab: error: {str(error).splitlines()[0] if str(error) else error}", file=sys.stderr)
        return 2
