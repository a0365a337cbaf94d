"""What in the change costs: the culprit and its parent profiled op by op on the searched cell.

After a culprit is verified, each of its two sides (its parent's and its own: tree, environment,
model files, as in A/B mode) runs the cell's generation once under `torch.profiler` — the
suite's `--profile DIR` (`benchmarks.harness.profiling`: untimed, never history) on a copy of
the matrix with `measurements: [generate]`, `-k` the cell — and `decode_ops` reads each trace:
every operator's **self time** (its own time less the operators it called) inside the
`phasebench.decode_step.*` ranges, per decode step. `compare` puts the two side by side, the
operators that moved most first.

A profiler's overhead distorts each op's time, alike on both sides; the table says where the
time went, the verdict's ratio says how much (docs/bisect.md). A profile that cannot be taken
(no generate cell, a side that fails) is a note beside the verdict, never a changed verdict.
"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.ab.plan import Plan as ABPlan
from benchmarks.ab.run import build_side, side_environment, side_tree
from benchmarks.ab.sides import ABError, Worktrees

DECODE_PREFIX = "phasebench.decode_step."
#: Operators shown in the comparison.
TOP = 12


@dataclass(frozen=True)
class OpTimes:
    """One trace's operators: self time per decode step (microseconds) and call counts per step,
    over `steps` decode steps."""

    self_us: Mapping[str, float]
    calls: Mapping[str, float]
    steps: int


def decode_ops(trace: Mapping[str, Any]) -> OpTimes:
    """Self time and calls per decode step of every operator in a Chrome trace (module doc)."""
    events = [
        e
        for e in trace.get("traceEvents", [])
        if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("dur"), (int, float))
    ]
    windows = [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if str(e.get("name", "")).startswith(DECODE_PREFIX)
    ]
    ops = sorted(
        (e for e in events if e.get("cat") == "cpu_op"),
        key=lambda e: (e.get("pid"), e.get("tid"), float(e["ts"]), -float(e["dur"])),
    )
    # Self time: an op's duration less its direct children's, nesting read per thread.
    child: dict[int, float] = defaultdict(float)
    stack: list[tuple[int, float, Any]] = []
    for i, e in enumerate(ops):
        start, thread = float(e["ts"]), (e.get("pid"), e.get("tid"))
        while stack and (stack[-1][2] != thread or stack[-1][1] <= start):
            stack.pop()
        if stack:
            child[stack[-1][0]] += float(e["dur"])
        stack.append((i, start + float(e["dur"]), thread))
    self_us: dict[str, float] = defaultdict(float)
    calls: dict[str, float] = defaultdict(float)
    for i, e in enumerate(ops):
        start = float(e["ts"])
        if any(lo <= start < hi for lo, hi in windows):
            self_us[str(e["name"])] += max(0.0, float(e["dur"]) - child[i])
            calls[str(e["name"])] += 1
    steps = max(1, len(windows))
    return OpTimes(
        {k: v / steps for k, v in self_us.items()},
        {k: v / steps for k, v in calls.items()},
        len(windows),
    )


def compare(parent: OpTimes, culprit: OpTimes, top: int = TOP) -> list[dict[str, Any]]:
    """The operators that moved most per decode step (self time), parent against culprit."""
    names = set(parent.self_us) | set(culprit.self_us)

    def change(name: str) -> float:
        return culprit.self_us.get(name, 0.0) - parent.self_us.get(name, 0.0)

    return [
        {
            "op": name,
            "parent_us": parent.self_us.get(name, 0.0),
            "culprit_us": culprit.self_us.get(name, 0.0),
            "change_us": change(name),
            "parent_calls": parent.calls.get(name, 0.0),
            "culprit_calls": culprit.calls.get(name, 0.0),
        }
        for name in sorted(names, key=lambda n: (-abs(change(n)), n))[:top]
    ]


def markdown(found: Mapping[str, Any]) -> list[str]:
    """`profile_pair`'s result as Markdown lines."""
    rows: Sequence[Mapping[str, Any]] = found["rows"]
    out = [
        f"Self time per decode step under torch.profiler ({found['steps']} steps): parent "
        f"{found['parent_total_us']:.0f} \u00b5s, culprit {found['culprit_total_us']:.0f} \u00b5s "
        "(the profiler's overhead included, alike on both).",
        "",
        "| operator | parent \u00b5s | culprit \u00b5s | change \u00b5s | calls per step |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        out.append(
            f"| `{r['op']}` | {r['parent_us']:.1f} | {r['culprit_us']:.1f} | "
            f"{r['change_us']:+.1f} | {r['parent_calls']:g} \u2192 {r['culprit_calls']:g} |"
        )
    return out


def _one_cell_matrix(matrix: Path, out: Path) -> Path:
    data = yaml.safe_load(matrix.read_text(encoding="utf-8"))
    data["measurements"] = ["generate"]
    data["description"] = f"{data.get('description', '')} (bisect profile: generate only)"
    out.mkdir(parents=True, exist_ok=True)
    copy = out / matrix.name
    copy.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return copy


def profile_pair(plan: ABPlan, apparatus: Path, fullname: str, out: Path) -> dict[str, Any]:
    """Profile the cell of `fullname` on `plan`'s base (the parent) and head (the culprit):
    `rows` (`compare`), `parent_total_us`, `culprit_total_us`, `steps`. ABError when a side
    cannot be profiled."""
    cell = fullname.rpartition("::")[2].partition("[")[2].rstrip("]")
    if not cell:
        raise ABError(f"{fullname}: no cell id to profile")
    matrix = _one_cell_matrix(plan.matrix, out)
    found: list[OpTimes] = []
    with Worktrees() as trees:
        for name, ref in (("base", plan.base_ref), ("head", plan.head_ref)):
            tree, commit = side_tree(ref, trees)
            side = build_side(name, ref, tree, commit, plan)
            where = out / name
            command = [
                str(side.python), "-m", "pytest", "benchmarks", f"--matrix={matrix}",
                f"--models-dir={side.models_dir}", f"--profile={where}", "-p", "no:cacheprovider",
                "--peaks=none", *plan.pytest_args, "-k", f"test_generate[{cell}]",
            ]  # fmt: skip
            log = out / f"{name}.log"
            with log.open("w", encoding="utf-8") as sink:
                code = subprocess.call(
                    command, cwd=apparatus, env=side_environment(side, None), stdout=sink,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            traces = sorted(where.glob("*.trace.json"))
            if code != 0 or not traces:
                raise ABError(f"the {name} side's profile run ended with exit {code}: see {log}")
            found.append(decode_ops(json.loads(traces[0].read_text(encoding="utf-8"))))
    parent, culprit = found
    return {
        "rows": compare(parent, culprit),
        "parent_total_us": sum(parent.self_us.values()),
        "culprit_total_us": sum(culprit.self_us.values()),
        "steps": min(parent.steps, culprit.steps),
    }
