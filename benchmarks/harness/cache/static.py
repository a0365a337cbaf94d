"""Static KV caches (DESIGN §9): exact allocated and used bytes, analytic and measured.

A static cache (`transformers.StaticCache`) allocates its whole length up front, so its K/V
tensors are as large after the prefill as after the last step. Two figures describe it:

* **allocated**: what the cache's K/V tensors hold, written or not. Full-attention layers
  allocate `max_cache_len` positions; sliding-window layers (transformers >= 4.56)
  `min(max_cache_len, W)` (W, not W - 1: a static sliding layer keeps the window itself);
  layers without per-token K/V allocate nothing. This is the logical size `kv.measure_kv`
  reports for a static cache.
* **used**: the positions written so far, `min(T, allocated positions)` per layer after T
  cached positions. Measured by counting the positions whose keys (and, separately, values)
  are not all zero: the cache is zero-filled when allocated, and a written key of a
  random-weight model is never exactly zero in every element of a position.

Per position a layer holds `B * (k_heads * k_dim + v_heads * v_dim)` elements, the same widths
the dynamic-cache rules of `kv.analytic_kv` give (GQA/MQA, explicit head_dim, MLA latents), so
both sides share one description of the architecture.

Verified on transformers 4.46.3 (one `StaticCache` tensor of `max_cache_len` per layer; its
sliding-window models need `SlidingWindowCache`/`HybridCache`, which this module refuses) and
5.24.0 (`StaticLayer` / `StaticSlidingWindowLayer`). It deliberately does not model offloaded
or quantized static caches, chunked attention or hybrid (linear-attention) static layers: those
are refused with the reason (`unsupported_reason`) rather than guessed.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import transformers
from packaging.version import Version
from transformers import cache_utils

from benchmarks.harness.cache.kv import SLIDING_TRIM_SINCE, analytic_kv, element_bytes, text_config
from benchmarks.harness.errors import KVError

_TRANSFORMERS_VERSION = Version(transformers.__version__)
# From 4.56 `StaticCache(config=..., max_cache_len=...)` builds one layer per decoder layer,
# sliding layers as `StaticSlidingWindowLayer`; before, every layer is a full-length tensor.
STATIC_SLIDING_SINCE = SLIDING_TRIM_SINCE
_FULL_KINDS = frozenset({"full_attention", "mla"})
_SLIDING_KIND = "sliding_attention"
_NO_KV_KINDS = frozenset({"dummy", "moe", "mlp"})


@dataclass(frozen=True)
class StaticLayerKV:
    """One layer of a static cache: positions and bytes allocated, and those written."""

    index: int
    kind: str
    allocated_positions: int
    used_positions: int
    allocated_bytes: int
    used_bytes: int


@dataclass(frozen=True)
class StaticKV:
    """A whole static cache after `seq_len` cached positions (analytic or measured)."""

    layers: tuple[StaticLayerKV, ...]

    @property
    def allocated_bytes(self) -> int:
        """Bytes of every K/V tensor, written or not."""
        return sum(layer.allocated_bytes for layer in self.layers)

    @property
    def used_bytes(self) -> int:
        """Bytes of the positions written so far."""
        return sum(layer.used_bytes for layer in self.layers)

    def per_layer(self) -> tuple[tuple[int, int], ...]:
        """(allocated, used) bytes per layer, for exact comparisons."""
        return tuple((layer.allocated_bytes, layer.used_bytes) for layer in self.layers)


@dataclass(frozen=True)
class _Widths:
    kind: str
    k_elements: int  # k_heads * k_dim: elements per position and sequence
    v_elements: int


def _widths(config: Any, dtype: torch.dtype) -> list[_Widths]:
    # One cached position of batch 1 gives each layer's per-position K and V widths.
    layout = analytic_kv(config, dtype=dtype, batch=1, seq_len=1)
    widths = []
    for layer in layout.layers:
        k = layer.k_shape[1] * layer.k_shape[3] if layer.k_shape else 0
        v = layer.v_shape[1] * layer.v_shape[3] if layer.v_shape else 0
        widths.append(_Widths(layer.kind, k, v))
    return widths


def unsupported_reason(config: Any, model_class: type | None = None) -> str | None:
    """Why a static cache of this architecture is not modelled here (None: it is).

    `model_class` (the causal-LM class) lets transformers < 4.56 refuse models whose
    `_supports_static_cache` is False, as `generate(cache_implementation="static")` does.
    """
    cfg = text_config(config)
    model_type = getattr(cfg, "model_type", "?")
    version = transformers.__version__
    legacy = _TRANSFORMERS_VERSION < STATIC_SLIDING_SINCE
    if (
        legacy
        and model_class is not None
        and not getattr(model_class, "_supports_static_cache", False)
    ):
        return (
            f"transformers {version}: {model_class.__name__} does not support a static "
            "cache (`_supports_static_cache` is False)"
        )
    declared = getattr(cfg, "layer_types", None) or ()
    if "chunked_attention" in declared or getattr(cfg, "use_bidirectional_attention", False):
        return f"{model_type}: static caches of chunked or bidirectional windows are not modelled"
    try:
        kinds = {w.kind for w in _widths(cfg, torch.float32)}
    except KVError as error:
        return str(error)
    unknown = sorted(kinds - _FULL_KINDS - {_SLIDING_KIND} - _NO_KV_KINDS)
    if unknown:
        return f"{model_type}: static caches of {', '.join(unknown)} layers are not modelled"
    if legacy and _SLIDING_KIND in kinds:
        return (
            f"transformers {version}: {model_type} has sliding-window layers, whose static "
            "cache (SlidingWindowCache/HybridCache) phasebench does not model before 4.56"
        )
    return _legacy_layout_reason(cfg) if legacy else None


def _legacy_layout_reason(cfg: Any) -> str | None:
    """transformers < 4.56 sizes every StaticCache layer from `num_key_value_heads` and
    `head_dim` alone; refuse architectures that cache another layout (Falcon multi-query,
    MLA), whose forward would not fit that buffer."""
    heads = int(cfg.num_attention_heads)
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    expected = (1, kv_heads, 1, head_dim)
    for layer in analytic_kv(cfg, dtype=torch.float32, batch=1, seq_len=1).layers:
        if layer.k_shape and (layer.k_shape != expected or layer.v_shape != expected):
            return (
                f"transformers {transformers.__version__}: its StaticCache allocates "
                f"{kv_heads} heads x {head_dim} per layer, but {cfg.model_type} caches "
                f"K {list(layer.k_shape)} / V {list(layer.v_shape)}; not supported"
            )
    return None


def analytic_static_kv(
    config: Any, *, dtype: torch.dtype, batch: int, max_cache_len: int, seq_len: int
) -> StaticKV:
    """Allocated and used bytes per layer of a static cache of `max_cache_len` positions
    after `seq_len` cached positions. Raises KVError where `unsupported_reason` says so."""
    if batch <= 0 or max_cache_len <= 0:
        raise KVError(f"batch {batch} and max_cache_len {max_cache_len} must be positive.")
    if not 0 <= seq_len <= max_cache_len:
        raise KVError(
            f"{seq_len} cached positions do not fit a static cache of {max_cache_len}; "
            "raise max_cache_len."
        )
    reason = unsupported_reason(config)
    if reason is not None:
        raise KVError(reason)
    cfg = text_config(config)
    esize = element_bytes(dtype)
    layers = []
    for index, width in enumerate(_widths(cfg, dtype)):
        allocated = max_cache_len
        if width.kind == _SLIDING_KIND:
            allocated = min(max_cache_len, int(cfg.sliding_window))
        if width.k_elements == 0 and width.v_elements == 0:
            allocated = 0
        per_position = batch * (width.k_elements + width.v_elements) * esize
        used = min(seq_len, allocated)
        layers.append(
            StaticLayerKV(
                index=index,
                kind=width.kind,
                allocated_positions=allocated,
                used_positions=used,
                allocated_bytes=allocated * per_position,
                used_bytes=used * per_position,
            )
        )
    return StaticKV(layers=tuple(layers))


# --------------------------------------------------------------------------------------------
# Measured side


def _layer_tensors(cache: Any) -> Iterator[tuple[torch.Tensor | None, torch.Tensor | None]]:
    """(keys, values) per layer of a static cache, either transformers layout."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # 4.54+: one layer object each (None before its first update)
        for layer in layers:
            yield getattr(layer, "keys", None), getattr(layer, "values", None)
        return
    keys = getattr(cache, "key_cache", None)
    values = getattr(cache, "value_cache", None)
    if isinstance(keys, list) and isinstance(values, list):  # <= 4.53: one tensor per layer
        yield from zip(keys, values, strict=True)
        return
    raise KVError(
        f"cannot read a static cache from a {type(cache).__name__}; pass the StaticCache the "
        "model was given (kv_static.make_static_cache)."
    )


