"""The run-mode axes of a matrix (DESIGN §9): their names, allowed values and validation.

`attention` (the `attn_implementation` a model is built with), `cache` (transformers'
`DynamicCache` or `StaticCache`), `compile` (`torch.compile` mode of the model's forward, or
`none`), `quant` (how the Linear weights are stored) and `kv_quant` (how the KV cache is), and
`tp` (tensor-parallel ranks, `tp_axis`: 1, 2, 4 or 8), and `engine` (`torch`, the default, or `mlx`:
mlx-lm's model classes, DESIGN §14). A matrix
names any of them optionally; `matrix/parse.py` expands them into cells. Whether
*this machine* can run a value (flash-attn installed, CUDA present, the model type supports it)
is decided at collection by `runmode.skip_reason`.

It deliberately imports neither torch nor transformers: a broken matrix fails in milliseconds.
"""

from __future__ import annotations

import difflib
from typing import Any

from benchmarks.harness.errors import MatrixError
from benchmarks.harness.quant.names import METHODS as QUANT_METHODS

RUN_MODE_VALUES: dict[str, tuple[str, ...]] = {
    "attention": ("sdpa", "eager", "flex_attention", "flash_attention_2"),
    "cache": ("dynamic", "static"),
    "compile": ("none", "default", "reduce-overhead", "max-autotune"),
    # Weight quantization (DESIGN-quant, docs/quantization.md): torchao's weight-only int8,
    # dynamic-activation int8, int4 weight-only per group size, fp8 weight-only / dynamic
    # activation; bitsandbytes' NF4 and LLM.int8. Embeddings and the LM head stay dense.
    # `mlx4` / `mlx8`: mlx's affine quantization in groups of 64, MLX cells only (DESIGN §14).
    "quant": (*QUANT_METHODS, "mlx4", "mlx8"),
    # KV-cache quantization: transformers' QuantizedCache with the fp8, HQQ or quanto backend.
    # `mlx4` / `mlx8`: mlx-lm's QuantizedKVCache (affine, `kv_group_size`), MLX cells only.
    "kv_quant": ("none", "fp8", "hqq2", "hqq4", "hqq8", "quanto2", "quanto4", "mlx4", "mlx8"),
    # Which stack runs the model (DESIGN §14): torch (transformers) or mlx (mlx-lm). Last, so
    # `-engine_mlx` ends the run-mode part of an id; `torch`, the default, never joins an id.
    "engine": ("torch", "mlx"),
}
DEFAULT_ENGINE = "torch"
# Values of the axes above that only the MLX engine runs (a torch cell naming one is skipped).
MLX_ONLY_VALUES: dict[str, tuple[str, ...]] = {
    "quant": ("mlx4", "mlx8"),
    "kv_quant": ("mlx4", "mlx8"),
}
RUN_MODE_AXES = tuple(RUN_MODE_VALUES)
# Tensor parallelism (issue 32, docs/tensor-parallel.md): ranks the cell runs on, one per device.
# A whole number, unlike the run-mode axes; 1 is the single-device path. Powers of two only:
# the plans split heads evenly and the common GPU boxes hold 2, 4 or 8.
TP_VALUES = (1, 2, 4, 8)


def _add_once(checked: list[Any], value: Any, where: str) -> None:
    """Append `value`; a value listed twice would make duplicate cell ids."""
    if value in checked:
        raise MatrixError(
            f"{where}: {value!r} is listed twice, which would make duplicate cell ids; remove one"
        )
    checked.append(value)


def tp_axis(raw: Any, where: str) -> list[int]:
    """Validate the `tp` axis (a value or a list of values); MatrixError names the fix."""
    values = raw if isinstance(raw, list) else [raw]
    allowed = ", ".join(str(v) for v in TP_VALUES)
    if not values:
        raise MatrixError(f"{where}: the axis is empty; list at least one of {allowed}")
    checked: list[int] = []
    for index, value in enumerate(values):
        # YAML `true` is an int in Python: a boolean is never a rank count.
        if isinstance(value, bool) or not isinstance(value, int) or value not in TP_VALUES:
            raise MatrixError(
                f"{where}[{index}]: tp {value!r} is not valid; use one of {allowed} "
                "(ranks, one per device)"
            )
        _add_once(checked, value, f"{where}[{index}]")
    return checked


def run_mode_axis(raw: Any, axis: str, where: str) -> list[str]:
    """Validate one run-mode axis (a value or a list of values); MatrixError names the fix."""
    allowed = RUN_MODE_VALUES[axis]
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise MatrixError(f"{where}: the axis is empty; list at least one of {', '.join(allowed)}")
    checked: list[str] = []
    for index, value in enumerate(values):
        if not isinstance(value, str) or value not in allowed:
            close = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise MatrixError(
                f"{where}[{index}]: unknown {axis} {value!r}{hint}; use one of {', '.join(allowed)}"
            )
        _add_once(checked, value, f"{where}[{index}]")
    return checked
