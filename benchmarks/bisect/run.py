"""`python -m benchmarks.bisect` (`nox -s bisect`): which commit made a timing slower.

    --good REF [--bad REF] [--matrix FILE] [--out DIR] [--metric NAME] [--threshold X]
    [--alpha A] [--looks N] [--apparatus good|bad] [A/B and pytest options, e.g. -k EXPR]
    --package NAME --good V1 --bad V2 [--tree REF] [...]: releases of NAME instead of commits

1. **Scan**: an A/B run of good against bad over the matrix (and `-k`), in `DIR/scan/`. The
   timing to search is the one with the largest slowdown that failed, or stayed undecided with
   its estimate beyond the threshold (of `--metric` only, when given); none: exit 4, "not
   reproducible".
2. **Search** (`reports.analysis.bisection`): every comparison is a fresh A/B run of that one
   cell between two commits of the first-parent range (`DIR/steps/NN-lo-hi-lookK/`), read from
   its pairs' log-ratios; a look beyond the first doubles the pairs and the time allowed.
3. **Output** (`output`): `DIR/bisect.json`, `summary.md`, `index.html`.

One apparatus measures every step (the bad ref's tree by default: it knows the matrix of today;
`--apparatus good`), so what a side carries is A/B's: its dependency spec, its `matrix/models/`
and its environment variables (docs/ab.md, "What a side is"). With `--package`, every side is
the tree of `--tree` (default HEAD), which also measures, and its environment pins one release
(`PHASEBENCH_PIP`); environments are built once per release and cached as A/B's are. A commit
that changes only the harness is measured by the apparatus, not by itself: bisect such a range
with the apparatus of each end in turn (docs/bisect.md).

Exit codes: 0 a culprit named and verified, 3 inconclusive, 4 not reproducible, 2 bad input (one
line saying what to do).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.ab.plan import DEFAULT_MATRIX, MAX_S, MIN_PAIRS, parse_plan
from benchmarks.ab.plan import Plan as ABPlan
from benchmarks.ab.run import ab
from benchmarks.ab.sides import PIP_VAR, ABError, Worktrees
from benchmarks.bisect.commits import Commit, first_parent_range, release_range
from benchmarks.bisect.output import Context, write_outputs
from benchmarks.bisect.profile import profile_pair
from benchmarks.harness.errors import PhasebenchError
from reports.analysis.bisection import (
    BISECT_PROCESS_CV,
    Estimate,
    Plan,
    Result,
    UnmeasurableError,
    bisect,
    estimate_from_pairs,
    levels_of,
    path_comparisons,
)
from reports.analysis.metrics import PRIMARY_BY_MEASUREMENT
from reports.analysis.paired import MIN_PAIRS as PAIRED_MIN

DEFAULT_OUT = Path("out/bisect")
EXIT = {"culprit": 0, "inconclusive": 3, "not-reproducible": 4}
TIMINGS = (*PRIMARY_BY_MEASUREMENT.values(), "time_s")  # the primary timings a search follows


def _say(line: str) -> None:
    print(f"bisect: {line}", flush=True)


@dataclass(frozen=True)
class Options:
    """The command line, checked."""

    good: str
    bad: str
    matrix: Path
    out: Path
    metric: str | None
    plan: Plan
    apparatus: str
    package: str | None
    tree: str
    profile: bool
    process_cv: float
    ab_args: tuple[str, ...]
    argv: tuple[str, ...]


def parse(argv: Sequence[str]) -> Options:
    """The options; unknown ones go to every A/B run (and from there to pytest)."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bisect",
        description="which commit made a timing slower: paired A/B bisection (docs/bisect.md)",
        allow_abbrev=False,
    )
    p.add_argument(
        "--good", required=True, metavar="REF", help="a commit (or release) that was fast"
    )
    p.add_argument("--bad", metavar="REF", help="a slow commit (default HEAD), or release")
    p.add_argument("--package", metavar="NAME", help="bisect releases of NAME from the index")
    p.add_argument("--tree", default="HEAD", help="with --package: the commit every side runs")
    p.add_argument("--matrix", default=str(DEFAULT_MATRIX), help="matrix (default cpu.yaml)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (default out/bisect)")
    p.add_argument("--metric", help="search this timing metric only, e.g. decode_step_s")
    p.add_argument("--threshold", type=float, default=0.05, help="practical threshold (0.05)")
    p.add_argument("--alpha", type=float, default=0.05, help="error budget of one culprit's path")
    p.add_argument("--looks", type=int, default=3, help="looks per undecided comparison (3)")
    p.add_argument("--apparatus", choices=("good", "bad"), default="bad")
    p.add_argument(
        "--no-profile",
        action="store_true",
        help="skip the op-level profile of the culprit and its parent (docs/bisect.md)",
    )
    p.add_argument(
        "--process-cv",
        type=float,
        default=BISECT_PROCESS_CV,
        help="between-process term of every comparison (default 0.02, docs/bisect.md)",
    )
    args, rest = p.parse_known_args(argv)
    if not 0 < args.threshold < 1:
        raise ABError(f"--threshold {args.threshold}: use a fraction, e.g. 0.05")
    if not 0 < args.alpha < 0.5:
        raise ABError(f"--alpha {args.alpha}: use a level such as 0.05")
    if not 1 <= args.looks <= 5:
        raise ABError(f"--looks {args.looks}: use 1 to 5 (each look doubles the pairs)")
    if not 0 <= args.process_cv < 1:
        raise ABError(f"--process-cv {args.process_cv}: use a fraction, e.g. 0.02")
    if args.metric is not None and args.metric not in TIMINGS:
        raise ABError(f"--metric {args.metric}: use one of {', '.join(TIMINGS)}")
    for taken in ("--base", "--head", "--out", "--matrix"):
        if any(a == taken or a.startswith(f"{taken}=") for a in rest):
            raise ABError(f"{taken} is set by each step of the bisection: leave it out")
    if args.package is not None and args.bad is None:
        raise ABError("--package needs --bad VERSION too (the first slow release)")
    plan = Plan(args.threshold, args.alpha, args.looks)
    return Options(
        args.good,
        args.bad or "HEAD",
        Path(args.matrix),
        Path(args.out),
        args.metric,
        plan,
        args.apparatus,
        args.package,
        args.tree,
        not args.no_profile,
        args.process_cv,
        tuple(rest),
        tuple(argv),
    )


