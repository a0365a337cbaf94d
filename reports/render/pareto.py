"""The Pareto view of serving: total output throughput against each user's, per setting.

`pareto_points(benchmarks)` takes every serving pass of a run (records with
`extra_info.measurement` "serve"): each fixed-rate or `inf` cell (`output_throughput_tok_per_s`,
`tpot_p50_s`) and each probe of a capacity cell (`sla_probes`, `reports.render.capacity`), as a
`ParetoPoint`: x = total output throughput (tok/s), y = throughput per user (1 / TPOT p50, tok/s
per user). A pass without either figure, or with a TPOT p50 <= 0, is left out. Points fall into
series by server and batching setting (params `serve`, `continuous_batching`) within a workload
(model, device, dtype, batch, P, N: another workload's tokens are not the same tokens). A point
is on its series' **frontier** when no other point of the series has at least as much of both
and more of one (`frontier`): what the setting can trade, per-user speed for total throughput.

`pareto_svg(points)` draws one workload's points: a colour and a marker shape per series, the
frontier as a line through the filled points, the points under it hollow, the legend under the
plot (it never covers a point), each point's figures on hover. Imports neither torch nor
benchmarks.* (DESIGN §1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from reports.history.runfile import BenchmarkResult
from reports.render.quant import group_title
from reports.render.svgplot import Axes, axis_labels, frame, linear_ticks, marker, spaced, svg_open

# A workload's tokens are comparable only within the same model, device, dtype, batch, P and N.
WORKLOAD = ("model", "device", "dtype", "batch", "prompt_len", "new_tokens")
# Okabe-Ito: told apart by colour-blind readers; a marker shape per series besides.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#000000")
MARKERS = ("circle", "square", "triangle", "diamond")


@dataclass(frozen=True)
class ParetoPoint:
    """One serving pass as total output throughput against throughput per user."""

    workload: str  # group_title of the WORKLOAD params
    series: str  # server and batching setting
    output_tok_per_s: float
    per_user_tok_per_s: float  # 1 / TPOT p50
    label: str  # 'rate 4 req/s', 'rate inf', 'capacity probe 2.83 req/s'
    cell_id: str
    frontier: bool


def number(value: Any) -> float | None:
    """A record's finite number as a float; None for anything else (a bool, null, text, inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def is_serve(bench: BenchmarkResult) -> bool:
    """Whether the record is a serving pass (or search)."""
    return bench.extra.get("measurement") == "serve"


def is_capacity(bench: BenchmarkResult) -> bool:
    """Whether the record is a capacity cell: a serving record that carries `sla_probes`."""
    return is_serve(bench) and isinstance(bench.extra.get("sla_probes"), list)


def params_title(params: Mapping[str, Any], leave_out: Iterable[str]) -> str:
    """`group_title` of the params but `leave_out`."""
    skip = set(leave_out)
    return group_title(tuple((k, v) for k, v in params.items() if k not in skip))


def frontier(points: Sequence[tuple[float, float]]) -> set[int]:
    """The indices of the points no other point dominates (at least as much of both coordinates,
    more of one): the Pareto frontier when more is better on both."""
    return {
        i
        for i, (x, y) in enumerate(points)
        if not any(
            (ox >= x and oy >= y) and (ox > x or oy > y)
            for j, (ox, oy) in enumerate(points)
            if j != i
        )
    }


def _series_label(params: Mapping[str, Any]) -> str:
    server = str(params.get("serve", "server"))
    batching = params.get("continuous_batching")
    if batching is None:
        return server
    on = batching is True or str(batching).lower() in ("true", "on", "1")
    return f"{server} · continuous batching {'on' if on else 'off'}"


def _passes(bench: BenchmarkResult) -> list[tuple[Any, Any, str]]:
    """(output tok/s, TPOT p50 s, label) of each pass a serving record holds, as recorded."""
    if not is_capacity(bench):
        rate = bench.params.get("request_rate")
        label = "rate inf (all at once)" if str(rate) == "inf" else f"rate {rate} req/s"
        extra = bench.extra
        return [(extra.get("output_throughput_tok_per_s"), extra.get("tpot_p50_s"), label)]
    out = []
    for probe in bench.extra["sla_probes"]:
        if isinstance(probe, Mapping):
            rate_req_per_s = number(probe.get("rate_req_per_s"))
            at = "" if rate_req_per_s is None else f" {rate_req_per_s:.3g} req/s"
            tok, tpot = probe.get("output_throughput_tok_per_s"), probe.get("tpot_p50_s")
            out.append((tok, tpot, f"capacity probe{at}"))
    return out


