"""The quantization view: what quantizing the weights or the KV cache buys a cell, and costs.

`quant_tables(benchmarks)` groups a run's cells by everything but the quantization (model,
device, dtype, batch, P, N and any other param, a run mode say), keeping the groups that hold a
quantized cell (`params` naming `quant` or `kv_quant` other than `none`; an axis the matrix
does not name is `none`). One `QuantTable` per group, one `QuantRow` per (quant, kv_quant) and
explicit `kv_group_size` / `kv_residual`, each cell's figures joined over its benchmarks
(prefill, decode, generate, in that order of preference):

- `prefill_tok_per_s`, `decode_tok_per_s` (extra_info of those names; the interleaved records'
  first, `benchmarks/test_interleaved.py`, whose rounds were timed in turn with the dense
  cell's);
- `decode_bytes_per_s`: the bytes a decode step must move (weights, KV) per second achieved;
- `weights_bytes`: the stored bytes (quantized storage with its scales and zeros);
- `kv_bytes_per_token`: `kv_quant_bytes_per_token` where the cell quantizes its KV (packed
  bytes per cached position, scales amortized), else the dense `kv_bytes_per_token`;
- `peak_memory_bytes`: the first of `tables.PEAK_MEMORY_FIELDS`, as the "now" table's;
- its accuracy against the unquantized model (`reports.analysis.accuracy`).

Each figure comes with its ratio to the same figure of the group's unquantized row (quant
`none`, kv_quant `none`), printed with a times sign: 2.10 is twice as fast, 0.27 a quarter of
the bytes. The tok/s ratios of cells timed in turn with the dense one are the paired speed-up
with its 95 % interval (`reports.analysis.speedup`: "1.54 [1.48, 1.60]"); otherwise the ratio
of two figures timed apart, marked `~`. `—` where that row or either figure is missing, or the
two peaks are different fields (an allocator peak over an RSS is no ratio): never a made-up
ratio. Accuracy has no ratio: it is already measured against the unquantized model; SQNR min
(dB, with its bound), KL (nats) and top-1 agreement (with its bound) are shown, `⚑` where
outside a bound, and the Linears a method left dense are listed under the table.
`markdown(tables)` renders them for `python -m reports quant` (`print_paths`) and summary.md;
the report's template the HTML, from the same texts.

Deliberately not here: judging (the current run's figures, no verdicts), accuracy bounds (the
benchmark side records them). Imports neither torch nor benchmarks.* (DESIGN §1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from reports.analysis.accuracy import (
    NOT_QUANTIZED,
    QUANT_AXES,
    Accuracy,
    accuracy_flags,
    cell_accuracy,
    is_quantized,
    quant_mode,
)
from reports.analysis.speedup import Speedup, paired_speedup
from reports.history.runfile import BenchmarkResult, Scalar
from reports.render.tables import PEAK_MEMORY_FIELDS
from reports.render.viewtext import NO_RATIO, TIMES, newest_runs, ratio_text, value_text

# Re-exported for the views and tests that import them from here.
__all__ = ["NO_RATIO", "newest_runs", "ratio_text", "value_text"]

VERB, HELP = "quant", "speed, bytes and accuracy per quant x kv_quant"  # python -m reports quant
KV_QUANT_SETTINGS = ("kv_group_size", "kv_residual")
_SETTING_PREFIX = {"kv_group_size": "g", "kv_residual": "r"}
_GROUP_ORDER = ("model", "device", "dtype", "batch", "prompt_len", "new_tokens")
_AXIS_ORDER = {
    "quant": ("none", "int8wo", "int8dq", "int4wo-g32", "int4wo-g64", "int4wo-g128", "fp8wo",
              "fp8dq", "nf4", "bnb8", "gemlite4-g64", "gemlite8"),
    "kv_quant": ("none", "fp8", "hqq2", "hqq4", "hqq8", "quanto2", "quanto4"),
}  # fmt: skip
_MEASUREMENT_ORDER = ("interleaved_prefill", "interleaved_decode", "prefill", "decode", "generate")
#: The figures of a row (name, column header), in column order; names carry the unit.
FIGURES = (
    ("prefill_tok_per_s", "prefill tok/s"),
    ("decode_tok_per_s", "decode tok/s"),
    ("decode_bytes_per_s", "GB/s achieved"),
    ("weights_bytes", "weights (stored)"),
    ("kv_bytes_per_token", "KV bytes/token"),
    ("peak_memory_bytes", "peak memory"),
)
#: The speed figures whose ratio comes from interleaved rounds, and the records that hold them.
PAIRED = {"prefill_tok_per_s": "interleaved_prefill", "decode_tok_per_s": "interleaved_decode"}
APPROX = "~"  # before a ratio of two figures timed apart (no interleaved rounds)
FLAG = "\u2691"  # a flag: outside the method's accuracy bound

Group = tuple[tuple[str, Scalar], ...]
Mode = tuple[str, str, tuple[tuple[str, Scalar], ...]]


@dataclass(frozen=True)
class QuantRow:
    """One (quant, kv_quant) cell of a group: figures by `FIGURES` name (None = not recorded),
    their ratios to the group's unquantized row, and the cell's accuracy."""

    quant: str
    kv_quant: str
    kv_settings: tuple[tuple[str, Scalar], ...]
    cell_id: str
    values: Mapping[str, float | None]
    peak_memory_field: str | None = None  # which of PEAK_MEMORY_FIELDS `peak_memory_bytes` is
    ratios: Mapping[str, float | None] = field(default_factory=dict)
    accuracy: Accuracy | None = None
    # The paired speed-ups of `PAIRED` figures (interleaved rounds), with their intervals.
    speedups: Mapping[str, Speedup | None] = field(default_factory=dict)
    # Per `PAIRED` figure: (own rounds, the dense rounds paired with them, the dense cell id).
    pairs: Mapping[str, tuple[tuple[float, ...], tuple[float, ...], str]] = field(
        default_factory=dict
    )

    @property
    def is_baseline(self) -> bool:
        """The unquantized row the others' ratios are to."""
        return (self.quant, self.kv_quant) == (NOT_QUANTIZED, NOT_QUANTIZED)

    @property
    def label(self) -> str:
        """ "int4wo-g32 / hqq4 g32 r64" """
        settings = "".join(f" {_SETTING_PREFIX[k]}{v}" for k, v in self.kv_settings)
        return f"{self.quant} / {self.kv_quant}{settings}"

    @property
    def flagged(self) -> bool:
        """Whether the cell is outside its method's accuracy bound."""
        return self.accuracy is not None and self.accuracy.flagged


