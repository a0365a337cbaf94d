"""The serving view: latency against request rate, where goodput falls off, what queueing costs.

`serve_tables(benchmarks)` groups a run's serving records (`extra_info.measurement` "serve")
by every param but `request_rate`; one `ServeTable` per group, one `ServeRow` per rate (inf
last), each with its TTFT, TPOT, ITL and E2EL percentiles, TTFT from the scheduled arrival,
throughput, goodput (and its share of the offered rate), errors, and **TTFT under load / prefill
alone**: the row's TTFT p50 over the same model's single-request prefill (`prefill_s` of the
plain cell with the same model, device, dtype, P and N in the run; None without one, never an
assumed 1x) -- what queueing and serving cost. The group's single-request figures (prefill
alone, the owned loop's TTFT and TPOT from its generate record) are the table's `single`.

`falloff` names the first rate at which the share of requests meeting every SLO
(`slo_met_share`: meeting / sent, failed requests count as missing) drops under `HOLD` (90 %);
records from before that field read goodput over the offered rate (finite) or the throughput
(`inf`). Capacity cells (`request_rate: sla`) are drawn by `capacity`, not here. Each row links
its cell's per-request export (`serve_requests_file`) where the run wrote one. `svg` draws
TTFT and TPOT percentiles against the rates (inline SVG: the report stays one offline file).

The current run's figures, not verdicts (the gate judges `round_series`). Imports neither torch
nor benchmarks.* (DESIGN §1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from reports.history.runfile import BenchmarkResult
from reports.render.quant import group_title

HOLD = 0.9
_PLAIN = ("model", "device", "dtype", "prompt_len", "new_tokens")
#: (field, header) of each column, in order; seconds are shown in ms.
COLUMNS = (
    ("ttft_p50_s", "TTFT p50"), ("ttft_p90_s", "TTFT p90"), ("ttft_p99_s", "TTFT p99"),
    ("tpot_p50_s", "TPOT p50"), ("tpot_p90_s", "TPOT p90"), ("itl_p50_s", "ITL p50"),
    ("itl_p99_s", "ITL p99"), ("itl_chunk_p99_s", "chunk gap p99"), ("stall_max_s", "longest gap"),
    ("e2el_p50_s", "E2EL p50"),
    ("ttft_from_schedule_p50_s", "TTFT p50 from schedule"),
    ("request_throughput_req_per_s", "req/s"), ("output_throughput_tok_per_s", "tok/s"),
    ("goodput_req_per_s", "goodput req/s"),
)  # fmt: skip


@dataclass(frozen=True)
class ServeRow:
    """One request rate of a group."""

    rate: float  # requests per second; inf
    cell_id: str
    values: Mapping[str, float | None]
    errors: int
    requests: int
    queueing_ratio: float | None  # TTFT p50 / prefill alone
    slo_met_share: float | None = None  # requests meeting every SLO / sent
    requests_file: str | None = None  # the per-request export

    @property
    def rate_text(self) -> str:
        """'inf' or '%g'."""
        return "inf" if math.isinf(self.rate) else f"{self.rate:g}"

    @property
    def goodput_share(self) -> float | None:
        """The share of requests meeting the SLOs; for older records, goodput over the offered
        rate (finite), else over the throughput."""
        if self.slo_met_share is not None:
            return self.slo_met_share
        goodput = self.values.get("goodput_req_per_s")
        offered = (
            self.rate
            if math.isfinite(self.rate)
            else self.values.get("request_throughput_req_per_s")
        )
        if goodput is None or not offered:
            return None
        return goodput / offered


@dataclass(frozen=True)
class ServeTable:
    """The rates of one group of serving cells."""

    title: str
    rows: tuple[ServeRow, ...]
    single: Mapping[str, float | None]  # prefill_s, ttft_s, tpot_s of the plain cell

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """(field, header) of the figure columns."""
        return COLUMNS

    @property
    def falloff(self) -> str:
        """Where goodput falls under HOLD of what was asked (module docstring), in words."""
        held = None
        for row in self.rows:
            share = row.goodput_share
            if share is None:
                continue
            if share < HOLD:
                good = row.values.get("goodput_req_per_s") or 0.0
                up_to = f"holds up to {held.rate_text} req/s; " if held else ""
                if row.slo_met_share is not None:
                    return (
                        f"goodput {up_to}falls off at rate {row.rate_text}: {share:.0%} of "
                        f"requests met the SLOs ({good:.2f} req/s)"
                    )
                return (
                    f"goodput {up_to}falls off at rate {row.rate_text}: {good:.2f} req/s "
                    f"({share:.0%} of {'offered' if math.isfinite(row.rate) else 'completed'})"
                )
            held = row
        return "goodput holds at every rate measured" if held else "no goodput figure"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _is_capacity(bench: BenchmarkResult) -> bool:
    """A capacity cell (`request_rate: sla`): its view is `capacity`'s."""
    return bench.params.get("request_rate") == "sla" or "sla_probes" in bench.extra


