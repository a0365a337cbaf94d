"""Per-cell tables of one run: the llama-bench style "now" table, the matrix change grid, KV,
memory and roofline rows.

Everything is in base units (seconds, bytes, tokens/s, fractions); templates format. The "now"
table joins a cell's benchmarks (prefill, decode, generate) on `extra_info.cell_id`; the grid
places each benchmark's primary-timing verdict at (model, prompt length) in one panel per
measurement and remaining parameters (dtype, batch, ...); run-mode axes (attention, cache,
compile) split the rows (model and mode) rather than the panels.

Deliberately not here: verdicts (`analysis`), trends (`report`), HTML (`render`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reports.analysis.metrics import primary_metric
from reports.analysis.series import Verdict, VerdictName
from reports.history.load import Run
from reports.render.runmode import RUN_MODE_AXES, mode_rank


@dataclass(frozen=True)
class TableRow:
    """A row of one of the per-cell tables: the cell and its named values (None = n/a)."""

    fullname: str
    cell_id: str
    group: str
    values: Mapping[str, float | str | None]


KV_FIELDS = (
    "kv_bytes_per_token",
    "kv_analytic_after_prefill_bytes",
    "kv_measured_after_prefill_bytes",
    "kv_analytic_final_bytes",
    "kv_measured_final_bytes",
    "kv_storage_final_bytes",
    # H3 (issue 12): the fixed conv/recurrent state of hybrid models, beside the KV.
    "kv_state_analytic_bytes",
    "kv_state_measured_bytes",
)
MEMORY_FIELDS = (
    "weights_bytes",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "peak_allocated_sampled_bytes",  # MPS: the maximum of samples, a lower bound of the peak
    "peak_reserved_sampled_bytes",
    "peak_rss_bytes",
)
#: The "peak memory" of a cell wherever the report shows one: the first of these it recorded
#: (the device's allocator, MPS's sampled maximum, else the process's RSS).
PEAK_MEMORY_FIELDS = ("peak_allocated_bytes", "peak_allocated_sampled_bytes", "peak_rss_bytes")
ROOFLINE_FIELDS = (
    "prefill_flop_per_s",
    "prefill_pct_of_peak_flops",
    "decode_bytes_per_s",
    "decode_pct_of_peak_bandwidth",
    "peak_flop_per_s",
    "peak_bandwidth_bytes_per_s",
    "peak_source",
)


def _rows(run: Run, fields: Sequence[str], require_any: bool = True) -> list[TableRow]:
    rows: list[TableRow] = []
    for fullname, bench in run.benchmarks.items():
        values: dict[str, float | str | None] = {}
        for name in fields:
            raw = bench.extra.get(name)
            if isinstance(raw, bool):
                values[name] = str(raw)
            elif isinstance(raw, int | float | str):
                values[name] = raw
            else:
                values[name] = None
        if require_any and all(v is None for v in values.values()):
            continue
        rows.append(TableRow(fullname, bench.cell_id, bench.group, values))
    return rows


def kv_rows(run: Run) -> list[TableRow]:
    """KV bytes per cell, analytic against measured, with a match column."""
    rows = []
    for row in _rows(run, KV_FIELDS):
        values = dict(row.values)
        pairs = [
            (
                values.get("kv_analytic_after_prefill_bytes"),
                values.get("kv_measured_after_prefill_bytes"),
            ),
            (values.get("kv_analytic_final_bytes"), values.get("kv_measured_final_bytes")),
            (values.get("kv_state_analytic_bytes"), values.get("kv_state_measured_bytes")),
        ]
        compared = [(a, m) for a, m in pairs if a is not None and m is not None]
        values["match"] = (
            ("yes" if all(a == m for a, m in compared) else "NO") if compared else None
        )
        rows.append(TableRow(row.fullname, row.cell_id, row.group, values))
    return rows


def memory_rows(run: Run) -> list[TableRow]:
    """Weights and peak memory per cell, with the backend's labels."""
    rows = []
    for row in _rows(run, MEMORY_FIELDS):
        labels = run.benchmarks[row.fullname].extra.get("memory_labels")
        values = dict(row.values)
        if isinstance(labels, dict):
            values["label_allocated"] = str(labels.get("allocated", ""))
            values["label_reserved"] = str(labels.get("reserved", ""))
        rows.append(TableRow(row.fullname, row.cell_id, row.group, values))
    return rows


