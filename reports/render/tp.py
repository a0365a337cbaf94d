"""The tensor-parallel view: what splitting a cell over `tp` devices buys, and what each rank holds.

`tp_tables(benchmarks)` groups a run's cells by everything but `tp` (model, device, dtype,
batch, P, N and any other param, a quantization or run mode say), keeping the groups that hold
a cell with `tp` > 1 (`params.tp`; a matrix that does not name the axis runs tp 1). One
`TpTable` per group, one `TpRow` per tp value, each cell's figures joined over its benchmarks
(prefill, decode, generate, in that order of preference):

- `prefill_tok_per_s`, `decode_tok_per_s`, each with its **speed-up** over the group's tp-1
  row (the single-device twin) and the **scaling efficiency** (speed-up / tp: 100 % is linear).
  No twin, or a figure missing on either side: None (`—`), never 1.0 by construction;
- per rank, the max over ranks: `weights_rank_bytes` (`tp_weights_rank_bytes`, the stored
  bytes of the rank's shards), `kv_rank_after_prefill_bytes` / `kv_rank_final_bytes`
  (`tp_kv_rank_*_bytes`), the peaks `load_peak_rank_bytes` (`tp_load_peak_rank_bytes`: loading)
  and `run_peak_rank_bytes` (`tp_run_peak_rank_bytes`: the run after it; a record from before
  issue 42 has one `tp_peak_rank_bytes`, read at the end of the run, shown here), ranks without
  a figure left out. The tp-1 row without per-rank lists reads the single device's
  `weights_bytes`, `kv_measured_*_bytes` and, for the run peak, the first of
  `tables.PEAK_MEMORY_FIELDS`; a tp > 1 row never falls back to them (they may be one rank's or
  the global figure). Weights and KV carry their ratio to the twin's (1/tp is an even split);
  the peaks do not (their fields may differ);
- how far apart the ranks started a round, per measurement (`tp_start_skew_s`, the median over
  the timed rounds of max(t0) - min(t0) on the ranks' one clock): the part of the round's time
  that is the ranks leaving the barrier at different moments. A run whose ranks shared no clock
  (several hosts, `tp_round_clock` `per_rank`) has none, and its row says its times are per rank;
- `allreduce_bytes_per_step_estimate` (`tp_allreduce_bytes_per_step_estimate`): an estimate,
  labelled so, never measured.

`markdown(tables)` renders them for `python -m reports tp` (`print_paths`); the report's
template the HTML, from the same texts. Deliberately not here: judging (the current run's
figures, no verdicts). Imports neither torch nor benchmarks.* (DESIGN §1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from reports.history.runfile import BenchmarkResult, Scalar
from reports.render.quant import (
    NO_RATIO,
    Group,
    group_title,
    newest_runs,
    ratio_text,
    value_text,
)
from reports.render.tables import PEAK_MEMORY_FIELDS

VERB, HELP = "tp", "speed-up over tp 1 and per-rank bytes per tp value"  # python -m reports tp
_GROUP_ORDER = ("model", "device", "dtype", "batch", "prompt_len", "new_tokens")
_MEASUREMENT_ORDER = ("prefill", "decode", "generate")
#: Throughputs with a speed-up column each: (figure, header).
SPEEDS = (("prefill_tok_per_s", "prefill tok/s"), ("decode_tok_per_s", "decode tok/s"))
#: Per-rank figures: (figure, header, the record's per-rank list, the tp-1 fallback fields).
RANK_FIGURES = (
    ("weights_rank_bytes", "weights/rank (max)", "tp_weights_rank_bytes", ("weights_bytes",)),
    ("kv_rank_after_prefill_bytes", "KV/rank after prefill (max)",
     "tp_kv_rank_after_prefill_bytes", ("kv_measured_after_prefill_bytes",)),
    # generate's final cache holds P + N - 1 positions, as `tp_kv_rank_final_bytes` does (the
    # decode benchmark's holds P + 1).
    ("kv_rank_final_bytes", "KV/rank final (max)", "tp_kv_rank_final_bytes",
     ("generate:kv_measured_final_bytes",)),
    ("load_peak_rank_bytes", "load peak/rank (max)", "tp_load_peak_rank_bytes", ()),
    ("run_peak_rank_bytes", "run peak/rank (max)", "tp_run_peak_rank_bytes", PEAK_MEMORY_FIELDS),
)  # fmt: skip
# Records written before issue 42 hold one peak per rank, read at the end of the run.
_OLD_RUN_PEAK = "tp_peak_rank_bytes"
_RATIO_FIGURES = ("weights_rank_bytes", "kv_rank_after_prefill_bytes", "kv_rank_final_bytes")
ALLREDUCE = "allreduce_bytes_per_step_estimate"
ALLREDUCE_HEAD = "all-reduce/step (estimate)"


@dataclass(frozen=True)
class StartSkew:
    """How far apart the ranks started one measurement's rounds (median, seconds)."""

    measurement: str
    seconds: float

    @property
    def text(self) -> str:
        """'decode 0.12 ms'."""
        return f"{self.measurement} {self.seconds * 1e3:.3g} ms"