def pareto_points(benchmarks: Iterable[BenchmarkResult]) -> list[ParetoPoint]:
    """Every serving pass with an output throughput and a TPOT p50 > 0 (module docstring), its
    `frontier` judged within its (workload, series)."""
    raw: list[tuple[str, str, float, float, str, str]] = []
    for bench in benchmarks:
        if not is_serve(bench):
            continue
        workload = params_title({k: bench.params[k] for k in WORKLOAD if k in bench.params}, ())
        series = _series_label(bench.params)
        for tok, tpot, label in _passes(bench):
            tok_per_s, tpot_s = number(tok), number(tpot)
            if tok_per_s is None or tpot_s is None or tpot_s <= 0:
                continue
            raw.append((workload, series, tok_per_s, 1.0 / tpot_s, label, bench.cell_id))
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (workload, series, *_rest) in enumerate(raw):
        groups.setdefault((workload, series), []).append(i)
    on_frontier: set[int] = set()
    for members in groups.values():
        found = frontier([(raw[i][2], raw[i][3]) for i in members])
        on_frontier |= {members[k] for k in found}
    return [ParetoPoint(*fields, frontier=i in on_frontier) for i, fields in enumerate(raw)]


def pareto_svg(points: Sequence[ParetoPoint], width: int = 560, height: int = 330) -> str:
    """The points of one workload: total output throughput against per-user throughput, one
    colour and marker per series, each series' frontier a line (module docstring). The legend
    goes under the plot, one line per series, so it never covers a point."""
    series = list(dict.fromkeys(p.series for p in points))
    workloads = sorted({p.workload for p in points})
    label = (
        f"Total output throughput against throughput per user, {', '.join(workloads)}: "
        f"{len(points)} passes in {len(series)} series"
    )
    if not points:
        return svg_open(width, 40, label) + '<text x="4" y="24" font-size="12">no pass</text></svg>'
    legend_h = 8 + 16 * len(series)
    total_h = height + legend_h
    # `or 1.0`: a run whose passes all gave 0 tok/s still gets an axis.
    x_end, x_ticks = linear_ticks(max(p.output_tok_per_s for p in points) * 1.05 or 1.0)
    y_end, y_ticks = linear_ticks(max(p.per_user_tok_per_s for p in points) * 1.05)
    axes = Axes(width, total_h, 56, 16, 12, 46 + legend_h, (0.0, x_end), (0.0, y_end))
    parts = [svg_open(width, total_h, label)]
    parts += frame(axes, spaced(x_ticks, axes.x, 34), y_ticks)
    parts += axis_labels(axes, "total output throughput (tok/s)", "tok/s per user (1 / TPOT p50)")
    for k, name in enumerate(series):
        color, shape = PALETTE[k % len(PALETTE)], MARKERS[k % len(MARKERS)]
        members = [p for p in points if p.series == name]
        line = sorted(
            (p for p in members if p.frontier),
            key=lambda p: (p.output_tok_per_s, -p.per_user_tok_per_s),
        )
        coords = " ".join(
            f"{axes.x(p.output_tok_per_s):.1f},{axes.y(p.per_user_tok_per_s):.1f}" for p in line
        )
        parts.append(
            f'<polyline data-series="{escape(name)}" fill="none" stroke="{color}" '
            f'stroke-width="1.8" points="{coords}"/>'
        )
        for p in members:
            tip = (
                f"{p.series} · {p.label}: {p.output_tok_per_s:.3g} tok/s total, "
                f"{p.per_user_tok_per_s:.3g} tok/s per user"
                f"{' (on the frontier)' if p.frontier else ''} · {p.cell_id}"
            )
            parts.append(
                f'<g class="point{" frontier" if p.frontier else ""}" '
                f'data-series="{escape(name)}"><title>{escape(tip)}</title>'
                + marker(shape, axes.x(p.output_tok_per_s), axes.y(p.per_user_tok_per_s), color,
                          filled=p.frontier)
                + "</g>"
            )  # fmt: skip
        legend_y = height + 12 + 16 * k
        parts.append(marker(shape, axes.left + 6, legend_y - 4, color))
        parts.append(
            f'<text x="{axes.left + 16}" y="{legend_y}" font-size="11">{escape(name)}</text>'
        )
    parts.append(
        f'<text x="{width - axes.right}" y="{height + 8}" font-size="10" text-anchor="end" '
        'fill="#4b5563">filled: on its frontier (line); hollow: under it</text>'
    )
    parts.append("</svg>")
    return "".join(parts)
