"""Decide what this machine runs of a matrix, and in which order.

* `skip_reason(cell)`: None when the cell can run here, else the reason it is skipped at
  collection (DESIGN §2: never silently dropped): the device is absent, the dtype is not
  supported there, `P + N - 1` positions exceed what the model was built for, the cell's
  run mode (attention kernel, cache, compile; `runmode.skip_reason`) cannot run here, or the
  cell would not fit in the device's free memory (`fit_reason`: weights + KV at P + N - 1 +
  the prefill's activations, `roofline.fit`, against `device.freemem`), decided before any
  model is built. `PHASEBENCH_IGNORE_FIT=1` turns the memory check off.
* `build_order(cells)`: a rank per cell id such that sorting by it keeps the matrix's order but
  puts all cells of one (model, device, dtype) together, so each model is built once per run.

It deliberately does not load the matrix (`matrix/parse.py`), build models, or know pytest.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from benchmarks.harness.cache.kv import KVLayout, analytic_kv
from benchmarks.harness.cache.state import analytic_state
from benchmarks.harness.device.devices import (
    device_unavailable_reason,
    dtype_unsupported_reason,
    parse_dtype,
)
from benchmarks.harness.device.freemem import FreeMemory, free_memory
from benchmarks.harness.errors import KVError, PhasebenchError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import MODELS_DIR, load_model_spec
from benchmarks.harness.quant.methods import quant_timing_reason
from benchmarks.harness.roofline.fit import (
    FitEstimate,
    ModelFacts,
    Prefill,
    activation_bytes,
    fit_reason,
    model_facts,
    notes_for,
)
from benchmarks.harness.roofline.flops import UnsupportedArchitectureError
from benchmarks.harness.runmode.decide import skip_reason as run_mode_skip_reason
from benchmarks.harness.runmode.kvlayout import analytic_layout

IGNORE_FIT_ENV = "PHASEBENCH_IGNORE_FIT"


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
        # The method must run here, and run its own kernel (not a fallback a timing would hide).
        reason = quant_timing_reason(cell.weight_quant, cell.device, parse_dtype(cell.dtype))
    if reason is None:
        reason = run_mode_skip_reason(cell, directory)
    # A tp > 1 cell spreads its model over its ranks: the whole model against one device would
    # skip every model TP is for. Its per-rank fit is the suite's (`benchmarks/suite/tp/cells.py`).
    if reason is None and cell.tp_size == 1:
        reason = memory_fit_reason(cell, directory)
    return reason


def memory_fit_reason(
    cell: Cell,
    models_dir: Path | None = None,
    free: Callable[[str], FreeMemory] = free_memory,
) -> str | None:
    """Why `cell` would not fit in its device's free memory now, or None (also when unknown,
    or when `PHASEBENCH_IGNORE_FIT` is set to anything but 0)."""
    if os.environ.get(IGNORE_FIT_ENV, "0") not in ("", "0"):
        return None
    try:
        estimate = fit_estimate(cell, MODELS_DIR if models_dir is None else models_dir)
    except PhasebenchError:
        raise  # a broken model file: the user's error, named at collection
    except Exception:  # any other failure: the cell's own build reports it, recorded per cell
        return None  # a model that cannot even be built on meta is not skipped for its size
    return fit_reason(estimate, free(cell.device), f"{IGNORE_FIT_ENV}=1")


def fit_estimate(cell: Cell, models_dir: Path) -> FitEstimate:
    """Weights, cache and activation bytes of `cell` (`roofline.fit`), from its config alone."""
    dtype = parse_dtype(cell.dtype)
    device_type = torch.device(cell.device).type
    facts = _model_facts(cell.model, models_dir, cell.dtype, cell.weight_quant, device_type)
    positions = cell.cache_positions or cell.final_positions
    errors: list[tuple[str, Exception]] = []
    cache_bytes: int | None = None
    largest_layer_bytes = 0
    try:
        layout = analytic_layout(cell, facts.config, dtype=dtype, seq_len=cell.final_positions)
        state = analytic_state(facts.config, dtype=dtype, batch=cell.batch)
        cache_bytes = layout.total_bytes + state.total_bytes
        if cell.cache_positions is None:
            # A quantized cache dequantizes a layer's whole prefix each step: the transient
            # copy is the dense layer's, not its packed bytes.
            dense = analytic_kv(facts.config, dtype=dtype, batch=cell.batch, seq_len=1)
            copied = dense if cell.kv_quantized else layout
            largest_layer_bytes = _largest_layer_copy(copied, cell.final_positions)
    except KVError as error:
        errors.append(("KV", error))
    activations: int | None = None
    try:
        activations = activation_bytes(
            facts.config,
            Prefill(
                batch=cell.batch,
                prompt_len=cell.prompt_len,
                dtype=dtype,
                attention=cell.attention or facts.attention,
                device_type=torch.device(cell.device).type,
                limits_logits=facts.limits_logits,
                cache_layer_bytes=largest_layer_bytes,
            ),
        )
    except UnsupportedArchitectureError as error:
        errors.append(("activations", error))
    return FitEstimate(
        weights_bytes=facts.weights_bytes,
        cache_bytes=cache_bytes,
        cache_positions=positions,
        batch=cell.batch,
        activation_bytes=activations,
        notes=notes_for(errors),
    )


def _largest_layer_copy(layout: KVLayout, positions: int) -> int:
    """One layer's K/V at `positions`, windows ignored: a dynamic cache grows by `torch.cat`, and
    a sliding layer's prefill keeps a view of the whole prompt's storage (FACTS §0.3)."""
    per_position = (
        layer.bytes // layer.k_shape[2] for layer in layout.layers if layer.bytes and layer.k_shape
    )
    return max(per_position, default=0) * positions


@functools.cache
def _model_facts(
    model: str, models_dir: Path, dtype: str, quant: str, device_type: str
) -> ModelFacts:
    """Built on the meta device once per model file, dtype and weight quantization (seconds for
    an 8B model)."""
    return model_facts(load_model_spec(model, models_dir), parse_dtype(dtype), quant, device_type)


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
