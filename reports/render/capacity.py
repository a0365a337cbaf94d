"""The capacity view: the highest request rate a server holds within its SLOs, and what each
serving setting trades between total throughput and each user's speed (HTML and inline SVG).

A **capacity cell** is a serving record (`extra_info.measurement` "serve") that carries
`sla_probes`: the load passes of a capacity search (`benchmarks/harness/serve/capacity.py`),
each `{"rate_req_per_s", "slo_met_share", "requests", "ttft_p90_s", "tpot_p50_s",
"e2el_p50_s", "output_throughput_tok_per_s"}` (any may be null), with `sla_rate_req_per_s` (the
highest rate whose passes met; 0.0 when none did), `sla_bracket` ([highest met, lowest missed],
null on a side not found), `sla_share` (the share of a pass's requests that must meet every
SLO), `sla_stopped` (why the search ended), `sla_non_monotone` and the SLOs `slo_ttft_s`,
`slo_tpot_s`, `slo_e2el_s` (null: no target).

- `capacity_rows(benchmarks)`: one `CapacityRow` per capacity cell, titled by `group_title` of
  its params but `request_rate`; a pass **met** when its share >= `sla_share` (the search's
  slack, so 9 of 10 meet 0.9), None without a share.
- `latency_svg(row, metric)`: one latency of the passes (TTFT p90, TPOT p50 or E2EL p50, in ms
  or s) against the offered rate on a log axis; the SLO on that figure a dashed horizontal line,
  the capacity a vertical line over the bracket shaded; passes that met blue dots, that missed
  orange crosses (shape and colour, for colour-blind readers), hover for each pass's figures.
- `pareto_points(benchmarks)`, `pareto_svg(points)` (`reports.render.pareto`, re-exported):
  every serving pass of the run, each fixed-rate or `inf` cell and each capacity probe, as
  total output throughput (tok/s) against throughput per user (1 / TPOT p50), one series per
  server and batching setting, each series' Pareto frontier a line.
- `capacity_section_html(benchmarks)`: a `<section>` with a one-line explanation, a table (cell,
  SLOs, share, capacity, bracket, probes), the latency charts and one Pareto chart per workload;
  "" without a serving record.

Every text from a record is escaped. The current run's figures, not verdicts. Imports neither
torch nor benchmarks.* (DESIGN §1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from reports.history.runfile import BenchmarkResult
from reports.render.pareto import (
    ParetoPoint,
    frontier,
    is_capacity,
    is_serve,
    number,
    params_title,
    pareto_points,
    pareto_svg,
)
from reports.render.svgplot import (
    Axes,
    axis_labels,
    frame,
    linear_ticks,
    log_ticks,
    marker,
    spaced,
    svg_open,
)

# The Pareto view is drawn in this section: its names are part of this module's interface.
__all__ = [
    "LATENCY",
    "CapacityProbe",
    "CapacityRow",
    "ParetoPoint",
    "capacity_rows",
    "capacity_section_html",
    "frontier",
    "latency_svg",
    "pareto_points",
    "pareto_svg",
]

# The harness's slack (capacity._SLACK): 9 of 10 requests meet a share of 0.9 however rounded.
_SLACK = 1e-9
#: The figures a probe may carry besides its rate, share and requests (names carry the unit).
PROBE_FIGURES = (
    "ttft_p90_s",
    "tpot_p50_s",
    "e2el_p50_s",
    "ttft_from_schedule_p90_s",
    "e2el_from_schedule_p90_s",
    "output_throughput_tok_per_s",
)
#: metric -> (its name on a chart, the SLO field it is held against).
LATENCY = {
    "ttft_p90_s": ("TTFT p90", "slo_ttft_s"),
    "tpot_p50_s": ("TPOT p50", "slo_tpot_s"),
    "e2el_p50_s": ("E2EL p50", "slo_e2el_s"),
    # What a probe is judged on: latency from each request's scheduled arrival (a request
    # waiting for a concurrency slot is late for its user), at the share's percentile.
    "ttft_from_schedule_p90_s": ("TTFT p90 from arrival", "slo_ttft_s"),
    "e2el_from_schedule_p90_s": ("E2EL p90 from arrival", "slo_e2el_s"),
}
SLO_FIELDS = (("slo_ttft_s", "TTFT"), ("slo_tpot_s", "TPOT"), ("slo_e2el_s", "E2EL"))
MET_COLOR, MISSED_COLOR, UNKNOWN_COLOR = "#0072b2", "#d55e00", "#6b7280"
# The report's <code> breaks anywhere (for cell ids); a title reads better broken at its spaces.
_CODE = '<code style="word-break:normal">'


@dataclass(frozen=True)
class CapacityProbe:
    """One load pass of a capacity search, in the order tried."""

    rate_req_per_s: float
    slo_met_share: float | None
    requests: int | None
    figures: Mapping[str, float | None]  # PROBE_FIGURES
    met: bool | None  # share >= the row's share; None without a share


@dataclass(frozen=True)
class CapacityRow:
    """One capacity cell of the run."""

    title: str
    cell_id: str
    sla_rate_req_per_s: float | None  # None: the record has none
    bracket: tuple[float | None, float | None]  # (highest met, lowest missed)
    share: float | None
    slos: Mapping[str, float | None]  # SLO_FIELDS' names -> seconds
    probes: tuple[CapacityProbe, ...]
    stopped: str | None
    non_monotone: bool
    params: Mapping[str, Any]

    @property
    def capacity_text(self) -> str:
        """'2.83', '≥ 8' (met at the highest rate allowed), '0 (none met)' or '—'."""
        rate = self.sla_rate_req_per_s
        if rate is None:
            return "—"
        lo, hi = self.bracket
        if lo is None or rate <= 0:
            return "0 (none met)"
        return f"≥ {rate:.3g}" if hi is None else f"{rate:.3g}"

    @property
    def bracket_text(self) -> str:
        """'[2.83, 4]' with '—' on a side not found."""
        lo, hi = self.bracket
        return "[" + ", ".join("—" if v is None else f"{v:.3g}" for v in (lo, hi)) + "]"

    @property
    def slo_text(self) -> str:
        """'TTFT ≤ 500 ms · TPOT ≤ 50 ms', or 'none' when no SLO is given."""
        words = [
            f"{label} ≤ {_seconds_text(value)}"
            for name, label in SLO_FIELDS
            if (value := self.slos.get(name)) is not None
        ]
        return " · ".join(words) or "none"

    @property
    def share_text(self) -> str:
        """'90 %' or '—'."""
        return "—" if self.share is None else f"{self.share:.0%}".replace("%", " %")


def _seconds_text(value: float) -> str:
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"


def _probe(raw: Any, share: float | None) -> CapacityProbe | None:
    if not isinstance(raw, Mapping):
        return None
    rate = number(raw.get("rate_req_per_s"))
    if rate is None or rate <= 0:
        return None  # no place on a log axis, and no rate to speak of
    met_share = number(raw.get("slo_met_share"))
    requests = number(raw.get("requests"))
    return CapacityProbe(
        rate_req_per_s=rate,
        slo_met_share=met_share,
        requests=None if requests is None else int(requests),
        figures={name: number(raw.get(name)) for name in PROBE_FIGURES},
        met=None if met_share is None or share is None else met_share >= share - _SLACK,
    )


def capacity_rows(benchmarks: Iterable[BenchmarkResult]) -> list[CapacityRow]:
    """One row per capacity cell, in the records' order (module docstring)."""
    rows = []
    for bench in benchmarks:
        if not is_capacity(bench):
            continue
        extra = bench.extra
        share = number(extra.get("sla_share"))
        raw_bracket = extra.get("sla_bracket")
        pair = list(raw_bracket) if isinstance(raw_bracket, list | tuple) else []
        pair = [*pair, None, None][:2]
        probes = (_probe(raw, share) for raw in extra["sla_probes"])
        rows.append(
            CapacityRow(
                title=params_title(bench.params, ("request_rate",)),
                cell_id=bench.cell_id,
                sla_rate_req_per_s=number(extra.get("sla_rate_req_per_s")),
                bracket=(number(pair[0]), number(pair[1])),
                share=share,
                slos={name: number(extra.get(name)) for name, _ in SLO_FIELDS},
                probes=tuple(p for p in probes if p is not None),
                stopped=stopped if isinstance(stopped := extra.get("sla_stopped"), str) else None,
                non_monotone=extra.get("sla_non_monotone") is True,
                params=dict(bench.params),
            )
        )
    return rows


