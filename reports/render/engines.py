"""The engine view: torch and MLX side by side, for a Mac user choosing between them (DESIGN §14).

`engine_tables(benchmarks)` groups a run's cells by everything but `engine` (model, device,
dtype, batch, P, N and any other param; a cell whose params have no `engine` ran on torch),
keeping the groups that hold both engines. One `EngineTable` per group, one `EngineRow` per
figure, each engine's value read from the measurement that owns it:

- `ttft_s`, `tpot_s` (generate: client-observed), `prefill_s`, `prefill_tok_per_s` (prefill),
  `decode_step_s`, `decode_tok_per_s` (decode): time and speed, lower or higher is better;
- `kv_final_bytes`: the generate record's `kv_measured_final_bytes` (P + N - 1 positions: what
  the cache's arrays occupy, an MLX cache's step-256 allocation included) and `kv_used_bytes`
  (the used positions' bytes: `kv_used_measured_bytes` on MLX, a static cache's used bytes, else
  the measured bytes);
- `peak_memory_bytes`: each engine's allocator peak of the generate record (MLX's
  `mx.get_peak_memory`, an MPS sampled maximum, CUDA's peak; none for torch on CPU), named, with
  no ratio between two different counters; `peak_rss_bytes`: the process RSS on both sides;
- `decode_bytes_per_s` and `decode_pct_of_peak_bandwidth` (decode): achieved bandwidth against
  the same measured peak on both sides.

Each row carries the ratio MLX / torch and which engine is better by how much (`better_text`:
"MLX 1.52x", lower time and bytes or higher speed). A missing figure on either side gives `—`,
never a made-up ratio. `verdict_text(table)` names the faster engine per phase. `markdown`
renders them for `python -m reports engines` (`print_paths`) and summary.md; the report's
template the HTML. Deliberately not here: judging (the current run's figures, no verdicts).
Imports neither torch nor benchmarks.* (DESIGN §1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from reports.history.runfile import BenchmarkResult, Scalar
from reports.render.quant import Group, group_title
from reports.render.tables import PEAK_MEMORY_FIELDS
from reports.render.viewtext import NO_RATIO, TIMES, newest_runs, value_text

VERB, HELP = "engines", "torch vs MLX side by side per model x dtype x P x N"
ENGINES = ("torch", "mlx")
LABELS = {"torch": "torch", "mlx": "MLX"}
_GROUP_ORDER = ("model", "device", "dtype", "batch", "prompt_len", "new_tokens")
LOWER, HIGHER = "lower", "higher"
# Each engine's own allocator peak (CUDA/MLX: a true peak; MPS: a sampled maximum).
_ALLOCATOR_PEAKS = tuple(f for f in PEAK_MEMORY_FIELDS if f != "peak_rss_bytes")
#: (figure, header, measurement that owns it, its extra_info field(s), which way is better);
#: the first field a record has is the figure (peak memory: only a like-for-like pair compares)
FIGURES: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = (
    ("ttft_s", "TTFT", "generate", ("ttft_s",), LOWER),
    ("tpot_s", "TPOT", "generate", ("tpot_s",), LOWER),
    ("prefill_s", "prefill", "prefill", ("prefill_s",), LOWER),
    ("prefill_tok_per_s", "prefill tok/s", "prefill", ("prefill_tok_per_s",), HIGHER),
    ("decode_step_s", "decode step", "decode", ("decode_step_s",), LOWER),
    ("decode_tok_per_s", "decode tok/s", "decode", ("decode_tok_per_s",), HIGHER),
    ("kv_final_bytes", "KV bytes (final, allocated)", "generate", ("kv_measured_final_bytes",),
     LOWER),
    ("kv_used_bytes", "KV bytes (final, used)", "generate",
     ("kv_used_measured_bytes", "kv_static_measured_used_bytes", "kv_measured_final_bytes"),
     LOWER),
    ("peak_memory_bytes", "peak memory (allocator)", "generate", _ALLOCATOR_PEAKS, LOWER),
    ("peak_rss_bytes", "peak RSS (process)", "generate", ("peak_rss_bytes",), LOWER),
    ("decode_bytes_per_s", "decode bandwidth", "decode", ("decode_bytes_per_s",), HIGHER),
    ("decode_pct_of_peak_bandwidth", "decode % of peak bandwidth", "decode",
     ("decode_pct_of_peak_bandwidth",), HIGHER),
)  # fmt: skip
_SPEED = {"prefill": "ttft_s", "decode": "decode_tok_per_s"}  # the figure that says "faster"


@dataclass(frozen=True)
class EngineRow:
    """One figure of a group on both engines: values (None: not recorded), the field each was
    read from, the ratio MLX / torch and the better engine with its factor."""

    name: str
    header: str
    values: Mapping[str, float | None]
    fields: Mapping[str, str | None]
    ratio: float | None
    better: tuple[str, float] | None  # (engine, factor >= 1); None: no comparison


@dataclass(frozen=True)
class EngineTable:
    """The two engines' figures for one group (everything but the engine)."""

    group: Group
    cells: Mapping[str, str]  # engine -> cell id
    rows: tuple[EngineRow, ...]

    @property
    def title(self) -> str:
        """`quant.group_title` of its group."""
        return group_title(self.group)

    def row(self, name: str) -> EngineRow | None:
        """The row of figure `name`."""
        return next((r for r in self.rows if r.name == name), None)


