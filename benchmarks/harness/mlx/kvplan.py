"""Which mlx-lm cache each decoder layer gets, from the config: the MLX side of DESIGN §4.

mlx-lm builds a model's cache with the model's own `make_cache()` where it has one, else one
`KVCache` per layer (`make_prompt_cache`). `plan_layers` predicts that list from the config and
mlx-lm's model type alone (the rules of the model files named in `_SLIDING_RULES`); a model type
whose class has its own `make_cache` without a rule here is refused (`KVError`), never guessed.
A `kv_quant` of `mlx4` / `mlx8` makes every layer a `QuantizedKVCache` (mlx-lm's `--kv-bits`;
its `RotatingKVCache` has no quantized form, so sliding layers refuse it).

Each layer's K/V widths (heads, head dims) come from `benchmarks.harness.cache.kv`, the same
config reading the torch side uses: the architecture is one, only the cache differs. Where mlx-lm
ignores a sliding window transformers applies (it caches and attends every position there),
`window_notes` says so: MLX then runs other attention than torch on those layers.

It deliberately imports no mlx (`skip.py` decides whether mlx-lm's class has `make_cache`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.harness.cache.kv import analytic_kv, element_bytes
from benchmarks.harness.errors import KVError
from benchmarks.harness.mlx.kvrules import LayerShape, QuantizedStepKV, RotatingKV, StepKV

# mlx-lm's MODEL_REMAPPING for the types phasebench runs (mlx_lm/utils.py).
REMAPPED = {"mistral": "llama"}
# kv_quant value -> bits of mlx-lm's QuantizedKVCache.
KV_BITS = {"mlx4": 4, "mlx8": 8}
# Model types whose attention takes a QuantizedKVCache (`base.scaled_dot_product_attention`),
# checked by tests/harness/mlx: other types are refused rather than assumed to.
QUANTIZED_ATTENTION = frozenset({"llama", "qwen2", "qwen3", "phi3", "gemma3_text"})


@dataclass(frozen=True)
class LayerPlan:
    """One layer's cache: mlx-lm's class name and its window (`RotatingKVCache` only)."""

    kind: str  # KVCache | RotatingKVCache | QuantizedKVCache
    shape: LayerShape
    max_size: int | None = None  # RotatingKVCache's window
    keep: int = 0
    bits: int | None = None  # QuantizedKVCache's kv_bits and group size
    group_size: int = 64

    def empty(self) -> StepKV:
        """The arithmetic twin of mlx-lm's new, empty cache for this layer (`kvrules`)."""
        if self.max_size is not None:
            return RotatingKV(self.shape, max_size=self.max_size, keep=self.keep)
        if self.bits is not None:
            return QuantizedStepKV(self.shape, bits=self.bits, group_size=self.group_size)
        return StepKV(self.shape)


def mlx_model_type(config: Mapping[str, Any]) -> str:
    """The mlx-lm module a config's `model_type` loads (`mistral` runs as `llama`)."""
    model_type = str(config.get("model_type", ""))
    return REMAPPED.get(model_type, model_type)


def _llama_windows(config: Mapping[str, Any], layers: int) -> list[int | None]:
    # llama.py `make_cache`: RotatingKVCache(max_size=sliding_window) on `sliding_attention`
    # entries of `layer_types` (absent: every layer full).
    types = config.get("layer_types") or ["full_attention"] * layers
    window = config.get("sliding_window")
    return [window if t == "sliding_attention" else None for t in types]


def _gemma3_windows(config: Mapping[str, Any], layers: int) -> list[int | None]:
    # gemma3_text.py `make_cache`: KVCache on every `sliding_window_pattern`-th layer (ModelArgs
    # default 6), RotatingKVCache(max_size=sliding_window, default 512) on the others.
    pattern = int(config.get("sliding_window_pattern") or 6)
    window = int(config.get("sliding_window") or 512)
    return [None if i % pattern == pattern - 1 else window for i in range(layers)]


# Model types whose mlx-lm class has its own `make_cache`, with the rule it follows.
_SLIDING_RULES: Mapping[str, Callable[[Mapping[str, Any], int], list[int | None]]] = {
    "llama": _llama_windows,
    "gemma3_text": _gemma3_windows,
}


def has_rule(model_type: str) -> bool:
    """Whether `plan_layers` knows the `make_cache` of this (mlx-lm) model type."""
    return model_type in _SLIDING_RULES


def plan_layers(
    config: Mapping[str, Any],
    hf_config: Any,
    *,
    dtype: torch.dtype,
    batch: int,
    own_make_cache: bool,
    kv_quant: str | None = None,
    kv_group_size: int = 64,
) -> list[LayerPlan]:
    """The cache mlx-lm makes for each layer of `config` (the dict mlx-lm reads; `hf_config` the
    same as a transformers config). `own_make_cache`: mlx-lm's class defines `make_cache`."""
    model_type = mlx_model_type(config)
    shapes = _layer_shapes(hf_config, dtype=dtype, batch=batch)
    if own_make_cache and not has_rule(model_type):
        raise KVError(
            f"mlx-lm's {model_type} builds its own cache (make_cache) and phasebench has no rule "
            "for it; add one to benchmarks/harness/mlx/kvplan.py with a test"
        )
    windows = (
        _SLIDING_RULES[model_type](config, len(shapes)) if own_make_cache else [None] * len(shapes)
    )
    if len(windows) != len(shapes):
        raise KVError(
            f"config {model_type}: `layer_types` has {len(windows)} entries for "
            f"{len(shapes)} layers; make them agree"
        )
    bits = KV_BITS.get(kv_quant or "")
    if bits is not None and any(w is not None for w in windows):
        raise KVError(
            f"kv_quant {kv_quant}: mlx-lm's RotatingKVCache (the sliding layers of "
            f"{model_type}) has no quantized form; run this model without kv_quant"
        )
    kind = "KVCache" if bits is None else "QuantizedKVCache"
    return [
        LayerPlan("RotatingKVCache", shape, max_size=window)
        if window is not None
        else LayerPlan(kind, shape, bits=bits, group_size=kv_group_size)
        for shape, window in zip(shapes, windows, strict=True)
    ]


def _layer_shapes(hf_config: Any, *, dtype: torch.dtype, batch: int) -> list[LayerShape]:
    layers = analytic_kv(hf_config, dtype=dtype, batch=batch, seq_len=1).layers
    shapes = []
    for layer in layers:
        if not layer.k_shape:
            raise KVError(
                f"layer {layer.index} is `{layer.kind}` (no K/V of its own): phasebench has no "
                "mlx-lm cache rule for it"
            )
        shapes.append(
            LayerShape(
                batch=batch,
                kv_heads=layer.k_shape[1],
                k_dim=layer.k_shape[3],
                v_dim=layer.v_shape[3],
                element_bytes=element_bytes(dtype),
            )
        )
    return shapes


def window_notes(plans: list[LayerPlan], hf_config: Any) -> list[str]:
    """Layers transformers runs with a sliding window where mlx-lm caches every position."""
    torch_layers = analytic_kv(hf_config, dtype=torch.float32, batch=1, seq_len=1).layers
    ignored = [
        str(layer.index)
        for layer, plan in zip(torch_layers, plans, strict=True)
        if layer.kind == "sliding_attention" and plan.kind != "RotatingKVCache"
    ]
    if not ignored:
        return []
    return [
        f"mlx-lm ignores the sliding window of layer(s) {', '.join(ignored)}: it caches and "
        "attends every position there, where transformers keeps a window"
    ]