def _ab_plan(
    opts: Options, base: Commit, head: Commit, *, out: Path, extra: Sequence[str], tree: Path
) -> ABPlan:
    argv = [
        "--base", base.sha, "--head", head.sha, "--matrix", str(opts.matrix), "--out", str(out),
        "--threshold", str(opts.plan.threshold), *opts.ab_args, *extra,
    ]  # fmt: skip
    for side, point in (("base", base), ("head", head)):
        if point.pin:
            argv += [f"--{side}-env", f"{PIP_VAR}={point.pin}"]
    return replace(parse_plan(argv), apparatus_tree=tree)


def _ab_run(
    opts: Options, base: Commit, head: Commit, *, out: Path, extra: Sequence[str], tree: Path
) -> dict[str, Any]:
    """One A/B run; its ab.json. ABError (a side that cannot be built or run) propagates."""
    code = ab(_ab_plan(opts, base, head, out=out, extra=extra, tree=tree))
    verdicts = out / "ab.json"
    if code == 2 or not verdicts.is_file():
        raise ABError(f"the A/B run in {out} stopped with exit {code}: see {out / 'logs'}")
    data: dict[str, Any] = json.loads(verdicts.read_text(encoding="utf-8"))
    return data


def _suspect(b: dict[str, Any], threshold: float) -> bool:
    """Failed, or undecided with its estimate beyond the threshold: the scan stops at A/B's
    precision (±1.5 %) and level, the search's reproduction looks again with more runs. An
    unstable timing (wild pairs: a busy machine) counts too: the reproduction's own pooled,
    trimmed readings decide whether it moved."""
    if b.get("verdict") == "fail":
        return True
    beyond = float(b.get("ratio") or 0.0) > 1.0 + threshold
    return b.get("verdict") == "inconclusive" and beyond