def group_title(group: Group) -> str:
    """'tiny-llama cpu float32 b1 p24 n8' (+ ' key=value' for other params): a view's group."""
    params = dict(group)
    words = [str(params.pop(k)) for k in ("model", "device", "dtype") if k in params]
    for key, prefix in (("batch", "b"), ("prompt_len", "p"), ("new_tokens", "n")):
        if key in params:
            words.append(f"{prefix}{params.pop(key)}")
    return " ".join([*words, *(f"{k}={v}" for k, v in params.items())])


@dataclass(frozen=True)
class QuantTable:
    """The quantizations of one group of cells (everything but quant and kv_quant)."""

    group: Group
    rows: tuple[QuantRow, ...]
    columns: tuple[tuple[str, str], ...] = FIGURES

    @property
    def title(self) -> str:
        """`group_title` of its group."""
        return group_title(self.group)

    @property
    def baseline(self) -> QuantRow | None:
        """The group's unquantized row, None when it did not run."""
        return next((r for r in self.rows if r.is_baseline), None)


def _rank(axis: str, value: str) -> tuple[int, str]:
    order = _AXIS_ORDER[axis]
    return (order.index(value), "") if value in order else (len(order), value)


def _mode_key(mode: Mode) -> tuple[object, ...]:
    quant, kv_quant, settings = mode
    numbers = tuple((_number(v) or 0.0, str(v)) for _, v in settings)  # g32 before g128
    return _rank("quant", quant), _rank("kv_quant", kv_quant), numbers


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _split(params: Mapping[str, Scalar]) -> tuple[Group, Mode]:
    quant, kv_quant = quant_mode(params)
    settings = tuple((k, params[k]) for k in KV_QUANT_SETTINGS if params.get(k) is not None)
    rest = {k: v for k, v in params.items() if k not in (*QUANT_AXES, *KV_QUANT_SETTINGS)}
    known = [(k, rest.pop(k)) for k in _GROUP_ORDER if k in rest]
    return (*known, *sorted(rest.items(), key=lambda kv: kv[0])), (quant, kv_quant, settings)


def _measurement_rank(bench: BenchmarkResult) -> int:
    measurement = bench.extra.get("measurement", bench.group)
    order = _MEASUREMENT_ORDER
    return order.index(measurement) if measurement in order else len(order)


def _first(benches: Sequence[BenchmarkResult], key: str) -> float | None:
    return next((v for b in benches if (v := _number(b.extra.get(key))) is not None), None)


