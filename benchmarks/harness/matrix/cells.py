"""A matrix and its cells (DESIGN §2): `Cell` (one benchmark configuration, its id) and `Matrix`.

A matrix states its whole product explicitly: one list per axis (`models`, `devices`,
`dtypes`, `batch`, `prompt_len`, `new_tokens`), the settings `warmup`, `rounds`, `seed` and
`min_timed_s`, an optional `exclude:` list of partial cells removed from the product, and an
optional `include:` list of whole extra cells. Every mistake a user can make in that file raises a
`MatrixError` whose one sentence names the file, the field and the fix.

The cell id (`qwen2.5-0.5b-cpu-bfloat16-b1-p512-n32`) is the history's primary key and is built
in `Cell.id` and nowhere else.

How the model runs (DESIGN §9) adds optional axes, `attention`, `cache`, `compile`, `quant` and
`kv_quant` (values in `RUN_MODE_VALUES`), the optional setting `max_cache_len` (static caches
only; default P + N - 1), and `kv_group_size` / `kv_residual` (quantized KV caches only). An
axis joins the cell id (`-attn_sdpa-cache_static-compile_default`) and the flat `params` only when
the matrix names it, so files without these axes keep their history keys. An `include:` entry may
give lists for any axis: it adds the product of its lists. The optional `tp` axis (tensor-parallel
ranks: 1, 2, 4, 8) works the same way: `-tp<N>` ends the id only when the matrix names it. The
optional `engine` axis (DESIGN §14) joins the id as `-engine_mlx` for MLX cells only: a torch cell's
id is the same whether or not the matrix names the axis, so adding MLX to a matrix keeps every
torch history key.

This module deliberately does not import torch or transformers (a broken matrix must fail in
a fraction of a second), and does not decide whether *this machine* can run a cell: that is
`benchmarks.harness.plan`, which the suite calls at collection time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from benchmarks.harness.errors import MatrixError
from benchmarks.harness.matrix.axes import DEFAULT_ENGINE, RUN_MODE_AXES
from benchmarks.harness.matrix.fields import (
    AXES,
)
from benchmarks.harness.matrix.serving import SERVE_AXES, id_parts, params_value

SCHEMA = 1

CELL_AXES = tuple(AXES.values())
INT_AXES = ("batch", "prompt_len", "new_tokens")
# How each run-mode axis appears in the cell id: `-attn_eager`, `-cache_static`, `-compile_none`.
_ID_PREFIX = {
    "attention": "attn",
    "cache": "cache",
    "compile": "compile",
    "quant": "q",
    "kv_quant": "kvq",
    "engine": "engine",
}
# A quantized KV cache's group size and residual window (transformers' defaults are 64 and
# 128): set in the matrix, they are kept on cells whose `kv_quant` quantizes (and join the id).
KV_QUANT_SETTINGS = ("kv_group_size", "kv_residual")
DEFAULT_KV_GROUP_SIZE = 64
DEFAULT_KV_RESIDUAL = 128
# Settings apply to every cell; an `include:` entry may override them for itself.
# `min_timed_s`: each module keeps timing rounds past `rounds` until they add up to this many
# seconds (0: exactly `rounds`), so a figure is not a snapshot of a host whose memory bandwidth
# moves on a seconds scale (docs/suite.md, "Rounds and min_timed_s").
DEFAULT_SETTINGS: dict[str, int] = {"warmup": 1, "rounds": 5, "seed": 0, "min_timed_s": 0}
SETTING_MINIMUM: dict[str, int] = {"warmup": 0, "rounds": 1, "seed": 0, "min_timed_s": 0}
# The timed benchmark modules a matrix may run (each module's MEASUREMENT); `measurements:` is
# optional and defaults to all of them. A module left out is skipped with that reason. The KV
# assertion (test_kv_cache) is not among them: it runs on every cell (DESIGN §4).
MEASUREMENTS = ("prefill", "decode", "generate", "overhead", "serve")
# Measurements a matrix runs only when its `measurements:` names them (not in the default).
OPT_IN_MEASUREMENTS = ("interleaved",)
TOP_LEVEL_KEYS = (
    "schema",
    "description",
    *AXES,
    *RUN_MODE_AXES,
    "tp",
    *SERVE_AXES,
    *DEFAULT_SETTINGS,
    "max_cache_len",
    *KV_QUANT_SETTINGS,
    "measurements",
    "exclude",
    "include",
)


@dataclass(frozen=True)
class Cell:
    """One point of the matrix: what to run (the axes) and how often (the settings)."""

    model: str
    device: str
    dtype: str
    batch: int
    prompt_len: int
    new_tokens: int
    warmup: int
    rounds: int
    seed: int
    min_timed_s: int = 0
    # Run-mode axes (DESIGN §9): None where the matrix does not name the axis.
    attention: str | None = None
    cache: str | None = None
    compile: str | None = None
    # Positions a static cache allocates; None: P + N - 1 (only static cells carry it).
    max_cache_len: int | None = None
    # Weight and KV quantization (None: the axis is not in the matrix, i.e. `none`).
    quant: str | None = None
    kv_quant: str | None = None
    # Set explicitly in the matrix (None: the defaults above); only quantized-KV cells carry them.
    kv_group_size: int | None = None
    kv_residual: int | None = None
    # Tensor-parallel ranks (issue 32); None: the matrix has no `tp` axis, i.e. one device.
    tp: int | None = None
    # Serving under load (DESIGN §13, `serving`); None: the matrix does not name the axis.
    serve: str | None = None
    continuous_batching: bool | None = None
    request_rate: float | str | None = None  # req/s, inf, or "sla" (a capacity search)
    burstiness: float | None = None
    max_concurrency: int | None = None
    num_prompts: int | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    slo_e2el_ms: float | None = None
    sla_share: float | None = None
    range_ratio: float | None = None
    prefix_len: int | None = None
    dataset: str | None = None  # a JSON Lines file, as the matrix names it
    # The stack that runs the model (DESIGN §14); None: the matrix has no `engine` axis (torch).
    engine: str | None = None

    @property
    def id(self) -> str:
        """The stable history key, e.g. `qwen2.5-0.5b-cpu-bfloat16-b1-p512-n32`.

        Run-mode axes append `-attn_<v>`, `-cache_<v>` (with `-len<L>` for an explicit
        `max_cache_len`), `-compile_<v>`, `-q_<v>` and `-kvq_<v>` (with `-g<G>` and `-r<R>` for
        an explicit `kv_group_size` / `kv_residual`), each only when the cell has that axis;
        then `-engine_mlx` for an MLX cell (never `-engine_torch`: the default engine keeps the
        id it has without the axis); then `-tp<N>` when the cell has a `tp` axis (`-tp1`
        included: a tp-1 twin named in a tp matrix is its own history key, timed by the same
        in-process path as an id without it).
        """
        base = (
            f"{self.model}-{self.device}-{self.dtype}"
            f"-b{self.batch}-p{self.prompt_len}-n{self.new_tokens}"
        )
        parts = [base]
        for axis in RUN_MODE_AXES:
            value = getattr(self, axis)
            if value is not None and (axis, value) != ("engine", DEFAULT_ENGINE):
                parts.append(f"{_ID_PREFIX[axis]}_{value}")
            if axis == "cache" and self.max_cache_len is not None:
                parts.append(f"len{self.max_cache_len}")
            if axis == "kv_quant":
                if self.kv_group_size is not None:
                    parts.append(f"g{self.kv_group_size}")
                if self.kv_residual is not None:
                    parts.append(f"r{self.kv_residual}")
        if self.tp is not None:
            parts.append(f"tp{self.tp}")
        parts.extend(id_parts(self))  # `-serve_transformers-cb_on-rate_4...` (serving.py)
        return "-".join(parts)

    @property
    def build_key(self) -> tuple[str, ...]:
        """Cells sharing this key share one built model: (model, device, dtype) and, where
        present, the attention kernel, cache, compile mode and weight quantization (each
        changes the built model or its wrapper, so each gets its own build). `kv_quant` does
        not: it changes only the cache the engine starts from."""
        run_mode = tuple(
            f"{axis}={getattr(self, axis)}"
            for axis in RUN_MODE_AXES
            if getattr(self, axis) is not None and axis != "kv_quant"
        )
        # A tp > 1 cell builds nothing in this process (its ranks load the model): its own key.
        sharded = (f"tp={self.tp}",) if self.tp_size > 1 else ()
        # A serving cell builds nothing here either: cells sharing a server run together.
        served = (f"serve={self.serve}", f"cb={self.continuous_batching}") if self.serve else ()
        return (self.model, self.device, self.dtype, *run_mode, *sharded, *served)

    @property
    def tp_size(self) -> int:
        """Tensor-parallel ranks: the `tp` axis, 1 where the matrix has none."""
        return 1 if self.tp is None else self.tp

    @property
    def engine_name(self) -> str:
        """The stack that runs the model: the `engine` axis, `torch` where the matrix has none."""
        return self.engine or DEFAULT_ENGINE

    @property
    def weight_quant(self) -> str:
        """The weight quantization, `none` where the matrix has no `quant` axis."""
        return self.quant or "none"

    @property
    def kv_quantized(self) -> bool:
        """Whether this cell's KV cache is a quantized one."""
        return self.kv_quant not in (None, "none")

    @property
    def quantized(self) -> bool:
        """Whether weights or KV cache are quantized (the accuracy check runs on these)."""
        return self.weight_quant != "none" or self.kv_quantized

    @property
    def kv_group(self) -> int:
        """The quantized cache's group size (the matrix's, else transformers' default 64)."""
        return DEFAULT_KV_GROUP_SIZE if self.kv_group_size is None else self.kv_group_size

    @property
    def kv_residual_len(self) -> int:
        """Positions the quantized cache keeps unquantized before a flush (default 128)."""
        return DEFAULT_KV_RESIDUAL if self.kv_residual is None else self.kv_residual

    @property
    def final_positions(self) -> int:
        """Positions in the cache after N new tokens: P + N - 1 (the last token is not fed)."""
        return self.prompt_len + self.new_tokens - 1

    @property
    def cache_positions(self) -> int | None:
        """Positions a static cache of this cell allocates (None: not a static cell).

        `max_cache_len` where the matrix sets it, else P + N - 1 (the final cache), and at
        least P + 1 so the decode measurement's one step at context P fits when N = 1.
        """
        if self.cache != "static":
            return None
        if self.max_cache_len is not None:
            return self.max_cache_len
        return max(self.final_positions, self.prompt_len + 1)

    def axes(self) -> dict[str, str | int]:
        """The cell's axes as a flat plain dict: pytest-benchmark's `params` in history.

        Run-mode axes (and `max_cache_len`) appear only when the cell has them.
        """
        flat: dict[str, str | int] = {name: getattr(self, name) for name in CELL_AXES}
        for name in (*RUN_MODE_AXES, "max_cache_len", *KV_QUANT_SETTINGS, "tp", *SERVE_AXES):
            value = getattr(self, name)
            if value is not None:
                flat[name] = params_value(value)
        return flat

    def to_params(self) -> dict[str, str | int | None]:
        """Axes and settings as a plain dict (pytest parametrizes with this, never the object)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Cell:
        """Rebuild a cell from `to_params()` output; a missing or extra key is a bug here.

        The optional run-mode fields may be absent (they default to None).
        """
        names = [f.name for f in fields(cls)]
        required = [name for name in names if name not in _OPTIONAL_FIELDS]
        if not set(required) <= set(params) or not set(params) <= set(names):
            raise MatrixError(
                f"cell parameters {sorted(params)} do not match the cell fields {names}; "
                "build them with Cell.to_params()"
            )
        return cls(**{name: params[name] for name in names if name in params})


_OPTIONAL_FIELDS = (
    *RUN_MODE_AXES,
    "max_cache_len",
    *KV_QUANT_SETTINGS,
    "min_timed_s",
    "tp",
    *SERVE_AXES,
)


@dataclass(frozen=True)
class Matrix:
    """A validated matrix file and its expanded cells, in file order (product, then include)."""

    path: Path
    cells: tuple[Cell, ...]
    warmup: int
    rounds: int
    seed: int
    excluded: int
    min_timed_s: int = 0
    description: str = ""
    measurements: tuple[str, ...] = MEASUREMENTS

    @property
    def ids(self) -> tuple[str, ...]:
        """Every cell id, in the order of `cells`."""
        return tuple(cell.id for cell in self.cells)

    def cell(self, cell_id: str) -> Cell:
        """The cell with this id; KeyError names the id when there is none."""
        for cell in self.cells:
            if cell.id == cell_id:
                return cell
        raise KeyError(cell_id)