def roofline_rows(run: Run, verdicts: Sequence[Verdict]) -> list[TableRow]:
    """Achieved rates and % of peak per cell, with the MDE of its timing."""
    mde = {v.fullname: v.mde for v in verdicts if v.kind == "timing"}
    rows = []
    for row in _rows(run, ROOFLINE_FIELDS):
        values = dict(row.values)
        values["mde"] = mde.get(row.fullname)
        rows.append(TableRow(row.fullname, row.cell_id, row.group, values))
    return rows


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True)
class NowRow:
    """One matrix cell of the current run, llama-bench style (None = not measured).

    pct_of_peak: the best of prefill % of peak FLOP/s and decode % of peak bandwidth, in
    percent as recorded, with which one it is in `pct_of_peak_kind`.
    """

    cell_id: str
    params: Mapping[str, str]
    prefill_tok_per_s: float | None
    decode_tok_per_s: float | None
    ttft_s: float | None
    tpot_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    kv_bytes_per_token: float | None
    peak_memory_bytes: float | None
    prefill_pct_of_peak: float | None
    decode_pct_of_peak: float | None
    peak_source: str = "n/a"  # extra_info.peak_source: whose peak the % is of (roofline code)
    # Joules per token per phase from a hardware counter (test_prefill / test_decode records);
    # `energy_source` names the counter(s), `energy_reason` why there is none.
    prefill_j_per_tok: float | None = None
    decode_j_per_tok: float | None = None
    energy_source: str = "n/a"
    energy_reason: str | None = None


def now_axes(rows: Sequence[NowRow]) -> tuple[str, ...]:
    """The run-mode axes some row's cell names, in axis order (columns of the "now" table): a
    matrix that names no run-mode axis records them as None, and a column of "(unset)" for
    every cell says nothing."""
    return tuple(
        k for k in RUN_MODE_AXES if any(r.params.get(k) not in (None, "None", "") for r in rows)
    )


def _first(benches: Sequence[Mapping[str, object]], key: str) -> float | None:
    for extra in benches:
        value = _num(extra.get(key))
        if value is not None:
            return value
    return None


def _texts(extras: Sequence[Mapping[str, object]], key: str) -> str | None:
    """The distinct strings the cell's benchmarks hold at `key`, joined; None when none does."""
    found = sorted({str(e[key]) for e in extras if isinstance(e.get(key), str) and e[key]})
    return " · ".join(found) if found else None


def now_rows(run: Run) -> list[NowRow]:
    """One row per cell id of `run`, from the extra_info of all its benchmarks."""
    by_cell: dict[str, list[Mapping[str, object]]] = {}
    params: dict[str, dict[str, str]] = {}
    for bench in run.benchmarks.values():
        by_cell.setdefault(bench.cell_id, []).append(bench.extra)
        params.setdefault(bench.cell_id, {k: str(v) for k, v in bench.params.items()})
    rows = []
    for cell, extras in sorted(by_cell.items()):
        peaks = [v for key in PEAK_MEMORY_FIELDS if (v := _first(extras, key)) is not None]
        rows.append(
            NowRow(
                cell_id=cell,
                params=params[cell],
                prefill_tok_per_s=_first(extras, "prefill_tok_per_s"),
                decode_tok_per_s=_first(extras, "decode_tok_per_s"),
                ttft_s=_first(extras, "ttft_s"),
                tpot_s=_first(extras, "tpot_s"),
                itl_p50_s=_first(extras, "itl_p50_s"),
                itl_p99_s=_first(extras, "itl_p99_s"),
                kv_bytes_per_token=_first(extras, "kv_bytes_per_token"),
                peak_memory_bytes=peaks[0] if peaks else None,
                prefill_pct_of_peak=_first(extras, "prefill_pct_of_peak_flops"),
                decode_pct_of_peak=_first(extras, "decode_pct_of_peak_bandwidth"),
                peak_source=next(
                    (
                        str(e["peak_source"])
                        for e in extras
                        if isinstance(e.get("peak_source"), str)
                    ),
                    "n/a",
                ),
                prefill_j_per_tok=_first(extras, "prefill_j_per_tok"),
                decode_j_per_tok=_first(extras, "decode_j_per_tok"),
                energy_source=_texts(extras, "energy_source") or "n/a",
                energy_reason=_texts(extras, "energy_reason"),
            )
        )
    return rows