def _pass_text(index: int, probe: CapacityProbe) -> str:
    share = "—" if probe.slo_met_share is None else f"{probe.slo_met_share:.0%}"
    of = "" if probe.requests is None else f" of {probe.requests}"
    verdict = {True: "met", False: "missed", None: "no verdict"}[probe.met]
    figures = [
        f"{LATENCY[name][0]} {_seconds_text(value)}"
        for name in LATENCY
        if (value := probe.figures.get(name)) is not None
    ]
    return " · ".join(
        [f"probe {index}: {probe.rate_req_per_s:.3g} req/s", f"{share}{of} within the SLOs "
         f"({verdict})", *figures]
    )  # fmt: skip


def latency_svg(row: CapacityRow, metric: str, width: int = 440, height: int = 270) -> str:
    """`metric` (a LATENCY key) of each pass against the offered rate (module docstring)."""
    if metric not in LATENCY:
        raise ValueError(f"metric {metric!r} is not drawn; use one of {', '.join(LATENCY)}")
    name, slo_field = LATENCY[metric]
    slo_s = row.slos.get(slo_field)
    drawn = [
        (i, p, v) for i, p in enumerate(row.probes, 1) if (v := p.figures.get(metric)) is not None
    ]
    label = f"{name} of each capacity probe against offered rate, {row.title}"
    if not drawn:
        return (
            svg_open(width, 40, label)
            + f'<text x="4" y="24" font-size="12">no {escape(name)} figure in the passes</text>'
            + "</svg>"
        )
    highest_s = max([v for _, _, v in drawn] + ([slo_s] if slo_s is not None else []))
    scale, unit = (1e3, "ms") if highest_s < 10 else (1.0, "s")
    y_end, y_ticks = linear_ticks(highest_s * scale * 1.08 or 1.0)
    rates = [p.rate_req_per_s for p in row.probes] + [v for v in row.bracket if v is not None]
    x_lo, x_hi = min(rates) / 1.35, max(rates) * 1.35
    axes = Axes(width, height, 52, 14, 30, 46, (x_lo, x_hi), (0.0, y_end), x_log=True)
    x_ticks = spaced(log_ticks(x_lo, x_hi), axes.x, 30)
    parts = [svg_open(width, height, label)]
    lo, hi = row.bracket
    if lo is not None and hi is not None:
        parts.append(
            f'<rect data-role="bracket" x="{axes.x(lo):.1f}" y="{axes.top}" '
            f'width="{axes.x(hi) - axes.x(lo):.1f}" height="{height - axes.top - axes.bottom}" '
            'fill="#fde68a" fill-opacity="0.35"/>'
        )
    parts += frame(axes, x_ticks, y_ticks)
    parts += axis_labels(axes, "offered rate (req/s, log scale)", f"{name} ({unit})")
    parts.append(
        f'<text x="{axes.left}" y="14" font-size="12" font-weight="600">{escape(name)}</text>'
    )
    legend_x = width - axes.right - 120
    parts.append(marker("circle", legend_x, 10, MET_COLOR))
    parts.append(f'<text x="{legend_x + 8}" y="14" font-size="11">met</text>')
    parts.append(marker("cross", legend_x + 50, 10, MISSED_COLOR))
    parts.append(f'<text x="{legend_x + 58}" y="14" font-size="11">missed</text>')
    plot_top, plot_bottom = axes.top, height - axes.bottom
    capacity = row.sla_rate_req_per_s
    if capacity is not None and capacity > 0 and row.bracket[0] is not None:
        x = axes.x(capacity)
        right_half = x > (axes.left + width - axes.right) / 2
        parts.append(
            f'<line data-role="capacity" x1="{x:.1f}" x2="{x:.1f}" y1="{plot_top}" '
            f'y2="{plot_bottom}" stroke="#111827" stroke-width="1.5"/>'
        )
        parts.append(
            f'<text x="{x + (-4 if right_half else 4):.1f}" y="{plot_top + 12}" font-size="10" '
            f'text-anchor="{"end" if right_half else "start"}">capacity {capacity:.3g} req/s</text>'
        )
    if slo_s is not None:
        y = axes.y(slo_s * scale)
        # Under the line when above it would run into the capacity label at the top.
        text_y = y + 12 if y - 4 < plot_top + 18 else y - 4
        parts.append(
            f'<line data-role="slo" x1="{axes.left}" x2="{width - axes.right}" y1="{y:.1f}" '
            f'y2="{y:.1f}" stroke="#b91c1c" stroke-width="1.5" stroke-dasharray="6 4"/>'
        )
        parts.append(
            f'<text x="{width - axes.right - 4}" y="{text_y:.1f}" font-size="10" fill="#b91c1c" '
            f'text-anchor="end">SLO {escape(_seconds_text(slo_s))}</text>'
        )
    for index, probe, value in drawn:
        kind = {True: "met", False: "missed", None: "unknown"}[probe.met]
        shape = "cross" if probe.met is False else "circle"
        color = {"met": MET_COLOR, "missed": MISSED_COLOR, "unknown": UNKNOWN_COLOR}[kind]
        parts.append(
            f'<g class="probe {kind}" data-rate="{probe.rate_req_per_s:g}" '
            f'data-value="{value * scale:g}"><title>{escape(_pass_text(index, probe))}</title>'
            + marker(shape, axes.x(probe.rate_req_per_s), axes.y(value * scale), color,
                      filled=probe.met is not None)
            + "</g>"
        )  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)


