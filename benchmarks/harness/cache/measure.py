"""The measured side of KV accounting: the bytes a cache object really holds.

`measure_kv(cache)` walks a transformers cache (dynamic, static, sliding, hybrid, quantized,
the legacy tuple form, or None) and sums its K/V tensors; `kv.analytic_kv` (or, for a quantized
cache, `kvquant.kvbytes.analytic_quantized_kv`) is what it must equal. Recurrent and conv state of
linear-attention and Mamba layers is counted apart (`state_bytes`).

A quantized layer counts every tensor it stores (`stored_tensors`): fp8's data and float32
scale; HQQ's packed `W_q` and its meta's scale and zero; quanto's quantized tensor subclass
flattened to its plain inner tensors (packed data, scale, shift); and the unquantized residual
keys/values. Both the per-layer form (4.56+: `_quantized_keys`) and the 4.4x per-cache lists
(`_quantized_key_cache`) are read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.harness.errors import KVError


@dataclass(frozen=True)
class KVMeasurement:
    """KV bytes found in a cache object.

    `logical_bytes`: sum of `numel * element_size` over every K/V tensor (what DESIGN §4 compares).
    `storage_bytes`: bytes of the distinct storages behind them (sliding views keep a larger
    buffer alive, so this can exceed the logical figure). `per_layer_bytes`: logical bytes per
    layer. `state_bytes`: fixed-size recurrent/conv state of linear-attention and Mamba layers,
    which is not per-token KV and is excluded from `logical_bytes`.
    """

    logical_bytes: int
    storage_bytes: int
    per_layer_bytes: tuple[int, ...]
    state_bytes: int = 0


def measure_kv(cache: Any) -> KVMeasurement:
    """Measure the K/V tensors of any cache object transformers 4.46-5.x returns.

    Accepts `Cache` objects with `.layers` (4.54+), `key_cache`/`value_cache` lists (<= 4.53,
    also Jamba's hybrid cache), `EncoderDecoderCache` (self- plus cross-attention, summed per
    layer), legacy tuples of `(k, v)` per layer, GPTBigCode's fused K/V tensor per layer, and
    `None` (nothing cached). Raises KVError for anything else.
    """
    layers, states = _cache_layers(cache)
    per_layer: list[int] = []
    storages: dict[int, int] = {}
    for tensors in layers:
        per_layer.append(sum(_logical_bytes(t) for t in tensors))
        for t in tensors:
            _add_storage(storages, t)
    state_bytes = 0
    for t in states:
        state_bytes += _logical_bytes(t)
    return KVMeasurement(
        logical_bytes=sum(per_layer),
        storage_bytes=sum(storages.values()),
        per_layer_bytes=tuple(per_layer),
        state_bytes=state_bytes,
    )


def _logical_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _add_storage(storages: dict[int, int], t: torch.Tensor) -> None:
    # `_cdata` identifies the storage object, so views sharing one buffer count it once.
    storage = t.untyped_storage()
    storages[storage._cdata] = storage.nbytes()


def stored_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """The plain tensors that hold `obj`'s data: tensors, nested tuples/lists/dicts of them
    (HQQ's meta dict: its shape, dtype and flag entries are not tensors) and tensor subclasses
    (quanto's QTensors, a `PackedTensor` inside), flattened through `__tensor_flatten__`. A
    subclass's own `numel * element_size` is its dequantized size, not what it stores."""
    if isinstance(obj, torch.Tensor) and type(obj) is not torch.Tensor:
        flatten = getattr(obj, "__tensor_flatten__", None)
        if flatten is not None:
            names, _context = flatten()
            for name in names:
                yield from stored_tensors(getattr(obj, name))
            return
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for value in obj.values():
            yield from stored_tensors(value)
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from stored_tensors(item)


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in obj: a tensor, a tuple/list/dict of them (nested), or None."""
    if obj is None:
        return
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _tensors(item)


def _layer_kv_tensors(layer: Any) -> list[torch.Tensor]:
    """K/V tensors of one `Cache.layers` entry (dynamic, sliding, quantized, hybrid, dummy)."""
    found: list[torch.Tensor] = []
    for name in ("_quantized_keys", "_quantized_values"):  # quantized layers (4.56+)
        found.extend(stored_tensors(getattr(layer, name, None)))
    for name in ("keys", "values", "indexer_keys"):
        value = getattr(layer, name, None)
        if isinstance(value, torch.Tensor):
            found.append(value)
    return found


def _layer_state_tensors(layer: Any) -> list[torch.Tensor]:
    return [
        *_tensors(getattr(layer, "conv_states", None)),
        *_tensors(getattr(layer, "recurrent_states", None)),
    ]


def _cache_layers(cache: Any) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
    """(K/V tensors per layer, state tensors) for any supported cache object."""
    if cache is None:
        return [], []
    self_cache = getattr(cache, "self_attention_cache", None)
    if self_cache is not None:  # EncoderDecoderCache: decoder self-attention plus cross-attention
        layers, states = _cache_layers(self_cache)
        cross_layers, cross_states = _cache_layers(getattr(cache, "cross_attention_cache", None))
        for i, tensors in enumerate(cross_layers):
            if i < len(layers):
                layers[i] = layers[i] + tensors
            else:
                layers.append(tensors)
        return layers, states + cross_states
    cache_layers = getattr(cache, "layers", None)
    if isinstance(cache_layers, Iterable) and not isinstance(cache, (tuple, list)):
        per_layer = list(cache_layers)
        return (
            [_layer_kv_tensors(layer) for layer in per_layer],
            [t for layer in per_layer for t in _layer_state_tensors(layer)],
        )
    key_cache = getattr(cache, "key_cache", None)
    if isinstance(key_cache, (list, tuple)):  # transformers <= 4.53 (and Jamba's hybrid cache)
        value_cache = getattr(cache, "value_cache", [])
        layers = [[*_tensors(k), *_tensors(v)] for k, v in zip(key_cache, value_cache, strict=True)]
        quantized_keys = getattr(cache, "_quantized_key_cache", None)  # 4.4x QuantizedCache
        if isinstance(quantized_keys, list):
            quantized_values = getattr(cache, "_quantized_value_cache", [])
            for tensors, q_keys, q_values in zip(
                layers, quantized_keys, quantized_values, strict=True
            ):
                tensors.extend([*stored_tensors(q_keys), *stored_tensors(q_values)])
        states = [
            *_tensors(getattr(cache, "conv_states", None)),
            *_tensors(getattr(cache, "ssm_states", None)),
        ]
        return layers, states
    if isinstance(cache, (tuple, list)):  # legacy: per layer (k, v) or one fused tensor
        return [list(_tensors(layer)) for layer in cache], []
    if hasattr(cache, "conv_states") or hasattr(cache, "ssm_states"):  # MambaCache: state only
        states = [
            *_tensors(getattr(cache, "conv_states", None)),
            *_tensors(getattr(cache, "ssm_states", None)),
        ]
        return [], states
    raise KVError(
        f"cannot read K/V tensors from a {type(cache).__name__}; pass the cache returned by the "
        "model's forward (a transformers Cache, or a legacy tuple of (key, value) per layer)."
    )
