"""What a run mode buys, per cell: decode tok/s by attention x cache x compile (DESIGN §9).

`comparison_tables(benchmarks)` groups the `decode` benchmarks of run-mode cells (those whose
`params` name `attention`, `cache` or `compile`) by the rest of the cell (model, device, dtype,
batch, P, N and any other param): one `Table` each, rows = attention x cache, columns = compile
mode, each entry the recorded `decode_tok_per_s` with `decode_step_s` and, for compiled cells,
`compile_s` (first prefill + first decode step, the cost a user pays once). An entry of a
compiled column also carries its speed-up over the `none` column of the same row, when that ran.
`markdown(tables)` renders them for summary.md and `python -m reports runmode FILE...`.

Rows and columns follow the documented axis order (sdpa, eager, ...; dynamic, static; none,
default, reduce-overhead, max-autotune), unknown values after, alphabetically; an axis the matrix
does not name shows as "(unset)". Missing combinations are "n/a".

Deliberately not here: judging (these are the current run's figures, no verdicts), file
reading (`runfile`; `print_files` only calls it), HTML (the report template). Imports neither
torch nor benchmarks.* (DESIGN §1).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reports.history.runfile import BenchmarkResult, Scalar, SkippedFile, read_run_file

RUN_MODE_AXES = ("attention", "cache", "compile")
_CELL_ORDER = ("model", "device", "dtype", "batch", "prompt_len", "new_tokens")
UNSET = "(unset)"  # an axis the matrix does not name (the model's / transformers' default)
_AXIS_ORDER = {
    "attention": ("sdpa", "eager", "flex_attention", "flash_attention_2"),
    "cache": ("dynamic", "static"),
    "compile": ("none", "default", "reduce-overhead", "max-autotune"),
}
_NO_COMPILE = "none"


@dataclass(frozen=True)
class Entry:
    """One run mode's decode figures (None = not recorded)."""

    decode_tok_per_s: float | None
    decode_step_s: float | None
    compile_s: float | None
    fullname: str = ""
    speedup_vs_none: float | None = None  # tok/s over the same row's compile=none tok/s


@dataclass(frozen=True)
class Table:
    """The run modes of one cell (everything but attention, cache and compile)."""

    cell: tuple[tuple[str, Scalar], ...]
    entries: dict[tuple[str, str, str], Entry] = field(default_factory=dict)

    @property
    def title(self) -> str:
        """'tiny-llama cpu float32 b1 p24 n8' (+ ' key=value' for other params)."""
        params = dict(self.cell)
        words = [str(params.pop(k)) for k in ("model", "device", "dtype") if k in params]
        for key, prefix in (("batch", "b"), ("prompt_len", "p"), ("new_tokens", "n")):
            if key in params:
                words.append(f"{prefix}{params.pop(key)}")
        words += [f"{k}={v}" for k, v in params.items()]
        return " ".join(words)

    @property
    def rows(self) -> list[tuple[str, str]]:
        """(attention, cache) pairs in axis order."""
        pairs = {(a, c) for a, c, _ in self.entries}
        return sorted(pairs, key=lambda p: (_rank("attention", p[0]), _rank("cache", p[1])))

    @property
    def columns(self) -> list[str]:
        """Compile modes in axis order."""
        return sorted({m for _, _, m in self.entries}, key=lambda m: _rank("compile", m))

    def entry(self, attention: str, cache: str, compile_mode: str) -> Entry | None:
        """The entry of one combination, None when it did not run."""
        return self.entries.get((attention, cache, compile_mode))


def mode_rank(params: Mapping[str, Scalar]) -> tuple[tuple[int, str], ...]:
    """A sort key putting run modes in axis order (sdpa before eager, none before default)."""
    return tuple(_rank(k, str(params[k])) if k in params else (-1, "") for k in RUN_MODE_AXES)


def _rank(axis: str, value: str) -> tuple[int, str]:
    order = _AXIS_ORDER[axis]
    return (order.index(value), "") if value in order else (len(order), value)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _cell_key(params: dict[str, Scalar]) -> tuple[tuple[str, Scalar], ...]:
    rest = {k: v for k, v in params.items() if k not in RUN_MODE_AXES}
    known = [(k, rest.pop(k)) for k in _CELL_ORDER if k in rest]
    return (*known, *sorted(rest.items()))


