"""Decide what this machine runs of a matrix, and in which order.

* `skip_reason(cell)`: None when the cell can run here, else the reason it is skipped at
  collection (DESIGN §2: never silently dropped): the device is absent, the dtype is not
  supported there, `P + N - 1` positions exceed what the model was built for, or the cell's
  run mode (attention kernel, cache, compile; `runmode.skip_reason`) cannot run here.
* `build_order(cells)`: a rank per cell id such that sorting by it keeps the matrix's order but
  puts all cells of one (model, device, dtype) together, so each model is built once per run.

It deliberately does not load the matrix (`matrix/parse.py`), build models, or know pytest.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.device.devices import (
    device_unavailable_reason,
    dtype_unsupported_reason,
    parse_dtype,
)
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import MODELS_DIR, load_model_spec
from benchmarks.harness.runmode.decide import skip_reason as run_mode_skip_reason


def skip_reason(cell: Cell, models_dir: Path | None = None) -> str | None:
    """Why this machine cannot run `cell` (a one-line pytest skip reason), or None."""
    reason = device_unavailable_reason(cell.device)
    if reason is None:
        reason = dtype_unsupported_reason(cell.device, parse_dtype(cell.dtype))
        if reason is not None:
            reason = f"{cell.dtype} unsupported on {cell.device}: {reason}"
    directory = MODELS_DIR if models_dir is None else models_dir
    if reason is None:
        limit = max_positions(cell.model, directory)
        positions = cell.cache_positions or cell.final_positions
        if limit is not None and positions > limit:
            what = "max_cache_len" if cell.max_cache_len else "P + N - 1"
            reason = (
                f"{what} = {positions} positions exceed {cell.model}'s "
                f"{limit} (max_position_embeddings)"
            )
    if reason is None:
        reason = run_mode_skip_reason(cell, directory)
    return reason


@functools.cache
def max_positions(model: str, models_dir: Path) -> int | None:
    """The model's position limit (None: unbounded), read once per model file."""
    return load_model_spec(model, models_dir).max_positions()


def build_order(cells: Sequence[Cell]) -> dict[str, tuple[int, int]]:
    """Rank each cell id by (first appearance of its build key, its own position).

    Sorting the run by this rank is stable with respect to the matrix and groups every
    (model, device, dtype) together, so a model is built once and released once.
    """
    first_seen: dict[tuple[str, ...], int] = {}
    for cell in cells:
        first_seen.setdefault(cell.build_key, len(first_seen))
    return {cell.id: (first_seen[cell.build_key], index) for index, cell in enumerate(cells)}