def _written_positions(tensor: torch.Tensor) -> int:
    # [B, heads, positions, dim]: a position is written when any of its elements is non-zero.
    return int((tensor != 0).any(dim=3).any(dim=1).any(dim=0).sum())


def _bytes(tensor: torch.Tensor | None, positions: int | None = None) -> int:
    if tensor is None or tensor.numel() == 0:
        return 0
    per_position = tensor.shape[0] * tensor.shape[1] * tensor.shape[3] * tensor.element_size()
    return per_position * (tensor.shape[2] if positions is None else positions)


def measure_static_kv(cache: Any) -> StaticKV:
    """Allocated (whole tensors) and used (written positions) bytes per layer of `cache`.

    Needs real values (not the meta device): used positions are counted from the data.
    """
    layers = []
    for index, (keys, values) in enumerate(_layer_tensors(cache)):
        if keys is not None and keys.device.type == "meta":
            raise KVError("used positions are counted from values; run on cpu, cuda or mps.")
        used_k = 0 if keys is None else _written_positions(keys)
        used_v = 0 if values is None else _written_positions(values)
        layers.append(
            StaticLayerKV(
                index=index,
                kind="static",
                allocated_positions=0 if keys is None else int(keys.shape[2]),
                used_positions=max(used_k, used_v),
                allocated_bytes=_bytes(keys) + _bytes(values),
                used_bytes=_bytes(keys, used_k) + _bytes(values, used_v),
            )
        )
    return StaticKV(layers=tuple(layers))