def has_run_modes(benchmarks: Iterable[BenchmarkResult]) -> bool:
    """Whether any benchmark's params name a run-mode axis."""
    return any(k in b.params for b in benchmarks for k in RUN_MODE_AXES)


def comparison_tables(benchmarks: Iterable[BenchmarkResult]) -> list[Table]:
    """Decode benchmarks of run-mode cells, one table per cell, sorted by title."""
    raw: dict[tuple[tuple[str, Scalar], ...], dict[tuple[str, str, str], Entry]] = {}
    for bench in benchmarks:
        params = dict(bench.params)
        if bench.group != "decode" or not any(k in params for k in RUN_MODE_AXES):
            continue
        mode = tuple(str(params[k]) if k in params else UNSET for k in RUN_MODE_AXES)
        raw.setdefault(_cell_key(params), {})[(mode[0], mode[1], mode[2])] = Entry(
            decode_tok_per_s=_number(bench.extra.get("decode_tok_per_s")),
            decode_step_s=_number(bench.extra.get("decode_step_s")),
            compile_s=_number(bench.extra.get("compile_s")),
            fullname=bench.fullname,
        )
    tables = [Table(cell, _with_speedups(entries)) for cell, entries in raw.items()]
    return sorted(tables, key=lambda t: t.title)


def _with_speedups(entries: dict[tuple[str, str, str], Entry]) -> dict[tuple[str, str, str], Entry]:
    out = {}
    for (attention, cache, mode), entry in entries.items():
        eager = entries.get((attention, cache, _NO_COMPILE))
        speedup = None
        if (
            mode != _NO_COMPILE
            and eager is not None
            and eager.decode_tok_per_s
            and entry.decode_tok_per_s is not None
        ):
            speedup = entry.decode_tok_per_s / eager.decode_tok_per_s
        out[(attention, cache, mode)] = Entry(
            entry.decode_tok_per_s,
            entry.decode_step_s,
            entry.compile_s,
            entry.fullname,
            speedup,
        )
    return out


def entry_text(entry: Entry | None) -> str:
    """'20.0 tok/s (50.00 ms; 1.25x vs none; compile_s 30.0)', or 'n/a'."""
    if entry is None or entry.decode_tok_per_s is None:
        return "n/a"
    details = []
    if entry.decode_step_s is not None:
        details.append(f"{entry.decode_step_s * 1e3:.2f} ms")
    if entry.speedup_vs_none is not None:
        details.append(f"{entry.speedup_vs_none:.2f}x vs none")
    if entry.compile_s is not None:
        details.append(f"compile_s {entry.compile_s:.1f}")
    suffix = f" ({'; '.join(details)})" if details else ""
    return f"{entry.decode_tok_per_s:.1f} tok/s{suffix}"


def markdown(tables: Sequence[Table], heading: str = "####") -> str:
    """Markdown: a heading and a table per cell; 'n/a' where a combination did not run."""
    parts: list[str] = []
    for table in tables:
        parts.append(f"{heading} {table.title}\n")
        columns = table.columns
        parts.append("| attention x cache | " + " | ".join(f"compile {c}" for c in columns) + " |")
        parts.append("| --- |" + " ---: |" * len(columns))
        for attention, cache in table.rows:
            cells = [entry_text(table.entry(attention, cache, c)) for c in columns]
            parts.append(f"| {attention} x {cache} | " + " | ".join(cells) + " |")
        parts.append("")
    return "\n".join(parts)


def print_files(paths: Sequence[str]) -> int:
    """`python -m reports runmode FILE...`: each file's tables; 2 when a file is unusable."""
    code = 0
    for name in paths:
        run = read_run_file(Path(name))
        if isinstance(run, SkippedFile):
            why = f"{run.path}: {run.reason}: pass a pytest-benchmark JSON file"
            print(f"error: {why}", file=sys.stderr)
            code = 2
            continue
        tables = comparison_tables(run.benchmarks)
        print(f"### {name}\n")
        if tables:
            print(markdown(tables))
        else:
            print("no run-mode cells (no decode benchmark names attention, cache or compile)\n")
    return code