def _row(mode: Mode, benches: Sequence[BenchmarkResult], accuracy: Accuracy | None) -> QuantRow:
    quant, kv_quant, settings = mode
    # A quantized KV cache's own packed figure, or none: its dense growth would read as no saving.
    kv_field = "kv_bytes_per_token" if kv_quant == NOT_QUANTIZED else "kv_quant_bytes_per_token"
    peak_field = next((k for k in PEAK_MEMORY_FIELDS if _first(benches, k) is not None), None)
    values = {
        "prefill_tok_per_s": _first(benches, "prefill_tok_per_s"),
        "decode_tok_per_s": _first(benches, "decode_tok_per_s"),
        "decode_bytes_per_s": _first(benches, "decode_bytes_per_s"),
        "weights_bytes": _first(benches, "weights_bytes"),
        "kv_bytes_per_token": _first(benches, kv_field),
        "peak_memory_bytes": None if peak_field is None else _first(benches, peak_field),
    }
    pairs = {}
    for name, measurement in PAIRED.items():
        found = next((b for b in benches if b.extra.get("measurement") == measurement), None)
        dense = None if found is None else found.extra.get("interleaved_dense_rounds_s")
        dense_id = None if found is None else found.extra.get("interleaved_dense_cell_id")
        if found is not None and isinstance(dense, list) and isinstance(dense_id, str):
            numbers = tuple(float(x) for x in dense if _number(x) is not None)
            pairs[name] = (found.rounds_s, numbers, dense_id)
    return QuantRow(
        quant, kv_quant, settings, benches[0].cell_id, values, peak_field, {}, accuracy,
        pairs=pairs,
    )  # fmt: skip


def _speedup(row: QuantRow, base: QuantRow | None, name: str) -> Speedup | None:
    """The paired speed-up of a `PAIRED` figure, when its rounds were paired with the group's
    own unquantized row (the same cell id)."""
    if base is None or row.is_baseline or name not in row.pairs:
        return None
    rounds, dense, dense_id = row.pairs[name]
    if dense_id != base.cell_id or min((*rounds, *dense), default=0.0) <= 0:
        return None
    return paired_speedup(dense, rounds)


def _ratio(row: QuantRow, base: QuantRow | None, name: str) -> float | None:
    if base is None or row.is_baseline:
        return None
    if name == "peak_memory_bytes" and row.peak_memory_field != base.peak_memory_field:
        return None
    value, reference = row.values.get(name), base.values.get(name)
    if value is None or reference is None or reference <= 0:
        return None
    return value / reference


def quant_tables(benchmarks: Iterable[BenchmarkResult]) -> list[QuantTable]:
    """The quantized groups of a run's benchmarks, one table each, sorted by title."""
    benches = list(benchmarks)
    accuracy = cell_accuracy(benches)
    grouped: dict[Group, dict[Mode, list[BenchmarkResult]]] = {}
    for bench in sorted(benches, key=_measurement_rank):
        group, mode = _split(bench.params)
        grouped.setdefault(group, {}).setdefault(mode, []).append(bench)
    tables = []
    for group, modes in grouped.items():
        if all(mode[:2] == (NOT_QUANTIZED, NOT_QUANTIZED) for mode in modes):
            continue  # nothing quantized here: the other sections show it
        rows = [
            _row(mode, modes[mode], accuracy.get(modes[mode][0].cell_id))
            for mode in sorted(modes, key=_mode_key)
        ]
        base = next((r for r in rows if r.is_baseline), None)
        speedups = [{n: _speedup(r, base, n) for n in PAIRED} for r in rows]
        ratios = [
            {n: (p[n].ratio if p.get(n) else _ratio(r, base, n)) for n, _ in FIGURES}  # type: ignore[union-attr]
            for r, p in zip(rows, speedups, strict=True)
        ]
        with_ratios = (
            replace(r, ratios=q, speedups=p) for r, q, p in zip(rows, ratios, speedups, strict=True)
        )
        tables.append(QuantTable(group, tuple(with_ratios)))
    return sorted(tables, key=lambda t: t.title)


def has_quantized_cells(benchmarks: Iterable[BenchmarkResult]) -> bool:
    """Whether any benchmark's cell quantizes its weights or its KV cache."""
    return any(is_quantized(b.params) for b in benchmarks)


def row_ratio_text(row: QuantRow, name: str) -> str:
    """A figure's ratio as the row shows it: paired with its interval for a speed figure timed
    in turn with the dense cell, `~` before a speed ratio of figures timed apart."""
    ratio = row.ratios.get(name)
    speedup = row.speedups.get(name)
    text = ratio_text(ratio, speedup)
    if name in PAIRED and ratio is not None and speedup is None:
        return APPROX + text
    return text


