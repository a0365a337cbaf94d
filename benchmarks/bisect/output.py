"""What a bisection leaves: `bisect.json` (schema 1), `summary.md` and `index.html`.

`bisect.json` (contract, schema 1; fields may be added, none changed): `schema`, `verdict`
(`culprit` / `not-reproducible` / `inconclusive`), `reason`, `range` (`good`, `bad`, `commits`:
every point with `index`, `ref` (the full SHA, or `name==version` for a release), `sha` (the
tree), `subject`), `judged` (`fullname`, `metric`, the scan's `ratio`; null when nothing
failed), `settings` (`threshold`, `alpha`, `looks`, `alpha_each`), `culprits[]` (`ref`,
`parent`, `subject`, `ratio`, `ci_low`, `ci_high`, `explained`: its share of good->bad on the
log scale), `profile` (the culprit that explains most against its parent, op by op: `parent`,
`culprit`, `rows[]` with `op`, `parent_us`, `culprit_us`, `change_us`, calls per step, and the
totals; or `error`; null when no culprit or `--no-profile`), `steps[]` (`lo`, `hi`, `purpose`,
`reading`, and `pairs`, `ratio`, `ci_low`, `ci_high`, `log_se` (the log-ratio's standard error)
of its looks pooled, and `looks[]` with the same of each), `skipped` (sha -> why), `open`
(ranges left open, with why), `notes` (a back-up step), `wall_s`, `comparison_wall_s`,
`command`. Intervals are 95 % two-sided.

`index.html` shows the same, with a picture: every commit the search measured, at its level
against the good one (the paired ratios chained along the search), culprits in red.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.ab.sides import ROOT
from benchmarks.bisect.commits import Commit, change_of
from benchmarks.bisect.page import page
from benchmarks.bisect.profile import markdown as profile_markdown
from reports.analysis.bisection import Estimate, Plan, Result
from reports.analysis.decision import interval

SCHEMA = 1


def _points(doc: dict[str, Any]) -> str:
    """What the range is made of: releases of a package, or commits."""
    return "releases" if "==" in str(doc["range"]["good"]) else "first-parent commits"


def _short(ref: str) -> str:
    """A SHA's first 12 characters; a release's pin whole."""
    return ref if "==" in ref else ref[:12]


def _interval(est: Estimate) -> tuple[float, float]:
    return interval(est.log_ratio, est.se, est.df, 0.95)


def _look(est: Estimate) -> dict[str, Any]:
    low, high = _interval(est)
    return {
        "pairs": est.pairs,
        "ratio": est.ratio,
        "ci_low": low,
        "ci_high": high,
        "log_se": est.se,
    }


@dataclass(frozen=True)
class Context:
    """What the search was of and how it ran: the timing followed (the scan's entry; None when
    nothing was), the rule, the whole wall time, each comparison's, the command, and the
    culprit's op-level profile (`profile.profile_pair`, or its `error`; None: not taken)."""

    tracked: dict[str, Any] | None
    plan: Plan
    wall_s: float
    comparison_wall_s: Sequence[float]
    command: str
    profile: dict[str, Any] | None = None


def document(commits: Sequence[Commit], result: Result, context: Context) -> dict[str, Any]:
    """The `bisect.json` document (module docstring)."""
    tracked, plan = context.tracked, context.plan
    culprits = []
    for c in result.culprits:
        low, high = _interval(c.estimate)
        culprits.append(
            {
                "ref": commits[c.index].ref,
                "parent": commits[c.parent].ref,
                "subject": commits[c.index].subject,
                "ratio": c.estimate.ratio,
                "ci_low": low,
                "ci_high": high,
                "explained": c.explained,
            }
        )
    return {
        "schema": SCHEMA,
        "verdict": result.verdict,
        "reason": result.reason,
        "range": {
            "good": commits[0].ref,
            "bad": commits[-1].ref,
            "commits": [
                {"index": i, "ref": c.ref, "sha": c.sha, "subject": c.subject}
                for i, c in enumerate(commits)
            ],
        },
        "judged": None
        if tracked is None
        else {
            "fullname": tracked["fullname"],
            "metric": tracked["metric"],
            "ratio": tracked["ratio"],
        },
        "settings": {
            "threshold": plan.threshold,
            "alpha": plan.alpha,
            "looks": plan.looks,
            "alpha_each": result.alpha_each,
        },
        "culprits": culprits,
        "steps": [
            {
                "lo": s.lo,
                "hi": s.hi,
                "purpose": s.purpose,
                "reading": s.reading,
                **_look(s.estimate),  # every look pooled: what the reading is of
                "looks": [_look(e) for e in s.looks],
            }
            for s in result.steps
        ],
        "skipped": {commits[i].ref: why for i, why in result.skipped.items()},
        "open": [{"lo": lo, "hi": hi, "why": why} for lo, hi, why in result.open_ranges],
        "notes": list(result.notes),
        "wall_s": context.wall_s,
        "comparison_wall_s": list(context.comparison_wall_s),
        "command": context.command,
        "profile": context.profile,
    }


def levels(doc: dict[str, Any]) -> dict[int, tuple[float, float]]:
    """Each measured commit's log level against the good one and its variance, chaining the
    paired estimates in the order the search made them (a level from its first reading)."""
    out: dict[int, tuple[float, float]] = {0: (0.0, 0.0)}
    for step in doc["steps"]:
        lo, hi = step["lo"], step["hi"]
        if lo in out and hi not in out:
            out[hi] = (out[lo][0] + math.log(step["ratio"]), out[lo][1] + step["log_se"] ** 2)
    return out