def _rate(value: Any) -> float:
    return math.inf if value in ("inf", None) else float(value)


def _single(benchmarks: Sequence[BenchmarkResult], key: Mapping[str, Any]) -> dict[str, Any]:
    """The plain cell's single-request figures (no serving or run-mode params)."""
    out: dict[str, float | None] = {"prefill_s": None, "ttft_s": None, "tpot_s": None}
    for bench in benchmarks:
        params = dict(bench.params)
        if params.get("batch") != 1 or set(params) - {*_PLAIN, "batch"}:
            continue
        if any(params.get(k) != key.get(k) for k in _PLAIN):
            continue
        kind = bench.extra.get("measurement")
        if kind == "prefill":
            out["prefill_s"] = _number(bench.extra.get("prefill_s")) or bench.median_s
        elif kind == "generate":
            out["ttft_s"] = _number(bench.extra.get("ttft_s"))
            out["tpot_s"] = _number(bench.extra.get("tpot_s"))
    return out


def serve_tables(benchmarks: Iterable[BenchmarkResult]) -> list[ServeTable]:
    """One table per group of serving cells (module docstring)."""
    every = list(benchmarks)
    groups: dict[tuple[tuple[str, str], ...], list[BenchmarkResult]] = {}
    for bench in every:
        if bench.extra.get("measurement") != "serve" or _is_capacity(bench):
            continue
        key = tuple(sorted((k, str(v)) for k, v in bench.params.items() if k != "request_rate"))
        groups.setdefault(key, []).append(bench)
    tables = []
    for key, members in groups.items():
        params = dict(members[0].params)
        single = _single(every, params)
        prefill = single["prefill_s"]
        rows = []
        for bench in sorted(members, key=lambda b: _rate(b.params.get("request_rate"))):
            values = {name: _number(bench.extra.get(name)) for name, _ in COLUMNS}
            ttft = values["ttft_p50_s"]
            rows.append(
                ServeRow(
                    rate=_rate(bench.params.get("request_rate")),
                    cell_id=bench.cell_id,
                    values=values,
                    errors=int(bench.extra.get("errors") or 0),
                    requests=int(bench.extra.get("requests") or 0),
                    queueing_ratio=ttft / prefill if ttft is not None and prefill else None,
                    slo_met_share=_number(bench.extra.get("slo_met_share")),
                    requests_file=_text(bench.extra.get("serve_requests_file")),
                )
            )
        title = group_title(tuple((k, v) for k, v in key))
        tables.append(ServeTable(title, tuple(rows), single))
    return tables


def file_url(path: str) -> str:
    """A local file's `file://` URL (the per-request export: on the machine that ran the cell)."""
    return Path(path).resolve().as_uri() if Path(path).is_absolute() else path


def value_text(value: float | None, field: str) -> str:
    """A cell of the table: ms for seconds, two decimals for rates, '—' for none."""
    if value is None:
        return "—"
    seconds = field.endswith("_s") and "_per_" not in field
    return f"{value * 1e3:.1f} ms" if seconds else f"{value:.2f}"


_SERIES = {
    "TTFT": (("ttft_p50_s", "p50", "#1f77b4"), ("ttft_p90_s", "p90", "#ff7f0e"),
             ("ttft_p99_s", "p99", "#d62728")),
    "TPOT / ITL": (("tpot_p50_s", "TPOT p50", "#2ca02c"), ("itl_p99_s", "ITL p99", "#9467bd")),
}  # fmt: skip


def svg(table: ServeTable, which: str, width: int = 320, height: int = 160) -> str:
    """A small inline SVG of `which` ("TTFT" or "TPOT / ITL") in ms against the rates."""
    series = _SERIES[which]
    points = [
        (i, [row.values.get(field) for field, _, _ in series]) for i, row in enumerate(table.rows)
    ]
    top = max((v for _, vs in points for v in vs if v is not None), default=0.0) * 1e3 or 1.0
    pad, n = 30, max(len(table.rows) - 1, 1)

    def xy(i: int, v: float) -> str:
        x = pad + (width - 2 * pad) * i / n
        y = height - pad - (height - 2 * pad) * (v * 1e3) / top
        return f"{x:.1f},{y:.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(which)} against request rate">',
        f'<text x="{pad}" y="14" font-size="11">{escape(which)} (ms, max {top:.1f})</text>',
    ]
    for k, (_, label, color) in enumerate(series):
        line = " ".join(xy(i, v) for i, vs in points if (v := vs[k]) is not None)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{line}"/>')
        parts.append(
            f'<text x="{width - pad - 60}" y="{14 + 12 * (k + 1)}" font-size="10" '
            f'fill="{color}">{escape(label)}</text>'
        )
    for i, row in enumerate(table.rows):
        x = pad + (width - 2 * pad) * i / n
        parts.append(
            f'<text x="{x:.1f}" y="{height - 10}" font-size="10" text-anchor="middle">'
            f"{escape(row.rate_text)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
