"""Load a matrix YAML file (DESIGN §2) into validated, expanded cells.

A matrix states its whole product explicitly: one list per axis (`models`, `devices`,
`dtypes`, `batch`, `prompt_len`, `new_tokens`), the settings `warmup`, `rounds` and `seed`,
an optional `exclude:` list of partial cells removed from the product, and an optional
`include:` list of whole extra cells. Every mistake a user can make in that file raises a
`MatrixError` whose one sentence names the file, the field and the fix.

The cell id (`qwen2.5-0.5b-cpu-bfloat16-b1-p512-n32`) is the history's primary key and is built
in `Cell.id` and nowhere else.

This module deliberately does not import torch or transformers (a broken matrix must fail in
a fraction of a second), and does not decide whether *this machine* can run a cell: that is
`benchmarks.harness.plan`, which the suite calls at collection time.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from benchmarks.harness.errors import MatrixError

SCHEMA = 1
DTYPES = ("float32", "float16", "bfloat16")
DEVICE_PATTERN = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
DEVICE_FORMS = "cpu, mps, cuda or cuda:N"

# File key (a list) -> the Cell field one of its values fills.
AXES: dict[str, str] = {
    "models": "model",
    "devices": "device",
    "dtypes": "dtype",
    "batch": "batch",
    "prompt_len": "prompt_len",
    "new_tokens": "new_tokens",
}
CELL_AXES = tuple(AXES.values())
INT_AXES = ("batch", "prompt_len", "new_tokens")
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
    *DEFAULT_SETTINGS,
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

    @property
    def id(self) -> str:
        """The stable history key, e.g. `qwen2.5-0.5b-cpu-bfloat16-b1-p512-n32`."""
        return (
            f"{self.model}-{self.device}-{self.dtype}"
            f"-b{self.batch}-p{self.prompt_len}-n{self.new_tokens}"
        )

    @property
    def build_key(self) -> tuple[str, str, str]:
        """Cells sharing this key share one built model: (model, device, dtype)."""
        return (self.model, self.device, self.dtype)

    @property
    def final_positions(self) -> int:
        """Positions in the cache after N new tokens: P + N - 1 (the last token is not fed)."""
        return self.prompt_len + self.new_tokens - 1

    def axes(self) -> dict[str, str | int]:
        """The cell's axes as a flat plain dict: pytest-benchmark's `params` in history."""
        return {name: getattr(self, name) for name in CELL_AXES}

    def to_params(self) -> dict[str, str | int]:
        """Axes and settings as a plain dict (pytest parametrizes with this, never the object)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Cell:
        """Rebuild a cell from `to_params()` output; a missing or extra key is a bug here."""
        names = [f.name for f in fields(cls)]
        if set(params) != set(names):
            raise MatrixError(
                f"cell parameters {sorted(params)} do not match the cell fields {names}; "
                "build them with Cell.to_params()"
            )
        return cls(**{name: params[name] for name in names})


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
    _check_keys(data, TOP_LEVEL_KEYS, where=where, what="key")
    _check_schema(data, where)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise MatrixError(f"{where}: description must be a string; quote it")

    axes = {key: _axis(data, key, where, known_models) for key in AXES}
    settings = {
        name: _int(data.get(name, default), f"{where}: {name}", SETTING_MINIMUM[name])
        for name, default in DEFAULT_SETTINGS.items()
    }
    excludes = _excludes(data.get("exclude", []), axes, where)
    measurements = _measurements(data.get("measurements", list(MEASUREMENTS)), where)

    cells: list[Cell] = []
    excluded = 0
    for values in itertools.product(*axes.values()):
        point = dict(zip(CELL_AXES, values, strict=True))
        if any(_matches(rule, point) for rule in excludes):
            excluded += 1
            continue
        cells.append(Cell(**point, **settings))  # type: ignore[arg-type]
    cells.extend(_includes(data.get("include", []), settings, where, known_models))

    if not cells:
        raise MatrixError(
            f"{where}: the matrix has no cells (every product cell is excluded and nothing is "
            "included); loosen `exclude:` or add values to the axes"
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
                f"{_did_you_mean(str(name), MEASUREMENTS)}; allowed: {', '.join(MEASUREMENTS)}"
            )
    return tuple(dict.fromkeys(raw))


def _check_keys(data: Mapping[Any, Any], allowed: Sequence[str], *, where: str, what: str) -> None:
    for key in data:
        if key not in allowed:
            raise MatrixError(
                f"{where}: unknown {what} {key!r}{_did_you_mean(str(key), allowed)}; "
                f"allowed: {', '.join(allowed)}"
            )


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
            f"{where}: missing axis `{key}`; add it as a list, e.g. `{key}: [{_example(key)}]`"
        )
    raw = data[key]
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise MatrixError(f"{where}: {key}: the axis is empty; list at least one value")
    checked = [
        _value(AXES[key], value, f"{where}: {key}[{index}]", known_models)
        for index, value in enumerate(values)
    ]
    for index, value in enumerate(checked):
        if value in checked[:index]:
            raise MatrixError(
                f"{where}: {key}[{index}]: {value!r} is listed twice, which would make duplicate "
                "cell ids; remove one"
            )
    return checked