@dataclass(frozen=True)
class TpRow:
    """One tp value of a group: figures by name (None = not recorded), per-rank lists, the
    speed-ups over the tp-1 twin and the per-rank bytes' ratios to its bytes."""

    tp: int
    backend: str | None
    cell_id: str
    values: Mapping[str, float | None]
    per_rank: Mapping[str, tuple[int | None, ...]] = field(default_factory=dict)
    skew: tuple[StartSkew, ...] = ()
    speedups: Mapping[str, float | None] = field(default_factory=dict)
    ratios: Mapping[str, float | None] = field(default_factory=dict)
    per_rank_times: bool = False  # the ranks shared no clock: each round is a rank's own time

    @property
    def is_twin(self) -> bool:
        """The single-device row the others' speed-ups are to."""
        return self.tp == 1

    @property
    def label(self) -> str:
        """'tp 2 (gloo)', 'tp 1 (single device)'."""
        if self.is_twin:
            return "tp 1 (single device)"
        notes = [n for n in (self.backend, "per-rank times" if self.per_rank_times else None) if n]
        return f"tp {self.tp}" + (f" ({', '.join(notes)})" if notes else "")

    def efficiency(self, name: str) -> float | None:
        """The speed-up per device (speed-up / tp), None without a speed-up."""
        speedup = self.speedups.get(name)
        return None if speedup is None else speedup / self.tp

    @property
    def skew_text(self) -> str:
        """'prefill 0.4 ms, decode 0.12 ms'; '—' without a figure."""
        return ", ".join(s.text for s in self.skew) or NO_RATIO


@dataclass(frozen=True)
class TpTable:
    """The tp values of one group of cells (everything but tp)."""

    group: Group
    rows: tuple[TpRow, ...]

    @property
    def title(self) -> str:
        """`quant.group_title` of its group."""
        return group_title(self.group)

    @property
    def columns(self) -> list[tuple[str, str]]:
        """`columns()`: the (kind:name, header) pairs after the tp column."""
        return columns()

    @property
    def twin(self) -> TpRow | None:
        """The group's tp-1 row, None when it did not run."""
        return next((r for r in self.rows if r.is_twin), None)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def tp_of(params: Mapping[str, Scalar]) -> int:
    """The cell's tp: `params.tp`, 1 when the matrix does not name the axis."""
    value = params.get("tp")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _split(params: Mapping[str, Scalar]) -> tuple[Group, int]:
    rest = {k: v for k, v in params.items() if k != "tp"}
    known = [(k, rest.pop(k)) for k in _GROUP_ORDER if k in rest]
    return (*known, *sorted(rest.items(), key=lambda kv: kv[0])), tp_of(params)


def _measurement(bench: BenchmarkResult) -> str:
    value = bench.extra.get("measurement", bench.group)
    return value if isinstance(value, str) else bench.group