def engine_of(params: Mapping[str, Scalar]) -> str:
    """A cell's engine: its `engine` param, `torch` where the matrix did not name the axis."""
    value = params.get("engine")
    return "torch" if value in (None, "") else str(value)


def _split(params: Mapping[str, Scalar]) -> tuple[Group, str]:
    rest = {k: v for k, v in params.items() if k != "engine"}
    known = [(k, rest.pop(k)) for k in _GROUP_ORDER if k in rest]
    return (*known, *sorted(rest.items(), key=lambda kv: kv[0])), engine_of(params)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _figure(
    benches: Sequence[BenchmarkResult], measurement: str, keys: tuple[str, ...]
) -> tuple[float | None, str | None]:
    owner = [b for b in benches if b.extra.get("measurement", b.group) == measurement]
    for key in keys:
        for bench in owner:
            value = _number(bench.extra.get(key))
            if value is not None:
                return value, key
    return None, None


def _compare(row: EngineRow, direction: str) -> EngineRow:
    torch_value, mlx_value = row.values.get("torch"), row.values.get("mlx")
    kinds_differ = row.name == "peak_memory_bytes" and row.fields["torch"] != row.fields["mlx"]
    if torch_value is None or mlx_value is None or kinds_differ:
        return row  # a missing side, or two different counters (an RSS is no allocator peak)
    if torch_value <= 0 or mlx_value <= 0:
        return row
    ratio = mlx_value / torch_value
    if direction == HIGHER:
        better = ("mlx", ratio) if ratio >= 1 else ("torch", 1 / ratio)
    else:
        better = ("mlx", 1 / ratio) if ratio <= 1 else ("torch", ratio)
    return EngineRow(row.name, row.header, row.values, row.fields, ratio, better)


def _table(group: Group, cells: Mapping[str, Sequence[BenchmarkResult]]) -> EngineTable:
    rows = []
    for name, header, measurement, keys, direction in FIGURES:
        found = {engine: _figure(cells[engine], measurement, keys) for engine in ENGINES}
        row = EngineRow(
            name,
            header,
            {engine: found[engine][0] for engine in ENGINES},
            {engine: found[engine][1] for engine in ENGINES},
            None,
            None,
        )
        rows.append(_compare(row, direction))
    ids = {engine: cells[engine][0].cell_id for engine in ENGINES}
    return EngineTable(group, ids, tuple(rows))


def engine_tables(benchmarks: Iterable[BenchmarkResult]) -> list[EngineTable]:
    """The groups of a run that hold a torch and an MLX cell, one table each, by title."""
    grouped: dict[Group, dict[str, list[BenchmarkResult]]] = {}
    for bench in benchmarks:
        group, engine = _split(bench.params)
        grouped.setdefault(group, {}).setdefault(engine, []).append(bench)
    tables = [_table(g, cells) for g, cells in grouped.items() if all(e in cells for e in ENGINES)]
    return sorted(tables, key=lambda t: [(k, 0, v) if _number(v) is not None else (k, 1, str(v))
                                         for k, v in t.group])  # fmt: skip