def _example(key: str) -> str:
    return {
        "models": "qwen2.5-0.5b",
        "devices": "cpu",
        "dtypes": "float32",
        "batch": "1",
        "prompt_len": "512",
        "new_tokens": "32",
    }[key]


def _value(field: str, value: Any, where: str, known_models: Sequence[str]) -> str | int:
    """Validate one axis value for cell field `field`; returns it unchanged when valid."""
    checks: dict[str, Callable[[Any, str], str | int]] = {
        "model": lambda v, w: _model(v, w, known_models),
        "device": _device,
        "dtype": _dtype,
    }
    if field in checks:
        return checks[field](value, where)
    return _int(value, where, 1)


def _model(value: Any, where: str, known_models: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in known_models:
        listing = ", ".join(sorted(known_models)) or "none"
        raise MatrixError(
            f"{where}: unknown model {value!r}{_did_you_mean(str(value), known_models)}; "
            f"use a file name from matrix/models/ (known: {listing}) or add "
            f"matrix/models/{value}.yaml"
        )
    return value


def _device(value: Any, where: str) -> str:
    if not isinstance(value, str) or not DEVICE_PATTERN.match(value):
        raise MatrixError(f"{where}: unknown device {value!r}; use {DEVICE_FORMS}")
    return value


def _dtype(value: Any, where: str) -> str:
    if not isinstance(value, str) or value not in DTYPES:
        hint = _did_you_mean(str(value), DTYPES)
        raise MatrixError(f"{where}: unknown dtype {value!r}{hint}; use one of {', '.join(DTYPES)}")
    return value


def _int(value: Any, where: str, minimum: int) -> int:
    # YAML `true` is an int subclass in Python; a boolean is never a count.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        bound = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise MatrixError(f"{where}: {value!r} is not valid; use {bound}")
    return value


def _excludes(
    raw: Any, axes: Mapping[str, Sequence[Any]], where: str
) -> list[dict[str, tuple[Any, ...]]]:
    if not isinstance(raw, list):
        raise MatrixError(
            f"{where}: exclude must be a list of partial cells, e.g. "
            "`exclude: [{model: llama-3.1-8b, batch: 8}]`"
        )
    by_field = {AXES[key]: values for key, values in axes.items()}
    rules: list[dict[str, tuple[Any, ...]]] = []
    for index, entry in enumerate(raw):
        here = f"{where}: exclude[{index}]"
        if not isinstance(entry, Mapping) or not entry:
            raise MatrixError(
                f"{here}: expected a non-empty mapping of axis values, e.g. "
                "`{model: llama-3.1-8b, batch: 8}`"
            )
        _check_keys(entry, CELL_AXES, where=here, what="axis")
        rule: dict[str, tuple[Any, ...]] = {}
        for field, value in entry.items():
            values = value if isinstance(value, list) else [value]
            for item in values:
                # An exclude value absent from its axis matches nothing: almost always a typo.
                if item not in by_field[field]:
                    listed = ", ".join(str(v) for v in by_field[field])
                    raise MatrixError(
                        f"{here}.{field}: {item!r} is not in the matrix's {field} values "
                        f"({listed}), so this exclude matches nothing; fix the value or drop it"
                    )
            rule[field] = tuple(values)
        rules.append(rule)
    return rules


def _matches(rule: Mapping[str, tuple[Any, ...]], point: Mapping[str, Any]) -> bool:
    return all(point[field] in values for field, values in rule.items())


def _includes(
    raw: Any, settings: Mapping[str, int], where: str, known_models: Sequence[str]
) -> Iterable[Cell]:
    if not isinstance(raw, list):
        raise MatrixError(
            f"{where}: include must be a list of whole cells, e.g. `include: [{{model: ..., "
            "device: cpu, dtype: float32, batch: 1, prompt_len: 128, new_tokens: 32}]`"
        )
    allowed = (*CELL_AXES, *DEFAULT_SETTINGS)
    for index, entry in enumerate(raw):
        here = f"{where}: include[{index}]"
        if not isinstance(entry, Mapping):
            raise MatrixError(f"{here}: expected a mapping with every axis: {', '.join(CELL_AXES)}")
        _check_keys(entry, allowed, where=here, what="key")
        missing = [field for field in CELL_AXES if field not in entry]
        if missing:
            raise MatrixError(
                f"{here}: an included cell needs every axis; add {', '.join(missing)}"
            )
        point = {
            field: _value(field, entry[field], f"{here}.{field}", known_models)
            for field in CELL_AXES
        }
        own = {
            name: _int(entry.get(name, settings[name]), f"{here}.{name}", SETTING_MINIMUM[name])
            for name in DEFAULT_SETTINGS
        }
        yield Cell(**point, **own)  # type: ignore[arg-type]


def _check_unique(cells: Sequence[Cell], where: str) -> None:
    seen: set[str] = set()
    for cell in cells:
        if cell.id in seen:
            raise MatrixError(
                f"{where}: cell {cell.id!r} appears twice (an include repeats a product cell); "
                "remove the include or exclude the product cell"
            )
        seen.add(cell.id)


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
