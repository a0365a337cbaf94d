"""Validation of a matrix file's values and `exclude:` rules (DESIGN §2), for `matrix/parse.py`.

Each function checks one kind of value (model name, device, dtype, whole number, an exclude
rule) and raises `MatrixError` whose one sentence names the file, the field and the fix, with
the closest valid spelling when there is one. `parse.py` expands the validated axes into cells.

It deliberately knows nothing of cells, settings or the product, and imports neither torch nor
transformers.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from benchmarks.harness.errors import MatrixError

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


def check_keys(data: Mapping[Any, Any], allowed: Sequence[str], *, where: str, what: str) -> None:
    for key in data:
        if key not in allowed:
            raise MatrixError(
                f"{where}: unknown {what} {key!r}{did_you_mean(str(key), allowed)}; "
                f"allowed: {', '.join(allowed)}"
            )


def axis_example(key: str) -> str:
    return {
        "models": "qwen2.5-0.5b",
        "devices": "cpu",
        "dtypes": "float32",
        "batch": "1",
        "prompt_len": "512",
        "new_tokens": "32",
    }[key]


def axis_value(field: str, value: Any, where: str, known_models: Sequence[str]) -> str | int:
    """Validate one axis value for cell field `field`; returns it unchanged when valid."""
    checks: dict[str, Callable[[Any, str], str | int]] = {
        "model": lambda v, w: _model(v, w, known_models),
        "device": _device,
        "dtype": _dtype,
    }
    if field in checks:
        return checks[field](value, where)
    return whole_number(value, where, 1)


def _model(value: Any, where: str, known_models: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in known_models:
        listing = ", ".join(sorted(known_models)) or "none"
        raise MatrixError(
            f"{where}: unknown model {value!r}{did_you_mean(str(value), known_models)}; "
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
        hint = did_you_mean(str(value), DTYPES)
        raise MatrixError(f"{where}: unknown dtype {value!r}{hint}; use one of {', '.join(DTYPES)}")
    return value


def whole_number(value: Any, where: str, minimum: int) -> int:
    # YAML `true` is an int subclass in Python; a boolean is never a count.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        bound = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise MatrixError(f"{where}: {value!r} is not valid; use {bound}")
    return value


def parse_excludes(
    raw: Any, axes: Mapping[str, Sequence[Any]], where: str
) -> list[dict[str, tuple[Any, ...]]]:
    if not isinstance(raw, list):
        raise MatrixError(
            f"{where}: exclude must be a list of partial cells, e.g. "
            "`exclude: [{model: llama-3.1-8b, batch: 8}]`"
        )
    by_field = {AXES.get(key, key): values for key, values in axes.items()}
    rules: list[dict[str, tuple[Any, ...]]] = []
    for index, entry in enumerate(raw):
        here = f"{where}: exclude[{index}]"
        if not isinstance(entry, Mapping) or not entry:
            raise MatrixError(
                f"{here}: expected a non-empty mapping of axis values, e.g. "
                "`{model: llama-3.1-8b, batch: 8}`"
            )
        check_keys(entry, tuple(by_field), where=here, what="axis")
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


def matches(rule: Mapping[str, tuple[Any, ...]], point: Mapping[str, Any]) -> bool:
    # A point without a rule's axis (an include without run-mode axes) never matches it.
    return all(field in point and point[field] in values for field, values in rule.items())


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