_EXPLAIN = (
    "The highest Poisson request rate at which at least the share of a load pass's requests meet "
    "every SLO (vLLM's <code>sweep serve_sla</code>): the rate doubled or halved until one pass "
    "meets and one misses, then bisected geometrically; a close call is run twice and pooled. "
    "Bracket: [highest rate that met, lowest that missed], req/s. Under it, every serving pass "
    "of the run as total output throughput against each user's, per server setting."
)


def _table(rows: Sequence[CapacityRow]) -> str:
    head = (
        '<tr><th>cell</th><th>SLOs</th><th class="num">share</th>'
        '<th class="num">capacity (req/s)</th><th class="num">bracket (req/s)</th>'
        '<th class="num">probes</th></tr>'
    )
    body = []
    for row in rows:
        none_met = row.sla_rate_req_per_s is not None and row.bracket[0] is None
        stopped = (
            f' <span class="meta">({escape(row.stopped)})</span>'
            if row.stopped and row.stopped != "bracketed"
            else ""
        )
        split = ' <span class="meta">(passes split)</span>' if row.non_monotone else ""
        body.append(
            f'<tr data-capacity-cell="{escape(row.cell_id)}"><th title="{escape(row.cell_id)}">'
            f"{_CODE}{escape(row.title)}</code></th>"
            f'<td style="white-space:nowrap">{escape(row.slo_text)}</td>'
            f'<td class="num">{escape(row.share_text)}</td>'
            f'<td class="num{" bad" if none_met else ""}">{escape(row.capacity_text)}</td>'
            f'<td class="num">{escape(row.bracket_text)}{stopped}</td>'
            f'<td class="num">{len(row.probes)}{split}</td></tr>'
        )
    rows_html = "".join(body)
    return (
        f'<table class="capacity compact"><thead>{head}</thead><tbody>{rows_html}</tbody></table>'
    )