def tracked_timing(
    scan: dict[str, Any], metric: str | None, threshold: float = 0.05
) -> dict[str, Any] | None:
    """The scan's suspect timing with the largest slowdown (of `metric` only, when given)."""
    failed = [
        b
        for b in scan.get("benchmarks", [])
        if b.get("kind") == "timing"
        and _suspect(b, threshold)
        and b.get("metric") in TIMINGS
        and (metric is None or b.get("metric") == metric)
    ]
    return max(failed, key=lambda b: float(b["ratio"])) if failed else None


def _nothing_to_search(scan: dict[str, Any], threshold: float) -> Result:
    """No suspect timing: not reproducible, unless an unstable timing's interval still reaches
    the threshold (wild pairs on a busy machine hid what it did): then inconclusive."""
    open_ = [
        b
        for b in scan.get("benchmarks", [])
        if b.get("kind") == "timing"
        and b.get("unstable")
        and float(b.get("ci_high") or math.inf) >= 1.0 + threshold
    ]
    if open_:
        return Result(
            "inconclusive",
            f"the scan could not rule out a slowdown of {len(open_)} unstable timing(s): "
            f"{open_[0]['unstable']} (see scan/summary.md); re-run on a quiet machine",
            0.0,
        )
    return Result(
        "not-reproducible",
        "no timing of the scan failed or lay beyond the threshold (see scan/summary.md)",
        0.0,
    )


def selector(fullname: str) -> str:
    """A `-k` expression that selects the one test of `fullname` (its name with parameters)."""
    return fullname.rpartition("::")[2]


class Steps:
    """The `Measure` the search calls: one A/B run of the tracked cell per look."""

    def __init__(
        self, opts: Options, commits: list[Commit], tracked: dict[str, Any], tree: Path
    ) -> None:
        self.opts, self.commits, self.tracked, self.tree = opts, commits, tracked, tree
        self.count = 0
        self.wall_s: list[float] = []
        self.planned = path_comparisons(len(commits) - 1)

    def __call__(self, lo: int, hi: int, look: int) -> Estimate:
        self.count += 1
        out = self.opts.out / "steps" / f"{self.count:02d}-{lo}-{hi}-look{look}"
        pairs = MIN_PAIRS * 2**look
        extra = [
            "-k", selector(self.tracked["fullname"]), "--min-pairs", str(pairs),
            "--pair-max-s", str(MAX_S * 2**look),
        ]  # fmt: skip
        base, head = self.commits[lo], self.commits[hi]
        _say(f"comparison {self.count}: {lo} {base.short} vs {hi} {head.short} (look {look})")
        started = time.perf_counter()
        try:
            data = _ab_run(self.opts, base, head, out=out, extra=extra, tree=self.tree)
        except ABError as error:
            # an error of the run as a whole (no side) is taken as the head's: the newer commit
            raise UnmeasurableError(lo if error.side == "base" else hi, str(error)) from error
        self.wall_s.append(time.perf_counter() - started)
        if self.count == 1:
            each = self.wall_s[0]
            _say(
                f"a comparison took {each:.0f} s: about {self.planned * each / 60:.0f} min for "
                "one culprit, more for an undecided comparison or a second culprit"
            )
        found = [
            b
            for b in data.get("benchmarks", [])
            if b.get("fullname") == self.tracked["fullname"]
            and b.get("metric") == self.tracked["metric"]
        ]
        diffs = found[0].get("log_ratios") if found else None
        if not diffs or len(diffs) < PAIRED_MIN:
            raise UnmeasurableError(hi, f"the cell did not run on both sides (see {out / 'logs'})")
        term = max(self.opts.process_cv, float(data.get("process_cv") or 0.0))
        est = estimate_from_pairs([float(d) for d in diffs], term)
        _say(f"  \u00d7{est.ratio:.3f} \u00b1{1.96 * est.se:.1%} from {est.pairs} pairs")
        return est