def _measurement_rank(bench: BenchmarkResult) -> int:
    order = _MEASUREMENT_ORDER
    return order.index(m) if (m := _measurement(bench)) in order else len(order)


def _first(benches: Sequence[BenchmarkResult], key: str) -> float | None:
    return next((v for b in benches if (v := _number(b.extra.get(key))) is not None), None)


def _fallback(benches: Sequence[BenchmarkResult], key: str) -> float | None:
    """`key`, or `measurement:key`: only from that measurement's record."""
    measurement, _, field_name = key.rpartition(":")
    if measurement:
        benches = [b for b in benches if _measurement(b) == measurement]
    return _first(benches, field_name)


def _rank_list(benches: Sequence[BenchmarkResult], key: str) -> tuple[int | None, ...]:
    """The first benchmark's per-rank list of `key` (non-numbers as None); () when none has one."""
    for bench in benches:
        raw = bench.extra.get(key)
        if isinstance(raw, list | tuple) and raw:
            return tuple(int(v) if (v := _number(x)) is not None else None for x in raw)
    return ()


def _skew(bench: BenchmarkResult) -> StartSkew | None:
    seconds = _number(bench.extra.get("tp_start_skew_s"))
    return None if seconds is None else StartSkew(_measurement(bench), seconds)


def _row(tp: int, benches: Sequence[BenchmarkResult]) -> TpRow:
    values: dict[str, float | None] = {name: _first(benches, name) for name, _ in SPEEDS}
    per_rank: dict[str, tuple[int | None, ...]] = {}
    for name, _, key, fallback in RANK_FIGURES:
        ranks = per_rank[name] = _rank_list(benches, key) or (
            _rank_list(benches, _OLD_RUN_PEAK) if name == "run_peak_rank_bytes" else ()
        )
        known = [r for r in ranks if r is not None]
        if known:
            values[name] = float(max(known))
        elif tp == 1 and not ranks:  # one device: its own figures are the rank's
            values[name] = next((v for k in fallback if (v := _fallback(benches, k)) is not None),
                                None)  # fmt: skip
        else:
            values[name] = None
    # Per decode step: a prefill record's figure is per prefill forward (B x P tokens).
    values[ALLREDUCE] = _fallback(benches, "decode:tp_allreduce_bytes_per_step_estimate")
    backend = next((b for x in benches if isinstance(b := x.extra.get("tp_backend"), str)), None)
    skew = tuple(s for b in benches if (s := _skew(b)) is not None)
    per_rank_times = any(b.extra.get("tp_round_clock") == "per_rank" for b in benches)
    return TpRow(tp, backend, benches[0].cell_id, values, per_rank, skew,
                 per_rank_times=per_rank_times)  # fmt: skip


def _ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or reference is None or reference <= 0:
        return None
    return value / reference


def _with_twin(row: TpRow, twin: TpRow | None) -> TpRow:
    if twin is None or row.is_twin:
        return row
    speedups = {n: _ratio(row.values.get(n), twin.values.get(n)) for n, _ in SPEEDS}
    ratios = {n: _ratio(row.values.get(n), twin.values.get(n)) for n in _RATIO_FIGURES}
    return TpRow(row.tp, row.backend, row.cell_id, row.values, row.per_rank, row.skew,
                 speedups, ratios, row.per_rank_times)  # fmt: skip


def tp_tables(benchmarks: Iterable[BenchmarkResult]) -> list[TpTable]:
    """The groups of a run's benchmarks that hold a tp > 1 cell, one table each, by title."""
    grouped: dict[Group, dict[int, list[BenchmarkResult]]] = {}
    for bench in sorted(benchmarks, key=_measurement_rank):
        group, tp = _split(bench.params)
        grouped.setdefault(group, {}).setdefault(tp, []).append(bench)
    tables = []
    for group, by_tp in grouped.items():
        if max(by_tp) <= 1:
            continue  # single-device cells only: the other sections show them
        rows = [_row(tp, by_tp[tp]) for tp in sorted(by_tp)]
        twin = next((r for r in rows if r.is_twin), None)
        tables.append(TpTable(group, tuple(_with_twin(r, twin) for r in rows)))
    return sorted(tables, key=lambda t: t.title)