def is_static_cache(cache: Any) -> bool:
    """Whether `cache` is a transformers StaticCache (any version)."""
    static = getattr(cache_utils, "StaticCache", None)
    return static is not None and isinstance(cache, static)


def make_static_cache(model: Any, *, batch: int, max_cache_len: int) -> Any:
    """An empty `StaticCache` of `max_cache_len` positions for `model`, allocated now.

    Every K/V buffer exists before the first forward, on the model's device, zero-filled and
    marked with `torch._dynamo.mark_static_address`: a compiled prefill then writes into
    buffers it did not create. transformers >= 4.56 would otherwise allocate each layer lazily
    inside the first update, so under `torch.compile` the buffers are made inside the traced
    prefill, unmarked (transformers skips the mark while tracing: "Without this, we cannot use
    cudagraphs"), and with CUDA graphs they are outputs of the captured prefill, which the next
    replay overwrites. Older releases allocate and mark every layer in `StaticCache.__init__`.
    """
    config = model.config
    # Built under inference mode, like every tensor the forward and `compat.copy_cache` make:
    # a compiled forward guards on the dispatch keys of the cache's tensors, so a cache built
    # outside it and its restored copies (inference tensors) would force a recompile.
    with torch.inference_mode():
        if _TRANSFORMERS_VERSION < STATIC_SLIDING_SINCE:
            return cache_utils.StaticCache(
                config=config,
                batch_size=batch,
                max_cache_len=max_cache_len,
                device=model.device,
                dtype=model.dtype,
            )
        cache = cache_utils.StaticCache(config=config, max_cache_len=max_cache_len)
        _initialize_layers(cache, config, batch=batch, dtype=model.dtype, device=model.device)
        return cache


def _initialize_layers(
    cache: Any, config: Any, *, batch: int, dtype: torch.dtype, device: torch.device
) -> None:
    """Allocate every layer of a (>= 4.56) StaticCache now, as `early_initialization` does.

    `early_initialization` takes one head count and width for K and V alike; MLA caches K and
    V of different widths, so each layer gets its own empty K and V (no position allocated)
    shaped from the analytic layout (`kv.analytic_kv`), the same shapes the forward writes.
    """
    layout = analytic_kv(text_config(config), dtype=dtype, batch=batch, seq_len=1).layers
    if len(layout) != len(cache.layers):
        raise KVError(
            f"the StaticCache has {len(cache.layers)} layers but the config describes "
            f"{len(layout)}; phasebench cannot allocate it ahead of the prefill."
        )
    for layer, expected in zip(cache.layers, layout, strict=True):
        if getattr(layer, "is_initialized", False) or not getattr(
            layer, "supports_early_init", True
        ):
            continue  # DummyLayer (KV-sharing layers) and the like hold nothing
        if not expected.k_shape or not expected.v_shape:
            continue
        keys = torch.zeros(
            (*expected.k_shape[:2], 0, expected.k_shape[3]), dtype=dtype, device=device
        )
        values = torch.zeros(
            (*expected.v_shape[:2], 0, expected.v_shape[3]), dtype=dtype, device=device
        )
        # 4.56-4.57 size both from the keys (`lazy_initialization(key_states)`); 5.x takes both.
        if len(inspect.signature(layer.lazy_initialization).parameters) >= 2:
            layer.lazy_initialization(keys, values)
        else:
            layer.lazy_initialization(keys)


class StaticCacheSlot:
    """One static cache per cell, handed to every prefill of the cell after `reset()`.

    A compiled forward treats the cache's buffers as fixed addresses (`mark_static_address`;
    CUDA graphs replay on them), so the cell keeps one cache: a new cache per round would make
    dynamo recompile (an identity guard) or CUDA graphs re-record. `reset()` zeroes the buffers
    and the position counters in place (as `generate` does when it reuses its static cache), so
    the used bytes measured after a prefill are that prefill's alone. The reset runs before the
    timed prefill (`Engine.start_cache_for`), as a server's cache slots are ready before a
    request: `prefill_s` holds the forward alone, as for an eager dynamic cell.
    """

    def __init__(self, model: Any, max_cache_len: int) -> None:
        self._model = model
        self._max_cache_len = max_cache_len
        self._cache: Any = None
        self._batch = 0

    def __call__(self, batch: int) -> Any:
        """The cell's cache for a prefill of `batch` sequences: allocated once, then reset."""
        if self._cache is None or batch != self._batch:
            self._cache = None  # drop the old buffers before allocating the new ones
            self._cache = make_static_cache(
                self._model, batch=batch, max_cache_len=self._max_cache_len
            )
            self._batch = batch
            return self._cache
        with torch.inference_mode():  # its buffers are inference tensors
            self._cache.reset()
        return self._cache
