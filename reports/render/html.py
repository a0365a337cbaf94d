"""Render a `Report` to one self-contained `index.html` and a PR-comment `summary.md`.

jinja2 with autoescape on and `StrictUndefined` (a missing value is a bug, not an empty cell).
Every number reaches the templates in base units and is formatted only there, by the filters
registered in `environment`. Chart data goes in as `|tojson` (which escapes `<`, `>`, `&`, `'`),
and the vendored uPlot (reports/render/static, MIT) plus our own small script and CSS are inlined,
so
the file opens from `file://` with no network.

`summary.md` is cut to stay under GitHub's 65,536-character comment limit: rows are dropped from
the regressions table (with a note saying how many) until it fits.

Deliberately not here: judging (`analysis`), choosing runs (`history`), assembling (`report`).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from reports.analysis.series import Verdict
from reports.analysis.trends import Trend
from reports.render import engines, quant, serve, tp
from reports.render.changes import change_text, first_screen, interval_text, mde_text
from reports.render.headline import shift_said, shift_text
from reports.render.report import MachineReport, Report
from reports.render.roofline import RooflineChart
from reports.render.runmode import entry_text

STATIC = Path(__file__).resolve().parent / "static"
TEMPLATES = Path(__file__).resolve().parent / "templates"
GITHUB_COMMENT_LIMIT = 65_536
SUMMARY_BUDGET = 60_000  # below the limit: GitHub counts some characters differently
ARTIFACT_PLACEHOLDER = "{{ARTIFACT_URL}}"


def fmt_seconds(value: float | None) -> str:
    """Seconds in the unit that reads best: s, ms or µs, three significant figures."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    magnitude = abs(value)
    if magnitude >= 1.0:
        return f"{value:.3g} s"
    if magnitude >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def fmt_bytes(value: float | str | None) -> str:
    """Bytes with binary units (KiB, MiB, GiB) and the exact count for small values."""
    if value is None or isinstance(value, str):
        return "n/a" if value is None else value
    magnitude = abs(value)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if magnitude >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:,.0f} B"


def fmt_pct(value: float | None, digits: int = 1) -> str:
    """A fraction as a percentage (0.05 -> '5.0 %')."""
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value * 100:.{digits}f} %"


def fmt_ratio(ratio: float | None) -> str:
    """A ratio with three decimals and a times sign."""
    return "n/a" if ratio is None or math.isnan(ratio) else f"{ratio:.3f}x"


def fmt_p(value: float | None) -> str:
    """A p- or q-value, scientific below 0.001."""
    if value is None:
        return "n/a"
    return f"{value:.1e}" if value < 1e-3 else f"{value:.3f}"


def fmt_plain_pct(value: float | str | None) -> str:
    """A number that already is a percentage (roofline fields)."""
    if value is None or isinstance(value, str):
        return "n/a" if value is None else value
    return f"{value:.2f} %"


def fmt_si(value: float | str | None, unit: str = "") -> str:
    """A large rate with an SI prefix (FLOP/s, B/s)."""
    if value is None or isinstance(value, str):
        return "n/a" if value is None else value
    for prefix, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def fmt_rate(value: float | None) -> str:
    """Tokens per second with three significant figures ("1.23k tok/s")."""
    if value is None or math.isnan(value):
        return "n/a"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.3g}k tok/s"
    return f"{value:.3g} tok/s"


def fmt_joules_per_token(value: float | None) -> str:
    """Joules per token with three significant figures, in mJ below one joule."""
    if value is None or math.isnan(value):
        return "n/a"
    if abs(value) < 1:
        return f"{value * 1e3:.3g} mJ/tok"
    return f"{value:.3g} J/tok"


def fmt_value(value: float | None, metric: str) -> str:
    """A metric value in its unit, chosen from the metric's name suffix."""
    if value is None:
        return "n/a"
    if metric.endswith(("_bytes", "_bytes_per_token")):
        return fmt_bytes(value)
    if metric.endswith("_s"):
        return fmt_seconds(value)
    return f"{value:.4g}"


def sort_value(value: float | None) -> str:
    """A `data-v` attribute value for numeric table sorting ('' sorts last)."""
    return "" if value is None or math.isnan(value) else repr(float(value))


def md_escape(text: object) -> str:
    """Make text from history safe inside a Markdown table cell (no HTML, no pipes, one line)."""
    out = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")
    return out.replace("<", "&lt;").replace(">", "&gt;").replace("\r", " ").replace("\n", " ")


