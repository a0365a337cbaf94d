"""Load a matrix YAML file (DESIGN §2) into validated, expanded cells.

A matrix states its whole product explicitly: one list per axis (`models`, `devices`,
`dtypes`, `batch`, `prompt_len`, `new_tokens`), the settings `warmup`, `rounds` and `seed`,
an optional `exclude:` list of partial cells removed from the product, and an optional
`include:` list of whole extra cells. Every mistake a user can make in that file raises a
`MatrixError` whose one sentence names the file, the field and the fix.

The cell id (`qwen2.5-0.5b-cpu-bfloat16-b1-p512-n32`) is the history's primary key and is built
in `Cell.id` and nowhere else.

How the model runs (DESIGN §9) adds three optional axes, `attention`, `cache` and `compile`
(values in `RUN_MODE_VALUES`), and the optional setting `max_cache_len` (static caches only;
default P + N - 1). An axis joins the cell id (`-attn_sdpa-cache_static-compile_default`) and the
flat `params` only when the matrix names it, so files without these axes keep their history keys.
An `include:` entry may give lists for any axis: it adds the product of its lists.

This module deliberately does not import torch or transformers (a broken matrix must fail in
a fraction of a second), and does not decide whether *this machine* can run a cell: that is
`benchmarks.harness.plan`, which the suite calls at collection time.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from benchmarks.harness.errors import MatrixError
from benchmarks.harness.matrixfields import (
    AXES,
    axis_example,
    axis_value,
    check_keys,
    did_you_mean,
    matches,
    parse_excludes,
    whole_number,
)
from benchmarks.harness.runmode_axes import RUN_MODE_AXES, run_mode_axis

SCHEMA = 1

CELL_AXES = tuple(AXES.values())
INT_AXES = ("batch", "prompt_len", "new_tokens")
# How each run-mode axis appears in the cell id: `-attn_eager`, `-cache_static`, `-compile_none`.
_ID_PREFIX = {"attention": "attn", "cache": "cache", "compile": "compile"}
# Settings apply to every cell; an `include:` entry may override them for itself.
DEFAULT_SETTINGS: dict[str, int] = {"warmup": 1, "rounds": 5, "seed": 0}
SETTING_MINIMUM: dict[str, int] = {"warmup": 0, "rounds": 1, "seed": 0}
# The timed benchmark modules a matrix may run (each module's MEASUREMENT); `measurements:` is
# optional and defaults to all of them. A module left out is skipped with that reason. The KV
# assertion (test_kv_cache) is not among them: it runs on every cell (DESIGN §4).
MEASUREMENTS = ("prefill", "decode", "generate", "overhead")
TOP_LEVEL_KEYS = (
    "schema",
    "description",
    *AXES,
    *RUN_MODE_AXES,
    *DEFAULT_SETTINGS,
    "max_cache_len",
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
    # Run-mode axes (DESIGN §9): None where the matrix does not name the axis.
    attention: str | None = None
    cache: str | None = None
    compile: str | None = None
    # Positions a static cache allocates; None: P + N - 1 (only static cells carry it).
    max_cache_len: int | None = None

    @property
    def id(self) -> str:
        """The stable history key, e.g. `qwen2.5-0.5b-cpu-bfloat16-b1-p512-n32`.

        Run-mode axes append `-attn_<v>`, `-cache_<v>` (with `-len<L>` for an explicit
        `max_cache_len`) and `-compile_<v>`, each only when the cell has that axis.
        """
        base = (
            f"{self.model}-{self.device}-{self.dtype}"
            f"-b{self.batch}-p{self.prompt_len}-n{self.new_tokens}"
        )
        parts = [base]
        for axis in RUN_MODE_AXES:
            value = getattr(self, axis)
            if value is not None:
                parts.append(f"{_ID_PREFIX[axis]}_{value}")
            if axis == "cache" and self.max_cache_len is not None:
                parts.append(f"len{self.max_cache_len}")
        return "-".join(parts)

    @property
    def build_key(self) -> tuple[str, ...]:
        """Cells sharing this key share one built model: (model, device, dtype) and, where
        present, the attention kernel, cache and compile mode (each changes the built model
        or its wrapper, so each run mode gets its own build)."""
        run_mode = tuple(
            f"{axis}={getattr(self, axis)}"
            for axis in RUN_MODE_AXES
            if getattr(self, axis) is not None
        )
        return (self.model, self.device, self.dtype, *run_mode)

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
        for name in (*RUN_MODE_AXES, "max_cache_len"):
            value = getattr(self, name)
            if value is not None:
                flat[name] = value
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


_OPTIONAL_FIELDS = (*RUN_MODE_AXES, "max_cache_len")


@dataclass(frozen=True)
class Matrix:
    """A validated matrix file and its expanded cells, in file order (product, then include)."""

    path: Path
    cells: tuple[Cell, ...]
    warmup: int
    rounds: int
    seed: int
    excluded: int
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


def load_matrix(path: Path, models_dir: Path | None = None) -> Matrix:
    """Read and validate a matrix file; model names are checked against `models_dir`.

    `models_dir` defaults to `benchmarks.harness.models.MODELS_DIR` (`matrix/models/`).
    Raises `MatrixError` (file, field and fix in one sentence) on any invalid input.
    """
    path = Path(path)
    if not path.is_file():
        siblings = (
            sorted(p.name for p in path.parent.glob("*.yaml")) if path.parent.is_dir() else []
        )
        hint = f" ({path.parent}/ has: {', '.join(siblings)})" if siblings else ""
        raise MatrixError(
            f"{path}: matrix file not found; pass --matrix with an existing file{hint}"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise MatrixError(f"{path}: not valid YAML{where}; fix the syntax there") from error
    except (OSError, UnicodeDecodeError) as error:
        raise MatrixError(
            f"{path}: cannot read the file ({error}); check its permissions"
        ) from error
    return parse_matrix(data, path=path, known_models=_known_models(models_dir))


def _known_models(models_dir: Path | None) -> tuple[str, ...]:
    # Imported here so that a matrix error never waits for transformers to import.
    from benchmarks.harness import models  # noqa: PLC0415

    directory = models.MODELS_DIR if models_dir is None else models_dir
    return tuple(models.list_models(directory))


def parse_matrix(data: Any, *, path: Path, known_models: Sequence[str]) -> Matrix:
    """Validate already-parsed YAML `data` and expand it into cells (the pure half of loading).

    `path` only names the file in messages; `known_models` are the model names a cell may use.
    """
    where = str(path)
    if not isinstance(data, Mapping):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise MatrixError(
            f"{where}: the file is {kind}, expected a mapping with `schema: 1` and the axes "
            f"{', '.join(AXES)}"
        )
    check_keys(data, TOP_LEVEL_KEYS, where=where, what="key")
    _check_schema(data, where)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise MatrixError(f"{where}: description must be a string; quote it")

    axes = {key: _axis(data, key, where, known_models) for key in AXES}
    run_axes = {
        key: run_mode_axis(data[key], key, f"{where}: {key}")
        for key in RUN_MODE_AXES
        if key in data
    }
    settings = {
        name: whole_number(data.get(name, default), f"{where}: {name}", SETTING_MINIMUM[name])
        for name, default in DEFAULT_SETTINGS.items()
    }
    cache_len = None
    if "max_cache_len" in data:
        cache_len = whole_number(data["max_cache_len"], f"{where}: max_cache_len", 1)
    excludes = parse_excludes(data.get("exclude", []), {**axes, **run_axes}, where)
    measurements = _measurements(data.get("measurements", list(MEASUREMENTS)), where)

    cells: list[Cell] = []
    excluded = 0
    names = (*CELL_AXES, *run_axes)
    for values in itertools.product(*axes.values(), *run_axes.values()):
        point = dict(zip(names, values, strict=True))
        if any(matches(rule, point) for rule in excludes):
            excluded += 1
            continue
        cells.append(_cell(point, settings, cache_len, where))
    cells.extend(_includes(data.get("include", []), settings, cache_len, where, known_models))

    if not cells:
        raise MatrixError(
            f"{where}: the matrix has no cells (every product cell is excluded and nothing is "
            "included); loosen `exclude:` or add values to the axes"
        )
    if cache_len is not None and not any(cell.cache == "static" for cell in cells):
        raise MatrixError(
            f"{where}: max_cache_len sizes static caches, but no cell has `cache: static`; "
            "add `cache: [static]` or remove max_cache_len"
        )
    _check_unique(cells, where)
    return Matrix(
        path=path,
        cells=tuple(cells),
        description=description,
        excluded=excluded,
        measurements=measurements,
        **settings,
    )


def _measurements(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        raise MatrixError(
            f"{where}: measurements must be a non-empty list of {', '.join(MEASUREMENTS)}; "
            "leave the key out to run them all"
        )
    for name in raw:
        if name not in MEASUREMENTS:
            raise MatrixError(
                f"{where}: measurements: unknown measurement {name!r}"
                f"{did_you_mean(str(name), MEASUREMENTS)}; allowed: {', '.join(MEASUREMENTS)}"
            )
    return tuple(dict.fromkeys(raw))


def _check_schema(data: Mapping[str, Any], where: str) -> None:
    if "schema" not in data:
        raise MatrixError(f"{where}: missing `schema`; add `schema: {SCHEMA}` as the first line")
    schema = data["schema"]
    if schema != SCHEMA or isinstance(schema, bool):
        raise MatrixError(
            f"{where}: schema: unknown schema {schema!r}; this phasebench reads `schema: {SCHEMA}` "
            "(upgrade phasebench or rewrite the file for schema 1)"
        )


def _axis(data: Mapping[str, Any], key: str, where: str, known_models: Sequence[str]) -> list[Any]:
    if key not in data:
        raise MatrixError(
            f"{where}: missing axis `{key}`; add it as a list, e.g. `{key}: [{axis_example(key)}]`"
        )
    raw = data[key]
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise MatrixError(f"{where}: {key}: the axis is empty; list at least one value")
    checked = [
        axis_value(AXES[key], value, f"{where}: {key}[{index}]", known_models)
        for index, value in enumerate(values)
    ]
    for index, value in enumerate(checked):
        if value in checked[:index]:
            raise MatrixError(
                f"{where}: {key}[{index}]: {value!r} is listed twice, which would make duplicate "
                "cell ids; remove one"
            )
    return checked


def _cell(
    point: Mapping[str, Any], settings: Mapping[str, int], cache_len: int | None, where: str
) -> Cell:
    """A cell of `point` (axes) with `settings`; `max_cache_len` is kept on static cells only."""
    own_len = cache_len if point.get("cache") == "static" else None
    cell = Cell(**point, **settings, max_cache_len=own_len)  # type: ignore[arg-type]
    needed = max(cell.final_positions, cell.prompt_len + 1)
    positions = cell.cache_positions
    if positions is not None and positions < needed:
        raise MatrixError(
            f"{where}: max_cache_len {positions} is below the {needed} positions cell "
            f"{cell.id} needs (P + N - 1, and at least P + 1 for the decode step); raise it"
        )
    return cell


def _includes(
    raw: Any,
    settings: Mapping[str, int],
    cache_len: int | None,
    where: str,
    known_models: Sequence[str],
) -> Iterable[Cell]:
    if not isinstance(raw, list):
        raise MatrixError(
            f"{where}: include must be a list of whole cells, e.g. `include: [{{model: ..., "
            "device: cpu, dtype: float32, batch: 1, prompt_len: 128, new_tokens: 32}]`"
        )
    allowed = (*CELL_AXES, *RUN_MODE_AXES, *DEFAULT_SETTINGS, "max_cache_len")
    for index, entry in enumerate(raw):
        here = f"{where}: include[{index}]"
        if not isinstance(entry, Mapping):
            raise MatrixError(f"{here}: expected a mapping with every axis: {', '.join(CELL_AXES)}")
        check_keys(entry, allowed, where=here, what="key")
        missing = [field for field in CELL_AXES if field not in entry]
        if missing:
            raise MatrixError(
                f"{here}: an included cell needs every axis; add {', '.join(missing)}"
            )
        # Every axis may be a list: the entry adds the product of its lists.
        choices: dict[str, list[Any]] = {}
        for field in CELL_AXES:
            values = entry[field] if isinstance(entry[field], list) else [entry[field]]
            choices[field] = [
                axis_value(field, value, f"{here}.{field}", known_models) for value in values
            ]
        for field in RUN_MODE_AXES:
            if field in entry:
                choices[field] = run_mode_axis(entry[field], field, f"{here}.{field}")
        own = {
            name: whole_number(
                entry.get(name, settings[name]), f"{here}.{name}", SETTING_MINIMUM[name]
            )
            for name in DEFAULT_SETTINGS
        }
        own_len = cache_len
        if "max_cache_len" in entry:
            own_len = whole_number(entry["max_cache_len"], f"{here}.max_cache_len", 1)
        for values in itertools.product(*choices.values()):
            yield _cell(dict(zip(choices, values, strict=True)), own, own_len, here)


def _check_unique(cells: Sequence[Cell], where: str) -> None:
    seen: set[str] = set()
    for cell in cells:
        if cell.id in seen:
            raise MatrixError(
                f"{where}: cell {cell.id!r} appears twice (an include repeats a product cell); "
                "remove the include or exclude the product cell"
            )
        seen.add(cell.id)
