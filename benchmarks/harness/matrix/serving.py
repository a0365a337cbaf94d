"""The serving axes of a matrix (DESIGN §13): their values, their validation, their id parts.

`serve` (`transformers`: `transformers serve` started per cell; `vllm`: `vllm serve`; `url`: an
existing server, `--serve-url`), `continuous_batching` (true/false), `request_rate` (requests
per second, `inf` = all at once, `sla` = search the highest rate that meets the SLOs),
`burstiness` (gamma shape of the arrival gaps: 1 is Poisson), `max_concurrency`, `num_prompts`
(requests per load pass), the SLOs `slo_ttft_ms`, `slo_tpot_ms`, `slo_e2el_ms` (goodput counts
the requests meeting them), `sla_share` (the share of requests a capacity probe must bring
within every SLO, 0.9 when not named), and the workload: `range_ratio` (each request's P and N
drawn uniformly from [X(1-r), X(1+r)], vLLM's `--random-range-ratio`), `prefix_len` (the first
tokens every request of a pass shares: what prefix caching serves) and `dataset` (a JSON Lines
file of prompts or prompt lengths with output lengths, `matrix/datasets/`, read by
`dataset.read_dataset`). Each is optional and joins the cell id
(`-serve_transformers-cb_on-rate_4-conc_8-np_32-slo_ttft_500ms`) and the flat `params` only
when the matrix names it. Refused: a serving axis without `serve`, a serving cell with `batch`
other than 1 (each request carries one prompt; concurrency is `max_concurrency`), `sla` without
an SLO, `sla_share` without `sla`, a prefix as long as the prompt, a dataset with `range_ratio`.

It deliberately imports neither torch nor transformers: a broken matrix fails in milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.errors import MatrixError
from benchmarks.harness.matrix.dataset import read_dataset

SERVERS = ("transformers", "vllm", "url")
SERVE_AXES = (
    "serve",
    "continuous_batching",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "num_prompts",
    "slo_ttft_ms",
    "slo_tpot_ms",
    "slo_e2el_ms",
    # Added after the first serving pass: appended, so the ids of earlier cells stay as they were.
    "sla_share",
    "range_ratio",
    "prefix_len",
    "dataset",
)
#: `request_rate: sla`: the cell searches its capacity within the SLOs (DESIGN §13).
SLA = "sla"
DEFAULT_SLA_SHARE = 0.9
# How each axis appears in the cell id.
_ID_PREFIX = {
    "serve": "serve_",
    "continuous_batching": "cb_",
    "request_rate": "rate_",
    "burstiness": "burst_",
    "max_concurrency": "conc_",
    "num_prompts": "np_",
    "slo_ttft_ms": "slo_ttft_",
    "slo_tpot_ms": "slo_tpot_",
    "slo_e2el_ms": "slo_e2el_",
    "sla_share": "share_",
    "range_ratio": "rr_",
    "prefix_len": "prefix_",
    "dataset": "ds_",
}


def _server(value: Any, where: str) -> str:
    if value not in SERVERS:
        raise MatrixError(f"{where}: unknown serve {value!r}; use one of {', '.join(SERVERS)}")
    return str(value)


def _switch(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise MatrixError(f"{where}: {value!r} is not valid; use true or false")
    return value


def _positive(value: Any, where: str, *, allow_inf: bool = False, whole: bool = False) -> Any:
    if allow_inf and isinstance(value, str) and value.strip().lower() in ("inf", ".inf"):
        return math.inf
    number_ok = isinstance(value, int | float) and not isinstance(value, bool)
    if whole and number_ok and not isinstance(value, int):
        number_ok = False
    if not number_ok or math.isnan(value) or value <= 0 or (math.isinf(value) and not allow_inf):
        kind = "a whole number > 0" if whole else "a number > 0"
        extra = " or inf" if allow_inf else ""
        raise MatrixError(f"{where}: {value!r} is not valid; use {kind}{extra}")
    return value if whole else float(value)


def _rate(value: Any, where: str) -> Any:
    if isinstance(value, str) and value.strip().lower() == SLA:
        return SLA
    try:
        return _positive(value, where, allow_inf=True)
    except MatrixError:
        raise MatrixError(
            f"{where}: {value!r} is not valid; use requests per second > 0, inf, or sla (search "
            "the highest rate that meets the SLOs)"
        ) from None


def _fraction(value: Any, where: str, *, low: float, low_open: bool) -> float:
    number_ok = isinstance(value, int | float) and not isinstance(value, bool)
    below = number_ok and (value <= low if low_open else value < low)
    if not number_ok or math.isnan(value) or below or value >= 1:
        kind = f"{'>' if low_open else '>='} {low:g} and < 1"
        raise MatrixError(f"{where}: {value!r} is not valid; use a fraction {kind}")
    return float(value)


def _dataset(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise MatrixError(f"{where}: {value!r} is not valid; use the path of a .jsonl file")
    return value


_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "serve": _server,
    "continuous_batching": _switch,
    "request_rate": _rate,
    "burstiness": _positive,
    "max_concurrency": lambda v, w: _positive(v, w, whole=True),
    "num_prompts": lambda v, w: _positive(v, w, whole=True),
    "slo_ttft_ms": _positive,
    "slo_tpot_ms": _positive,
    "slo_e2el_ms": _positive,
    "sla_share": lambda v, w: _fraction(v, w, low=0.0, low_open=True),
    "range_ratio": lambda v, w: _fraction(v, w, low=0.0, low_open=False),
    "prefix_len": lambda v, w: _positive(v, w, whole=True),
    "dataset": _dataset,
}


def serving_axes(data: Mapping[str, Any], prefix: str) -> dict[str, list[Any]]:
    """The serving axes `data` names, validated, in id order; MatrixError names the fix."""
    found: dict[str, list[Any]] = {}
    for axis in SERVE_AXES:
        if axis not in data:
            continue
        raw = data[axis]
        values = raw if isinstance(raw, list) else [raw]
        if not values:
            raise MatrixError(f"{prefix}{axis}: the axis is empty; list at least one value")
        checked: list[Any] = []
        for index, raw_value in enumerate(values):
            value = _CHECKS[axis](raw_value, f"{prefix}{axis}[{index}]")
            if value in checked:
                raise MatrixError(
                    f"{prefix}{axis}[{index}]: {value!r} is listed twice, which would make "
                    "duplicate cell ids; remove one"
                )
            checked.append(value)
        found[axis] = checked
    return found


def _number_text(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:g}"


def id_parts(cell: Any) -> list[str]:
    """The cell id's serving parts (module docstring), each only for an axis the cell has."""
    parts = []
    for axis in SERVE_AXES:
        value = getattr(cell, axis)
        if value is None:
            continue
        if isinstance(value, bool):
            text = "on" if value else "off"
        elif axis == "dataset":
            text = _dataset_id(str(value))
        elif isinstance(value, float):
            text = _number_text(value) + ("ms" if axis.endswith("_ms") else "")
        else:
            text = str(value)
        parts.append(f"{_ID_PREFIX[axis]}{text}")
    return parts