@dataclass(frozen=True)
class GridCell:
    """One square of the matrix grid: a benchmark's primary-timing verdict and change."""

    fullname: str
    metric: str
    verdict: VerdictName
    ratio: float | None

    @property
    def style(self) -> str:
        """Inline CSS background: red for slower, green for faster, stronger with the change."""
        if self.ratio is None or self.ratio <= 0:
            return "background: #e5e7eb"
        change = self.ratio - 1.0
        alpha = min(1.0, abs(change) / 0.25) * 0.85 + 0.1
        rgb = "220, 38, 38" if change > 0 else "22, 163, 74"
        return f"background: rgba({rgb}, {alpha:.2f})"


@dataclass(frozen=True)
class MatrixGrid:
    """One panel: a measurement and fixed parameters; rows are models, columns prompt lengths."""

    measurement: str
    fixed: tuple[tuple[str, str], ...]
    models: tuple[str, ...]
    prompts: tuple[str, ...]
    cells: Mapping[tuple[str, str], GridCell]

    @property
    def title(self) -> str:
        """E.g. "decode · dtype=float32 · batch=1"."""
        return " · ".join([self.measurement, *(f"{k}={v}" for k, v in self.fixed)])


def _sort_key(text: str) -> tuple[int, float | str]:
    try:
        return 0, float(text)
    except ValueError:
        return 1, text


_TIMES = " \u00d7 "  # the escape keeps the source ASCII


def _grid_row(params: Mapping[str, object]) -> str:
    """The model and its run mode when the matrix names one: 'm (sdpa x static x compile none)'."""
    mode = [
        f"compile {params[k]}" if k == "compile" else str(params[k])
        for k in RUN_MODE_AXES
        if k in params
    ]
    model = str(params.get("model"))
    return f"{model} ({_TIMES.join(mode)})" if mode else model


def matrix_grids(run: Run, verdicts: Sequence[Verdict]) -> list[MatrixGrid]:
    """Change % per (model, prompt length), one panel per measurement and other parameters.

    Run-mode axes (attention, cache, compile) split rows, not panels: one row per model and run
    mode, so the modes of a cell sit side by side in one panel.
    """
    by_key = {(v.fullname, v.metric): v for v in verdicts}
    row_order: dict[str, tuple[object, ...]] = {}  # row label -> (model, run-mode rank)
    panels: dict[tuple[str, tuple[tuple[str, str], ...]], dict[tuple[str, str], GridCell]] = {}
    for bench in run.benchmarks.values():
        model, prompt = bench.params.get("model"), bench.params.get("prompt_len")
        if model is None or prompt is None:
            continue
        measurement = str(bench.extra.get("measurement") or bench.group or "benchmark")
        fixed = tuple(
            sorted(
                (k, str(v))
                for k, v in bench.params.items()
                if k not in {"model", "prompt_len", "device", *RUN_MODE_AXES}
            )
        )
        model = _grid_row(bench.params)
        row_order[model] = (str(bench.params.get("model")), mode_rank(bench.params))
        metric = primary_metric(bench)
        v = by_key.get((bench.fullname, metric))
        cell = GridCell(bench.fullname, metric, v.verdict if v else "new", v.ratio if v else None)
        panels.setdefault((measurement, fixed), {})[(str(model), str(prompt))] = cell
    grids = []
    for (measurement, fixed), cells in sorted(panels.items()):
        models = tuple(sorted({m for m, _ in cells}, key=lambda m: row_order[m]))
        prompts = tuple(sorted({p for _, p in cells}, key=_sort_key))
        grids.append(MatrixGrid(measurement, fixed, models, prompts, cells))
    return grids
