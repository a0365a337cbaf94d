"""Read a matrix YAML file and turn it into validated, expanded `Cell`s (`load_matrix`).

`parse_matrix` is the pure half (already-parsed YAML -> `Matrix`): every field is checked with a
one-line error that names the file, the field and the fix; `exclude:` and `include:` are
applied; duplicate cells are refused. See `cells` for what a cell is.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks.harness.errors import MatrixError
from benchmarks.harness.matrix.axes import RUN_MODE_AXES, run_mode_axis, tp_axis
from benchmarks.harness.matrix.cells import (
    CELL_AXES,
    DEFAULT_SETTINGS,
    KV_QUANT_SETTINGS,
    MEASUREMENTS,
    OPT_IN_MEASUREMENTS,
    SCHEMA,
    SETTING_MINIMUM,
    TOP_LEVEL_KEYS,
    Cell,
    Matrix,
)
from benchmarks.harness.matrix.fields import (
    AXES,
    axis_example,
    axis_value,
    check_keys,
    did_you_mean,
    matches,
    parse_excludes,
    whole_number,
)
from benchmarks.harness.matrix.serving import SERVE_AXES, check_serving, serving_axes


def load_matrix(path: Path, models_dir: Path | None = None) -> Matrix:
    """Read and validate a matrix file; model names are checked against `models_dir`.

    `models_dir` defaults to `benchmarks.harness.model.models.MODELS_DIR` (`matrix/models/`).
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
    from benchmarks.harness.model import models  # noqa: PLC0415

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
    run_axes = _optional_axes(data, f"{where}: ")
    settings = {
        name: whole_number(data.get(name, default), f"{where}: {name}", SETTING_MINIMUM[name])
        for name, default in DEFAULT_SETTINGS.items()
    }
    cache_len = None
    if "max_cache_len" in data:
        cache_len = whole_number(data["max_cache_len"], f"{where}: max_cache_len", 1)
    kv_settings = _kv_settings(data, {}, where)
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
        cells.append(_cell(point, settings, cache_len, where, kv_settings))
    cells.extend(
        _includes(
            data.get("include", []),
            settings,
            cache_len,
            where,
            known_models,
            kv_settings=kv_settings,
        )
    )

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
    if kv_settings and not any(cell.kv_quantized for cell in cells):
        raise MatrixError(
            f"{where}: {' and '.join(kv_settings)} configure quantized KV caches, but no cell "
            "has a `kv_quant` other than none; add `kv_quant: [hqq4]` (say) or remove them"
        )
    check_serving(cells, where)
    _check_unique(cells, where)
    return Matrix(
        path=path,
        cells=tuple(cells),
        description=description,
        excluded=excluded,
        measurements=measurements,
        **settings,
    )


def _optional_axes(data: Mapping[str, Any], prefix: str) -> dict[str, list[Any]]:
    """The optional axes `data` names (run modes, then `tp`), validated, in that order: the
    order their parts take in the cell id. `prefix` + the key names the field in errors."""
    found: dict[str, list[Any]] = {
        key: run_mode_axis(data[key], key, f"{prefix}{key}") for key in RUN_MODE_AXES if key in data
    }
    if "tp" in data:
        found["tp"] = tp_axis(data["tp"], f"{prefix}tp")
    found.update(serving_axes(data, prefix))
    return found


def _measurements(raw: Any, where: str) -> tuple[str, ...]:
    allowed = (*MEASUREMENTS, *OPT_IN_MEASUREMENTS)
    if not isinstance(raw, list) or not raw:
        raise MatrixError(
            f"{where}: measurements must be a non-empty list of {', '.join(allowed)}; "
            f"leave the key out to run {', '.join(MEASUREMENTS)} ({', '.join(OPT_IN_MEASUREMENTS)} "
            "only when named)"
        )
    for name in raw:
        if name not in allowed:
            raise MatrixError(
                f"{where}: measurements: unknown measurement {name!r}"
                f"{did_you_mean(str(name), allowed)}; allowed: {', '.join(allowed)}"
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


def _kv_settings(
    data: Mapping[str, Any], inherited: Mapping[str, int], where: str
) -> dict[str, int]:
    """`kv_group_size` / `kv_residual` set here (else `inherited`), each a whole number >= 1."""
    found = dict(inherited)
    for name in KV_QUANT_SETTINGS:
        if name in data:
            found[name] = whole_number(data[name], f"{where}: {name}", 1)
    return found


def _cell(
    point: Mapping[str, Any],
    settings: Mapping[str, int],
    cache_len: int | None,
    where: str,
    kv_settings: Mapping[str, int],
) -> Cell:
    """A cell of `point` (axes) with `settings`; `max_cache_len` is kept on static cells only,
    `kv_group_size` / `kv_residual` on quantized-KV cells only."""
    own_len = cache_len if point.get("cache") == "static" else None
    quantized_kv = point.get("kv_quant") not in (None, "none")
    own_kv = dict(kv_settings) if quantized_kv else {}
    cell = Cell(**point, **settings, max_cache_len=own_len, **own_kv)  # type: ignore[arg-type]
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
    *,
    kv_settings: Mapping[str, int],
) -> Iterable[Cell]:
    if not isinstance(raw, list):
        raise MatrixError(
            f"{where}: include must be a list of whole cells, e.g. `include: [{{model: ..., "
            "device: cpu, dtype: float32, batch: 1, prompt_len: 128, new_tokens: 32}]`"
        )
    allowed = (
        *CELL_AXES,
        *RUN_MODE_AXES,
        "tp",
        *SERVE_AXES,
        *DEFAULT_SETTINGS,
        "max_cache_len",
        *KV_QUANT_SETTINGS,
    )
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
        choices.update(_optional_axes(entry, f"{here}."))
        own = {
            name: whole_number(
                entry.get(name, settings[name]), f"{here}.{name}", SETTING_MINIMUM[name]
            )
            for name in DEFAULT_SETTINGS
        }
        own_len = cache_len
        if "max_cache_len" in entry:
            own_len = whole_number(entry["max_cache_len"], f"{here}.max_cache_len", 1)
        own_kv = _kv_settings(entry, kv_settings, here)
        for values in itertools.product(*choices.values()):
            yield _cell(dict(zip(choices, values, strict=True)), own, own_len, here, own_kv)


def _check_unique(cells: Sequence[Cell], where: str) -> None:
    seen: set[str] = set()
    for cell in cells:
        if cell.id in seen:
            raise MatrixError(
                f"{where}: cell {cell.id!r} appears twice (an include repeats a product cell); "
                "remove the include or exclude the product cell"
            )
        seen.add(cell.id)