def _dataset_id(path: str) -> str:
    """A dataset's id part: its file name without the suffix, ids' characters only."""
    stem = path.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".jsonl")
    return "".join(c if c.isalnum() or c in "._" else "_" for c in stem) or "dataset"


def params_value(value: Any) -> Any:
    """A serving axis value as plain JSON (`inf` as the string "inf": JSON has no infinity)."""
    return "inf" if isinstance(value, float) and math.isinf(value) else value


def check_serving(cells: Sequence[Any], where: str) -> None:
    """A serving axis without `serve`, or a serving cell with batch != 1: MatrixError."""
    for cell in cells:
        named = [axis for axis in SERVE_AXES[1:] if getattr(cell, axis) is not None]
        if cell.serve is None and named:
            raise MatrixError(
                f"{where}: cell {cell.id}: {', '.join(named)} apply to serving cells only; add "
                "`serve: [transformers]` (or vllm, url) or remove them"
            )
        if cell.serve is not None and cell.batch != 1:
            raise MatrixError(
                f"{where}: cell {cell.id}: a serving cell sends one prompt per request; set "
                "`batch: [1]` and load the server with max_concurrency"
            )
        if cell.serve is not None:
            _check_load(cell, where)


def _check_load(cell: Any, where: str) -> None:
    """The capacity search's and the workload's own rules (module docstring)."""
    slos = (cell.slo_ttft_ms, cell.slo_tpot_ms, cell.slo_e2el_ms)
    if cell.request_rate == SLA and all(v is None for v in slos):
        raise MatrixError(
            f"{where}: cell {cell.id}: request_rate sla searches the highest rate that meets the "
            "SLOs, and the cell has none; add slo_ttft_ms, slo_tpot_ms or slo_e2el_ms"
        )
    if cell.sla_share is not None and cell.request_rate != SLA:
        raise MatrixError(
            f"{where}: cell {cell.id}: sla_share applies to `request_rate: sla` cells only; add "
            "sla to request_rate or remove sla_share"
        )
    if cell.prefix_len is not None and cell.prefix_len >= cell.prompt_len:
        raise MatrixError(
            f"{where}: cell {cell.id}: prefix_len {cell.prefix_len} leaves no prompt of its own "
            f"(P = {cell.prompt_len}); use a prefix_len below prompt_len"
        )
    if cell.dataset is not None:
        if cell.range_ratio is not None or cell.prefix_len:
            raise MatrixError(
                f"{where}: cell {cell.id}: a dataset gives each request its own lengths; "
                "remove range_ratio and prefix_len from its cells"
            )
        try:
            read_dataset(Path(cell.dataset))  # a broken file fails the matrix, naming its line
        except MatrixError as error:
            raise MatrixError(f"{where}: cell {cell.id}: {error}") from None