def has_tp_cells(benchmarks: Iterable[BenchmarkResult]) -> bool:
    """Whether any benchmark's cell runs over more than one device."""
    return any(tp_of(b.params) > 1 for b in benchmarks)


def speedup_text(row: TpRow, name: str) -> str:
    """'1.80x (90 %)' (a times sign): the speed-up over tp 1 and the efficiency; 'reference'
    on the tp-1 row; '—' without a twin or a figure."""
    if row.is_twin:
        return "reference"
    speedup, efficiency = row.speedups.get(name), row.efficiency(name)
    if speedup is None or efficiency is None:
        return NO_RATIO
    return f"{ratio_text(speedup)} ({efficiency * 100:.0f} %)"


def figure_text(row: TpRow, name: str) -> str:
    """A figure in its unit ('1.41 MiB'), with its ratio to the twin's for weights and KV
    ('(0.50x)'); '≈ ' before the all-reduce estimate; '—' when not recorded."""
    value = row.values.get(name)
    if value is None:
        return NO_RATIO
    text = value_text(value, name)
    if name == ALLREDUCE:
        return f"\u2248 {text}"
    if name in _RATIO_FIGURES and not row.is_twin:
        return f"{text} ({ratio_text(row.ratios.get(name))})"
    return text


def rank_text(row: TpRow, name: str) -> str:
    """Every rank's figure, for a tooltip: 'r0 1.41 MiB, r1 1.41 MiB' ('' without a list)."""
    ranks = row.per_rank.get(name, ())
    return ", ".join(f"r{i} {value_text(v, name)}" for i, v in enumerate(ranks))


def columns() -> list[tuple[str, str]]:
    """The table's (kind:name, header) after the tp column, in order."""
    out = []
    for name, head in SPEEDS:
        out += [(f"value:{name}", head), (f"speedup:{name}", f"{head.split()[0]} speed-up (eff.)")]
    out += [(f"value:{name}", head) for name, head, _, _ in RANK_FIGURES]
    return [*out, ("skew:", "rank start skew (median)"), (f"value:{ALLREDUCE}", ALLREDUCE_HEAD)]


def cell_text(row: TpRow, column: str) -> str:
    """The text of one `columns()` entry of a row."""
    kind, _, name = column.partition(":")
    if kind == "speedup":
        return speedup_text(row, name)
    return row.skew_text if kind == "skew" else figure_text(row, name)


def markdown(tables: Sequence[TpTable], heading: str = "####") -> str:
    """Markdown: a heading and a table per group."""
    parts: list[str] = []
    cols = columns()
    for table in tables:
        note = "" if table.twin else " (no tp-1 cell: no speed-up)"
        parts.append(f"{heading} {table.title}{note}\n")
        parts.append("| tp | " + " | ".join(head for _, head in cols) + " |")
        parts.append("| --- |" + " ---: |" * len(cols))
        for row in table.rows:
            cells = [cell_text(row, column) for column, _ in cols]
            parts.append(f"| {row.label} | " + " | ".join(cells) + " |")
        parts.append("")
    return "\n".join(parts)


def print_paths(paths: Sequence[str]) -> int:
    """`python -m reports tp FILE_OR_DIR...`: each machine's newest run's tables
    (`quant.newest_runs` for the errors: a missing path is one line, exit 2)."""
    for machine, run in newest_runs(paths):
        print(f"### {run.machine_label} {machine}: {run.short_commit} on {run.branch}, "
              f"{run.datetime}\n")  # fmt: skip
        tables = tp_tables(run.benchmarks.values())
        print(markdown(tables) if tables else "no tensor-parallel cells (no tp > 1)\n")
    return 0
