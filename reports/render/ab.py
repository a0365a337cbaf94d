"""Render an `ab.json` document as one self-contained `index.html` and a PR-comment `summary.md`.

The report's look (its CSS, inlined) and its formatting filters (`reports.render.html`'s `fmt_*`);
jinja2 with autoescape and `StrictUndefined`. Each paired timing gets a small inline SVG: one
dot per pair (the head/base change of that pair), the 95 % interval of the ratio as a band, the
threshold as a dashed line, so a reader sees whether the verdict rests on all pairs or on a few.
No script and no network: the page opens from `file://`.

Deliberately not here: judging (`reports.ab`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from reports.render.bisectcmd import bisect_commands
from reports.render.html import STATIC, environment

WIDTH, HEIGHT, PAD = 180, 24, 5


def strip_points(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """SVG coordinates of one timing entry's pairs, interval and threshold (None: nothing to draw).

    The x axis is the relative change head/base - 1, spanning every pair, the interval, 0 and the
    threshold, with a margin; y jitters the dots by pair index so that ties stay visible.
    """
    diffs = entry.get("log_ratios") or []
    if entry.get("kind") != "timing" or not diffs:
        return None
    changes = [math.expm1(d) for d in diffs]
    threshold = float(entry["threshold"])
    marks = [*changes, 0.0, threshold]
    ci = None
    if entry.get("ci_low") is not None and entry.get("ci_high") is not None:
        ci = (float(entry["ci_low"]) - 1, float(entry["ci_high"]) - 1)
        marks += list(ci)
    low, high = min(marks), max(marks)
    span = (high - low) or 1.0
    low, high = low - 0.05 * span, high + 0.05 * span

    def x(value: float) -> float:
        return round(PAD + (value - low) / (high - low) * (WIDTH - 2 * PAD), 2)

    rows = max(1, len(changes) - 1)
    dots = [
        {"x": x(c), "y": round(PAD + (i / rows) * (HEIGHT - 2 * PAD), 2), "c": c}
        for i, c in enumerate(changes)
    ]
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "dots": dots,
        "zero": x(0.0),
        "threshold": x(threshold),
        "ci": None if ci is None else {"x": x(ci[0]), "w": max(1.0, x(ci[1]) - x(ci[0]))},
        "low": low,
        "high": high,
    }


def half_widths(benchmarks: Sequence[Mapping[str, Any]]) -> list[float]:
    """Half-widths of the ratio intervals of the paired timings, as fractions."""
    return [
        (b["ci_high"] - b["ci_low"]) / 2
        for b in benchmarks
        if b.get("kind") == "timing"
        and b.get("ci_low") is not None
        and b.get("ci_high") is not None
    ]


def _view(document: Mapping[str, Any]) -> dict[str, Any]:
    benchmarks = list(document["benchmarks"])
    order = {v: i for i, v in enumerate(("fail", "missing", "inconclusive", "improved", "new"))}
    ranked = sorted(benchmarks, key=lambda b: (order.get(b["verdict"], 9), b["fullname"]))
    widths = half_widths(benchmarks)
    context = document.get("context", {})
    return {
        "doc": document,
        "context": context,
        "sides": context.get("sides", {}),
        "rows": [(b, strip_points(b)) for b in ranked],
        "notable": [b for b in ranked if b["verdict"] not in ("pass",)],
        "median_half_width": statistics.median(widths) if widths else None,
        "pairs_text": pairs_text(benchmarks),
        "bisect": ab_bisect_commands(document),
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def ab_bisect_commands(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(test id, the `nox -s bisect` command) for every failed primary timing, when both sides
    are commits of one repository (`bisectcmd`)."""
    context = document.get("context", {})
    sides = context.get("sides", {})
    failed = [
        (str(b["fullname"]), str(b.get("metric")))
        for b in document.get("benchmarks", [])
        if b.get("verdict") == "fail"
    ]
    return bisect_commands(
        (sides.get("base") or {}).get("commit"),
        (sides.get("head") or {}).get("commit"),
        failed,
        str(context.get("matrix") or ""),
    )


def pairs_text(benchmarks: Sequence[Mapping[str, Any]]) -> str:
    """'100 pairs', or '20-100 pairs' when the time budget stopped some benchmarks early."""
    counts = [b["pairs"] for b in benchmarks if b.get("kind") == "timing" and b.get("pairs")]
    if not counts:
        return "no pairs"
    low, high = min(counts), max(counts)
    return f"{high} pairs" if low == high else f"{low}-{high} pairs"


def render_html(document: Mapping[str, Any]) -> str:
    """The self-contained HTML page of an A/B run."""
    view = _view(document)
    view["report_css"] = (STATIC / "report.css").read_text(encoding="utf-8")
    return environment(False).get_template("ab.html.j2").render(**view)


def render_summary(document: Mapping[str, Any]) -> str:
    """The Markdown summary of an A/B run (for a PR comment)."""
    return environment(True).get_template("ab_summary.md.j2").render(**_view(document))