def run(opts: Options) -> int:
    """The whole bisection (module docstring); the exit code."""
    started = time.perf_counter()
    if opts.package is None:
        commits = first_parent_range(opts.good, opts.bad)
        what = "first-parent commit(s)"
    else:
        commits = release_range(opts.package, opts.good, opts.bad, opts.tree)
        what = f"release(s) of {opts.package}"
    n = len(commits) - 1
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "bisect.json").unlink(missing_ok=True)  # no stale verdict if this one stops
    _say(f"{n} {what} after {commits[0].short}, up to {commits[-1].short}")
    with Worktrees() as trees:
        apparatus = commits[0] if opts.apparatus == "good" else commits[-1]
        tree = trees.add(apparatus.sha)
        _say(f"scan: good vs bad over {opts.matrix} ({opts.apparatus} tree measures)")
        scan = _ab_run(opts, commits[0], commits[-1], out=opts.out / "scan", extra=(), tree=tree)
        tracked = tracked_timing(scan, opts.metric, opts.plan.threshold)
        if tracked is None:
            result = _nothing_to_search(scan, opts.plan.threshold)
            return _finish(opts, commits, result, tracked=None, started=started, wall_s=[])
        _say(
            f"searching {tracked['fullname']} {tracked['metric']} "
            f"(\u00d7{float(tracked['ratio']):.3f} in the scan)"
        )
        _say(
            f"about {path_comparisons(n)} comparisons of one cell for one culprit (reproduce, "
            f"two halves at {levels_of(n)} level(s), verify), more for an undecided one"
        )
        steps = Steps(opts, commits, tracked, tree)
        try:
            result = bisect(n, steps, opts.plan)
        except UnmeasurableError as broken:
            raise ABError(
                f"the {'good' if broken.index == 0 else 'bad'} end cannot be measured: {broken.why}"
            ) from broken
        profiled = _profile(opts, commits, result, tracked, tree) if opts.profile else None
    return _finish(
        opts,
        commits,
        result,
        tracked=tracked,
        started=started,
        wall_s=steps.wall_s,
        profiled=profiled,
    )


def _profile(
    opts: Options, commits: list[Commit], result: Result, tracked: dict[str, Any], tree: Path
) -> dict[str, Any] | None:
    """The op-level profile of the culprit that explains most, and its parent (`profile`)."""
    if not result.culprits:
        return None
    top = max(result.culprits, key=lambda c: c.explained)
    parent, culprit = commits[top.parent], commits[top.index]
    _say(f"profiling {parent.short} and {culprit.short} op by op (torch.profiler, untimed)")
    out = opts.out / "profile"
    try:
        plan = _ab_plan(opts, parent, culprit, out=out, extra=(), tree=tree)
        found = profile_pair(plan, tree, str(tracked["fullname"]), out)
    except ABError as error:
        return {"parent": parent.ref, "culprit": culprit.ref, "error": str(error)}
    return {"parent": parent.ref, "culprit": culprit.ref, **found}


def _finish(
    opts: Options,
    commits: list[Commit],
    result: Result,
    *,
    tracked: dict[str, Any] | None,
    started: float,
    wall_s: list[float],
    profiled: dict[str, Any] | None = None,
) -> int:
    wall = time.perf_counter() - started
    command = shlex.join(["nox", "-s", "bisect", "--", *opts.argv])
    context = Context(tracked, opts.plan, wall, wall_s, command, profiled)
    write_outputs(opts.out, commits, result, context)
    names = ", ".join(f"{commits[c.index].short} ({c.explained:.0%})" for c in result.culprits)
    line = f"{result.verdict.upper()}: {result.reason}"
    if names:
        line += f"; culprit(s): {names}"
    _say(f"{line}; {wall / 60:.1f} min; wrote {opts.out / 'summary.md'}")
    return EXIT[result.verdict]


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # worktrees removed and sides stopped on the way out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (module docstring)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)
    try:
        return run(parse(sys.argv[1:] if argv is None else argv))
    except PhasebenchError as error:
        text = str(error).splitlines()[0] if str(error) else repr(error)
        print(f"bisect: error: {text}", file=sys.stderr)
        return 2