@lru_cache(maxsize=2)
def environment(markdown: bool) -> jinja2.Environment:
    """The jinja2 environment of every template: HTML autoescaped, Markdown not; our filters."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=not markdown,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        seconds=fmt_seconds,
        bytes=fmt_bytes,
        pct=fmt_pct,
        change=change_text,
        interval=interval_text,
        mde=mde_text,
        ratio=fmt_ratio,
        pval=fmt_p,
        plainpct=fmt_plain_pct,
        si=fmt_si,
        rate=fmt_rate,
        j_per_tok=fmt_joules_per_token,
        value=fmt_value,
        sortv=sort_value,
        md=md_escape,
        runmode_entry=entry_text,
        quant_value=quant.value_text,
        quant_ratio=quant.ratio_text,
        quant_figure=quant.figure_text,
        quant_accuracy=quant.accuracy_cells,
        quant_row_ratio=quant.row_ratio_text,
        quant_left_dense=quant.left_dense_lines,
        quant_sqnr_rows=quant.sqnr_rows,
        quant_sqnr_detail=quant.sqnr_detail,
        tp_cell=tp.cell_text,
        tp_ranks=tp.rank_text,
        serve_value=serve.value_text,
        serve_svg=serve.svg,
        file_url=serve.file_url,
        **engines.FILTERS,
    )
    env.globals.update(shift_said=shift_said, shift_text=shift_text)
    return env


def _static(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")


def roofline_data(chart: RooflineChart) -> dict[str, Any]:
    """JSON-ready roofs and numbered points of a roofline chart (numbers match the HTML table)."""
    roofs = list(chart.roofs)
    return {
        "roofs": [
            {"label": r.label, "flop": r.peak_flop_per_s, "bw": r.peak_bandwidth_bytes_per_s}
            for r in roofs
        ],
        "points": [
            {
                "n": n,
                "phase": p.phase,
                "cell": p.cell_id,
                "x": p.intensity_flop_per_byte,
                "y": p.achieved_flop_per_s,
                "roof": None if p.roof is None else roofs.index(p.roof),
            }
            for n, p in enumerate(chart.points, start=1)
        ],
    }


def _trend_data(trend: Trend) -> dict[str, Any]:
    return {
        "title": trend.cell_id,
        "metric": trend.metric,
        "unit": trend.unit,
        "x": list(trend.x),
        "y": list(trend.y),
        "labels": list(trend.label),
        "steps": [
            {"x": float(s.run_index), "rel": s.rel_change, "commit": s.commit_id[:10]}
            for s in trend.steps
        ],
    }


def chart_data(machine: MachineReport, index: int) -> dict[str, Any]:
    """JSON-ready chart series of one machine (emitted with `|tojson`)."""
    return {
        "roofline": (
            {f"r{index}": roofline_data(machine.roofline)} if machine.roofline.points else {}
        ),
        "ticks": list(machine.run_ticks),
        "stack": [{"x": float(x), "text": text} for x, text in machine.stack_x],
        "trends": {f"t{index}-{i}": _trend_data(t) for i, t in enumerate(machine.trends)},
        "hosts": {f"h{index}-{i}": _trend_data(t) for i, t in enumerate(machine.host_trends)},
        "curves": {
            f"c{index}-{i}": {
                "title": c.cell_id,
                "x": list(c.position),
                "current": list(c.current_s),
                "baseline": list(c.baseline_s),
            }
            for i, c in enumerate(machine.decode_curves)
        },
    }


def render_html(report: Report, generated_at: str) -> str:
    """The self-contained HTML report."""
    template = environment(False).get_template("report.html.j2")
    return template.render(
        report=report,
        generated_at=generated_at,
        **first_screen(report.verdicts),
        charts=[chart_data(m, i) for i, m in enumerate(report.machines)],
        uplot_js=_static("uPlot.iife.min.js"),
        uplot_css=_static("uPlot.min.css"),
        report_js=_static("report.js"),
        report_css=_static("report.css"),
    )


def _verdict_rows(report: Report) -> list[tuple[MachineReport, Verdict]]:
    """Every fail and missing, then the ten largest inconclusive slowdowns (rest: the HTML)."""
    unsure = [(m, v) for m, v in report.ranked(("inconclusive",)) if (v.ratio or 0) > 1]
    return report.ranked(("fail",)) + report.ranked(("missing",)) + unsure[:10]


def render_summary(report: Report, generated_at: str, budget: int = SUMMARY_BUDGET) -> str:
    """The PR comment, cut to `budget` characters by dropping table rows (with a note)."""
    template = environment(True).get_template("summary.md.j2")
    url = report.artifact_url or ARTIFACT_PLACEHOLDER
    rows = _verdict_rows(report)
    changed = first_screen(report.verdicts)
    shown = min(len(rows), 50)

    def render(n: int) -> str:
        return template.render(
            report=report,
            generated_at=generated_at,
            **changed,
            rows=rows[:n],
            hidden=len(rows) - n,
            artifact_url=url,
            improved=report.ranked(("improved",))[:10],
        )

    text = render(shown)
    while len(text) > budget and shown > 0:
        shown = max(0, shown - max(1, shown // 4))
        text = render(shown)
    if len(text) > budget:  # the fixed parts alone are too long (huge env diff or skip list)
        note = "\n\n…(summary truncated to fit a GitHub comment; see the HTML report)\n"
        text = text[: budget - len(note)] + note
    return text
