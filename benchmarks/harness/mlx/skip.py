"""Why an `engine: mlx` cell cannot run here: the collection-time reason (DESIGN §2, §14).

In order: mlx / mlx-lm missing (with the command that installs them); a torch-only setting on
the cell (`attention`, `cache`, `compile`, a torch `quant` or `kv_quant`, `kv_residual`,
`tp` > 1); the device (MLX runs on `mps` through Metal and on `cpu`); a calibration slowdown
(it wraps torch models only); the model: a type mlx-lm lacks, a config its `ModelArgs` cannot
read, a cache `kvplan` cannot predict, P + N - 1 beyond the model's positions; a quantized cache
on attention not verified with it, or whose head dims the group size does not divide.

It deliberately builds no model: mlx-lm's classes are only looked up and their args parsed.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch

from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.mlx.available import unavailable_reason
from benchmarks.harness.mlx.build import mlx_config, model_classes
from benchmarks.harness.mlx.kvplan import (
    KV_BITS,
    QUANTIZED_ATTENTION,
    mlx_model_type,
    plan_layers,
)
from benchmarks.harness.mlx.runtime import device_reason
from benchmarks.harness.mlx.weights import QUANT_BITS
from benchmarks.harness.model.models import load_model_spec

CALIBRATION_ENV = "PHASEBENCH_CALIBRATION_SLOWDOWN"  # benchmarks.calibration.slowdown.ENV_VAR
# mx.quantize's group sizes.
GROUP_SIZES = (32, 64, 128)


def skip_reason(cell: Cell, models_dir: Path) -> str | None:
    """Why this machine cannot run the MLX cell (one line), or None."""
    return (
        unavailable_reason()
        or torch_setting_reason(cell)
        or device_reason(cell.device)
        or _calibration_reason()
        or _model_reason(cell, models_dir)
    )


def torch_setting_reason(cell: Cell) -> str | None:
    """A setting of the cell that only the torch engine has, or None."""
    named = [axis for axis in ("attention", "cache", "compile") if getattr(cell, axis) is not None]
    if named:
        return (
            f"{', '.join(named)} configure transformers: an MLX cell runs mlx-lm's own attention "
            "and cache; leave them out of `engine: mlx` cells (an `exclude:` rule)"
        )
    if cell.weight_quant not in ("none", *QUANT_BITS):
        return f"quant {cell.weight_quant} is a torch method; MLX cells take mlx4 or mlx8"
    if cell.kv_quantized and cell.kv_quant not in KV_BITS:
        return f"kv_quant {cell.kv_quant} is a torch cache; MLX cells take mlx4 or mlx8"
    if cell.kv_residual is not None:
        return "kv_residual: mlx-lm's QuantizedKVCache has no full-precision residual window"
    if cell.tp_size > 1:
        return "tensor parallel (tp) runs on torch.distributed; MLX cells run on one device"
    return None


def _calibration_reason() -> str | None:
    if os.environ.get(CALIBRATION_ENV, "") not in ("", "0"):
        return f"{CALIBRATION_ENV} slows torch models only; calibrate with torch cells"
    return None


def _model_reason(cell: Cell, models_dir: Path) -> str | None:
    try:
        reason = _model_type_reason(cell.model, models_dir)
        if reason is None and cell.kv_quant in KV_BITS:
            reason = _kv_quant_reason(cell, models_dir)
        if reason is None:
            reason = _layout_reason(cell, models_dir)
    except PhasebenchError as error:
        return str(error)
    return reason


@functools.cache
def _model_type_reason(model: str, models_dir: Path) -> str | None:
    """mlx-lm's model lookup and argument parsing for the model file, once per run."""
    spec = load_model_spec(model, models_dir)
    config = mlx_config(spec)
    model_class, args_class = model_classes(config)
    try:
        args_class.from_dict(config)
    except Exception as error:  # mlx-lm's dataclasses raise TypeError / ValueError / KeyError
        return (
            f"mlx-lm's {mlx_model_type(config)} cannot read this config ({error}); add the "
            f"field to {spec.path or model}"
        )
    del model_class
    return None


def _layout_reason(cell: Cell, models_dir: Path) -> str | None:
    spec = load_model_spec(cell.model, models_dir)
    limit = spec.max_positions()
    if limit is not None and cell.final_positions > limit:
        return f"P + N - 1 = {cell.final_positions} positions exceed {cell.model}'s {limit}"
    config = mlx_config(spec)
    model_class, _ = model_classes(config)
    plan_layers(
        config,
        spec.hf_config(),
        dtype=torch.float32,
        batch=cell.batch,
        own_make_cache=hasattr(model_class, "make_cache"),
        kv_quant=cell.kv_quant,
        kv_group_size=cell.kv_group,
    )
    return None


def _kv_quant_reason(cell: Cell, models_dir: Path) -> str | None:
    spec = load_model_spec(cell.model, models_dir)
    model_type = mlx_model_type(mlx_config(spec))
    if model_type not in QUANTIZED_ATTENTION:
        return (
            f"kv_quant {cell.kv_quant}: mlx-lm's {model_type} attention is not verified with a "
            f"QuantizedKVCache by phasebench (verified: {', '.join(sorted(QUANTIZED_ATTENTION))})"
        )
    group = cell.kv_group
    if group not in GROUP_SIZES:
        return f"kv_group_size {group}: mx.quantize takes {', '.join(map(str, GROUP_SIZES))}"
    from benchmarks.harness.cache.kv import analytic_kv  # noqa: PLC0415 - shapes only

    dims = {
        dim
        for layer in analytic_kv(spec.hf_config(), dtype=torch.float32, batch=1, seq_len=1).layers
        for dim in (layer.k_shape[-1:] + layer.v_shape[-1:])
    }
    bad = sorted(d for d in dims if d % group)
    if bad:
        return (
            f"kv_quant {cell.kv_quant}: head dim {bad[0]} is not a multiple of kv_group_size "
            f"{group}; set a `kv_group_size` that divides it (32, 64 or 128) in the matrix"
        )
    return None