def capacity_section_html(
    benchmarks: Iterable[BenchmarkResult], section_id: str = "capacity"
) -> str:
    """The report's capacity section (module docstring); "" without a serving record."""
    every = [b for b in benchmarks if is_serve(b)]
    if not every:
        return ""
    rows = capacity_rows(every)
    parts = [
        f'<section id="{escape(section_id)}" class="capacity">',
        "<h3>Capacity within the SLOs (current run)</h3>",
        f'<p class="meta">{_EXPLAIN}</p>',
    ]
    if rows:
        parts.append(_table(rows))
    else:
        parts.append(
            '<p class="meta">No capacity cell in this run: a serving cell searches for its '
            "capacity with <code>request_rate: sla</code>.</p>"
        )
    flex = 'style="display:flex;flex-wrap:wrap;gap:12px;margin:0 0 12px"'
    for row in rows:
        scheduled = any(p.figures.get("ttft_from_schedule_p90_s") is not None for p in row.probes)
        ttft, e2el = (
            ("ttft_from_schedule_p90_s", "e2el_from_schedule_p90_s")
            if scheduled
            else ("ttft_p90_s", "e2el_p50_s")
        )
        metrics = [ttft, "tpot_p50_s"] + ([e2el] if row.slos.get("slo_e2el_s") else [])
        charts = "".join(latency_svg(row, metric) for metric in metrics)
        parts.append(
            f'<figure class="capacity" style="margin:8px 0"><figcaption>{_CODE}{escape(row.title)}'
            f"</code> · capacity {escape(row.capacity_text)} req/s · SLOs "
            f"{escape(row.slo_text)}</figcaption><div {flex}>{charts}</div></figure>"
        )
    points = pareto_points(every)
    if points:
        parts.append("<h3>Total throughput against each user's (every serving pass)</h3>")
        by_workload: dict[str, list[ParetoPoint]] = {}
        for point in points:
            by_workload.setdefault(point.workload, []).append(point)
        figures = "".join(
            f'<figure style="margin:0"><figcaption>{_CODE}{escape(workload)}</code></figcaption>'
            f"{pareto_svg(members)}</figure>"
            for workload, members in by_workload.items()
        )
        parts.append(f"<div {flex}>{figures}</div>")
    parts.append("</section>")
    return "".join(parts)