def figure_text(row: QuantRow, name: str) -> str:
    """'120 tok/s (2.10 and a times sign)'; the baseline row's figures without a ratio; '—' for
    no figure."""
    value = row.values.get(name)
    if value is None:
        return NO_RATIO
    if row.is_baseline:
        return value_text(value, name)
    return f"{value_text(value, name)} ({row_ratio_text(row, name)})"


ACCURACY_HEADS = ("SQNR min", "KL (nats)", "top-1 agreement")


def accuracy_cells(row: QuantRow) -> tuple[str, str, str]:
    """(SQNR min, KL, top-1 agreement) texts, SQNR and agreement with their bounds, '⚑ ' before
    one outside it; '—' for a cell without accuracy (the unquantized row is the reference)."""
    acc = row.accuracy
    if acc is None:
        return NO_RATIO, NO_RATIO, NO_RATIO
    return (
        f"{FLAG} {acc.sqnr_text}" if acc.sqnr_outside else acc.sqnr_text,
        acc.kl_text,
        f"{FLAG} {acc.agreement_text}" if acc.agreement_outside else acc.agreement_text,
    )


def left_dense_lines(table: QuantTable) -> list[str]:
    """ "int4wo-g128: model.layers.*.mlp.gate_proj x30 (K=576 is not ...)" per method and kind
    of Linear it left dense; the LM head, dense for every method by design, is left out."""
    lines = []
    for row in table.rows:
        dense = [] if row.accuracy is None else row.accuracy.left_dense
        kept = [(what, n, why) for what, n, why in dense if "LM head" not in why]
        if kept:
            parts = "; ".join(f"{what} {TIMES}{n} ({why})" for what, n, why in kept)
            lines.append(f"{row.label}: {parts}")
    return lines


def sqnr_rows(table: QuantTable) -> list[tuple[str, str, str, str, str]]:
    """The detail view: per row and kind of quantized tensor, (row label, kind, least dB,
    median dB, every layer's dB in order)."""
    found = []
    for row in table.rows:
        for kind, values in () if row.accuracy is None else row.accuracy.sqnr_by_kind:
            if values:
                ordered = sorted(values)
                middle = ordered[len(ordered) // 2]
                layers = " ".join(f"{v:.1f}" for v in values)
                found.append((row.label, kind, f"{ordered[0]:.1f}", f"{middle:.1f}", layers))
    return found


def sqnr_detail(row: QuantRow) -> str:
    """ "self_attn.q_proj 41.2..43.0 dB; mlp.down_proj 38.1..40.2 dB" for a hover."""
    kinds = () if row.accuracy is None else row.accuracy.sqnr_by_kind
    return "; ".join(f"{k} {min(v):.1f}..{max(v):.1f} dB" for k, v in kinds if v)


def markdown(tables: Sequence[QuantTable], heading: str = "####") -> str:
    """Markdown: a heading and a table per group."""
    parts: list[str] = []
    for table in tables:
        note = "" if table.baseline else " (no unquantized cell: no ratios)"
        parts.append(f"{heading} {table.title}{note}\n")
        heads = [head for _, head in table.columns]
        parts.append("| quant / kv_quant | " + " | ".join([*heads, *ACCURACY_HEADS]) + " |")
        parts.append("| --- |" + " ---: |" * (len(heads) + len(ACCURACY_HEADS)))
        for row in table.rows:
            label = f"{row.label} (baseline)" if row.is_baseline else row.label
            cells = [figure_text(row, name) for name, _ in table.columns]
            parts.append(f"| {label} | " + " | ".join([*cells, *accuracy_cells(row)]) + " |")
        dense = left_dense_lines(table)
        if dense:
            parts.append("")
            parts.append("Linears left dense: " + " · ".join(dense))
        parts.append("")
    return "\n".join(parts)


def print_paths(paths: Sequence[str]) -> int:
    """`python -m reports quant FILE_OR_DIR...`: each machine's newest run's tables and ACCURACY
    lines (`newest_runs` for the errors)."""
    for machine, run in newest_runs(paths):
        print(f"### {run.machine_label} {machine}: {run.short_commit} on {run.branch}, "
              f"{run.datetime}\n")  # fmt: skip
        tables = quant_tables(run.benchmarks.values())
        print(markdown(tables) if tables else "no quantized cells (no quant or kv_quant)\n")
        for flag in accuracy_flags(run.benchmarks.values()):
            print(flag.line(machine))
    return 0