def has_mlx_cells(benchmarks: Iterable[BenchmarkResult]) -> bool:
    """Whether any benchmark ran on MLX."""
    return any(engine_of(b.params) == "mlx" for b in benchmarks)


def figure_text(row: EngineRow, engine: str) -> str:
    """One engine's value in its unit ('12.3 ms', '1.20k tok/s', '3.50 MiB', '41.0 %'), 'n/a'."""
    value = row.values.get(engine)
    if value is None:
        return "n/a"
    if row.name.endswith("_bytes_per_s"):
        return f"{value / 1e9:.3g} GB/s"
    if row.name.endswith("_tok_per_s"):
        return value_text(value, row.name)
    if row.name.endswith("_s"):
        return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"
    if row.name.startswith("decode_pct"):
        return f"{value:.3g} %"
    return value_text(value, row.name)


def ratio_text(row: EngineRow) -> str:
    """MLX / torch as '0.66x'; '—' without both figures of one kind."""
    return NO_RATIO if row.ratio is None else f"{row.ratio:.2f}{TIMES}"


def better_text(row: EngineRow) -> str:
    """'MLX 1.52x' (the better engine and by how much), 'same' within 1 %, '—' for none."""
    if row.better is None:
        return NO_RATIO
    engine, factor = row.better
    return "same" if factor < 1.01 else f"{LABELS[engine]} {factor:.2f}{TIMES}"


def verdict_text(table: EngineTable) -> str:
    """'faster: prefill (TTFT) MLX 1.50x, decode torch 1.20x' from the group's figures."""
    parts = []
    for phase, name in _SPEED.items():
        row = table.row(name)
        if row is not None and row.better is not None:
            parts.append(f"{phase} {better_text(row)}")
    return "faster: " + ", ".join(parts) if parts else "faster: n/a (a figure is missing)"


def field_note(row: EngineRow) -> str:
    """The peak counters read, where they differ ('peak_rss_bytes vs peak_allocated_bytes:
    different counters, no ratio'); '' otherwise."""
    torch_field, mlx_field = row.fields.get("torch"), row.fields.get("mlx")
    if row.name != "peak_memory_bytes" or torch_field == mlx_field:
        return ""
    if torch_field is None or mlx_field is None:
        return ""
    return f"{torch_field} vs {mlx_field}: different counters, no ratio"


def markdown(tables: Sequence[EngineTable], heading: str = "####") -> str:
    """Markdown: per group a heading with the verdict line and a table of the figures."""
    parts: list[str] = []
    for table in tables:
        parts.append(f"{heading} {table.title}: {verdict_text(table)}\n")
        parts.append("| figure | torch | MLX | MLX ÷ torch | better |")
        parts.append("| --- | ---: | ---: | ---: | --- |")
        for row in table.rows:
            note = field_note(row)
            header = f"{row.header} ({note})" if note else row.header
            cells = [figure_text(row, "torch"), figure_text(row, "mlx")]
            parts.append(f"| {header} | " + " | ".join([*cells, ratio_text(row)]) + f" | "
                         f"{better_text(row)} |")  # fmt: skip
        parts.append("")
    return "\n".join(parts)


def print_paths(paths: Sequence[str]) -> int:
    """`python -m reports engines FILE_OR_DIR...`: each machine's newest run's tables
    (`quant.newest_runs` for the errors)."""
    for machine, run in newest_runs(paths):
        print(f"### {run.machine_label} {machine}: {run.short_commit} on {run.branch}, "
              f"{run.datetime}\n")  # fmt: skip
        tables = engine_tables(run.benchmarks.values())
        print(markdown(tables) if tables else "no cell ran on both engines (the `engine` axis)\n")
    return 0


# The view's jinja2 filters, registered by `reports.render.html.environment`.
FILTERS = {
    "engine_value": figure_text,
    "engine_ratio": ratio_text,
    "engine_better": better_text,
    "engine_verdict": verdict_text,
    "engine_note": field_note,
}