def picture(doc: dict[str, Any]) -> str:
    """An SVG: the measured commits' levels (ratio to good, 2-SE bars), culprits in red."""
    points = levels(doc)
    n = len(doc["range"]["commits"]) - 1
    index = {c["ref"]: c["index"] for c in doc["range"]["commits"]}
    culprits = {index[k["ref"]] for k in doc["culprits"]}
    lows = [math.exp(v - 2 * math.sqrt(w)) for v, w in points.values()]
    highs = [math.exp(v + 2 * math.sqrt(w)) for v, w in points.values()]
    bottom, top = min(0.95, *lows), max(1.05, *highs)
    width, height, pad = 640, 240, 40

    def x(i: int) -> float:
        return pad + (width - 2 * pad) * i / max(n, 1)

    def y(r: float) -> float:
        return height - pad - (height - 2 * pad) * (r - bottom) / (top - bottom)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'role="img" aria-label="each measured commit against the good one">',
        f'<line x1="{pad}" x2="{width - pad}" y1="{y(1.0):.1f}" y2="{y(1.0):.1f}" '
        'stroke="#999" stroke-dasharray="4"/>',
        f'<text x="4" y="{y(1.0) + 4:.1f}" font-size="11">\u00d71.00</text>',
        f'<text x="4" y="{y(top) + 10:.1f}" font-size="11">\u00d7{top:.2f}</text>',
        f'<text x="{width / 2:.0f}" y="{height - 8}" font-size="11" text-anchor="middle">'
        f"commit index (0 = good, {n} = bad)</text>",
    ]
    for i, (v, w) in sorted(points.items()):
        sd = math.sqrt(w)
        colour = "#c0392b" if i in culprits else "#2c3e50"
        parts.append(
            f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(math.exp(v - 2 * sd)):.1f}" '
            f'y2="{y(math.exp(v + 2 * sd)):.1f}" stroke="{colour}"/>'
            f'<circle cx="{x(i):.1f}" cy="{y(math.exp(v)):.1f}" r="4" fill="{colour}">'
            f"<title>commit {i}: \u00d7{math.exp(v):.3f}</title></circle>"
            f'<text x="{x(i):.1f}" y="{height - pad + 14}" font-size="10" '
            f'text-anchor="middle">{i}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def summary(doc: dict[str, Any], repo: Path | None = None) -> str:
    """`summary.md`: the verdict, each culprit with its message and diff stat, the steps."""
    judged = doc["judged"]
    what = f"`{judged['fullname']}` {judged['metric']}" if judged else "nothing"
    lines = [
        f"## phasebench bisect: {doc['verdict'].upper()}",
        "",
        f"{doc['reason']}.",
        "",
        f"Range: `{_short(doc['range']['good'])}`..`{_short(doc['range']['bad'])}` "
        f"({len(doc['range']['commits']) - 1} {_points(doc)} after the good one); judged: {what}; "
        f"threshold {doc['settings']['threshold']:.0%}, each reading at level "
        f"{doc['settings']['alpha_each']:.2g}; {doc['wall_s'] / 60:.1f} min.",
    ]
    for c in doc["culprits"]:
        if "==" in c["ref"]:  # a release: where its changes are listed
            name, _, version = c["ref"].partition("==")
            message, stat = c["subject"], f"https://pypi.org/project/{name}/{version}/"
        else:
            message, stat = change_of(c["ref"], repo) if repo else (c["subject"], "")
        lines += [
            "",
            f"### Culprit `{_short(c['ref'])}`: \u00d7{c['ratio']:.3f} "
            f"({c['ci_low']:.3f} \u2026 {c['ci_high']:.3f}) against its parent "
            f"`{_short(c['parent'])}`, {c['explained']:.0%} of good\u2192bad",
            "",
            "```",
            message,
            "",
            stat,
            "```",
        ]
    found = doc.get("profile")
    if found:
        lines += ["", f"### What in `{_short(found['culprit'])}` costs", ""]
        lines += [f"No profile: {found['error']}"] if "error" in found else profile_markdown(found)
    for sha, why in doc["skipped"].items():
        lines.append(f"- skipped `{_short(sha)}`: {why}")
    for o in doc["open"]:
        lines.append(f"- open: commits {o['lo']}..{o['hi']}: {o['why']}")
    for note in doc.get("notes", []):
        lines.append(f"- {note}")
    lines += [
        "",
        "| # | arms (commit index) | why | reading | ratio (95 %) | pairs |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for i, s in enumerate(doc["steps"], 1):
        pairs = " + ".join(str(look["pairs"]) for look in s["looks"])
        lines.append(
            f"| {i} | {s['lo']} vs {s['hi']} | {s['purpose']} | {s['reading']} | "
            f"\u00d7{s['ratio']:.3f} ({s['ci_low']:.3f} \u2026 {s['ci_high']:.3f}) "
            f"| {pairs} |"
        )
    lines += ["", f"Rerun: `{doc['command']}`", ""]
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    # written whole, then renamed: a stopped run never leaves half a file
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_outputs(
    out: Path,
    commits: Sequence[Commit],
    result: Result,
    context: Context,
    repo: Path | None = ROOT,
) -> dict[str, Any]:
    """Write the three files; returns the document. `bisect.json` is written last. `repo`:
    where a culprit's message and diff stat are read (None: its subject only)."""
    doc = document(commits, result, context)
    markdown = summary(doc, repo)
    _write(out / "summary.md", markdown)
    svg = picture(doc) if doc["steps"] else ""
    _write(out / "index.html", page(f"phasebench bisect: {doc['verdict']}", svg, markdown))
    _write(out / "bisect.json", json.dumps(doc, indent=1))
    return doc
