"""What differs between transformers 4.46-4.57 and 5.x in the calls the engine makes.

* The cache's forward kwarg and output field: `cache` from 5.24, `past_key_values` before. 5.24
  still accepts the old names but warns (a `FutureWarning` for the kwarg, a logger warning for
  the field), so we ask the forward signature and read the output by its real key.
* Positions: 4.4x-4.57 forwards take `cache_position`, and without it compute it from the
  cache's `get_seq_length()`, which for a `StaticCache` is a tensor (`any(-1).sum()`) fed to
  `torch.arange`: a device-to-host sync per forward and, compiled, a data-dependent graph break
  (two graphs per step). The engine hands the positions in where the forward names the kwarg
  (`position_kwarg`), as `generate` does; 5.x forwards no longer take it.
* Last-position logits: `logits_to_keep` (4.50+), `num_logits_to_keep` (4.4x), or neither
  (GPT-2 in 4.46): then the caller slices the full logits.
* In 4.46 many models return a legacy tuple of `(k, v)` per layer and warn when it is passed back;
  `adopt_cache` turns it into the `DynamicCache` those models build internally anyway. Models
  without cache classes (GPT-2 in 4.46) keep their tuples.
* `copy_cache` makes an independent cache with the same contents, for restoring a cache to the
  prompt between rounds. K/V tensors of layers that only ever grow by concatenation (dynamic and
  sliding-window dynamic layers, 4.4x `key_cache` lists, legacy tuples) are shared, because the
  model never writes into them; everything else is cloned. No cropping is needed, so sliding
  layers that already dropped positions restore exactly. Copies are inference tensors on every
  device, like the forward's. Tensor subclasses (quanto's quantized K/V, which `deepcopy`
  refuses) are rebuilt from copies of their inner tensors. `copy_into` restores a cache whose
  buffers have fixed addresses (`has_static_addresses`: a static cache a compiled graph keeps)
  by writing into them.

It deliberately does not load models, count KV bytes (`kv.py`) or decide what to measure.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterator
from typing import Any

import torch
import transformers
from transformers import cache_utils

from benchmarks.harness.errors import EngineError

_CACHE_KWARGS = ("cache", "past_key_values")
_LOGITS_KWARGS = ("logits_to_keep", "num_logits_to_keep")


def _forward_parameters(model: Any) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def cache_kwarg(model: Any) -> str:
    """The forward kwarg that takes the cache: `cache` (5.24+) or `past_key_values` (older)."""
    parameters = _forward_parameters(model)
    for name in _CACHE_KWARGS:
        if name in parameters:
            return name
    raise EngineError(
        f"{type(model).__name__}.forward takes neither `cache` nor `past_key_values`; "
        "phasebench needs a decoder with a KV cache, so pick another model."
    )


def position_kwarg(model: Any) -> str | None:
    """`cache_position` where the forward takes it (4.4x-4.57), else None (5.x, GPT-2)."""
    return "cache_position" if "cache_position" in _forward_parameters(model) else None


def logits_kwarg(model: Any) -> str | None:
    """The forward kwarg that limits logits to the last positions, or None when there is none."""
    parameters = _forward_parameters(model)
    for name in _LOGITS_KWARGS:
        if name in parameters:
            return name
    return None


def output_cache(outputs: Any) -> Any:
    """The cache in a model output, read by its real key so 5.24 logs no rename warning."""
    keys = outputs.keys()
    for name in _CACHE_KWARGS:
        if name in keys:
            return outputs[name]
    raise EngineError(
        f"the model output ({type(outputs).__name__}) holds no cache; the model must support "
        "`use_cache=True`, so pick a decoder model that does."
    )


def adopt_cache(model: Any, cache: Any) -> Any:
    """The cache in the form the model takes back without deprecation warnings.

    A legacy tuple from a model that supports cache classes (4.46 Llama, Mistral, ...) becomes a
    `DynamicCache` (no tensor is copied); anything else is returned unchanged.
    """
    if isinstance(cache, tuple | list) and getattr(model, "_supports_cache_class", False):
        # `from_legacy_cache` exists exactly in the versions that return legacy tuples.
        return getattr(cache_utils.DynamicCache, "from_legacy_cache")(tuple(cache))  # noqa: B009
    return cache


# From 4.56 every model builds `DynamicCache(config=...)` itself (sliding layers trimmed); before,
# a few models default to caches that the KV contract (DESIGN §4) does not describe.
_DYNAMIC_CACHE_BY_DEFAULT_SINCE = (4, 56)


def _transformers_version() -> tuple[int, int]:
    major, minor = transformers.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def unsupported_reason(config: Any) -> str | None:
    """Why the engine cannot run this model correctly on this transformers, or None.

    transformers < 4.56, Gemma-2: the model decodes correctly only with the `HybridCache` that
    `generate` sizes up front (P + N slots; a sliding layer keeps W). Handed a dynamic cache,
    its sliding layers attend to every position once the context passes the window, so tokens
    differ from `generate` (P = 6, N = 6, W = 8 on 4.46.3); and a HybridCache is not the
    dynamic cache whose bytes DESIGN §4 asserts. Such cells are skipped with this reason.
    """
    getter = getattr(config, "get_text_config", None)
    text = getter(decoder=True) if getter is not None else config
    model_type = getattr(text, "model_type", "")
    if model_type == "gemma2" and _transformers_version() < _DYNAMIC_CACHE_BY_DEFAULT_SINCE:
        return (
            f"transformers {transformers.__version__} decodes Gemma-2 past its sliding window "
            "only with a HybridCache sized up front, which is not the dynamic cache phasebench "
            "measures and accounts for; use transformers >= 4.56 for Gemma-2"
        )
    return None


def initial_cache(model: Any, batch: int) -> Any:
    """The cache to hand to the prefill, or None to let the model build its own.

    transformers < 4.56: Jamba returns no cache unless given its hybrid cache. (Gemma-2 there
    is refused: `unsupported_reason`.) Newer releases need nothing.
    """
    if _transformers_version() >= _DYNAMIC_CACHE_BY_DEFAULT_SINCE:
        return None
    if getattr(model.config, "model_type", "") == "jamba":
        from transformers.models.jamba import modeling_jamba  # noqa: PLC0415 - 4.x only

        hybrid_cache = getattr(modeling_jamba, "HybridMambaAttentionDynamicCache")  # noqa: B009 - gone in 5.x stubs
        return hybrid_cache(model.config, batch, model.dtype, model.device)
    return None


def cache_seq_length(cache: Any) -> int:
    """How many positions the cache has seen (a sliding layer may hold fewer of them)."""
    if isinstance(cache, tuple | list):
        return int(cache[0][0].shape[-2]) if cache else 0
    return int(cache.get_seq_length())


def max_positions(config: Any) -> int | None:
    """The decoder's maximum number of positions, or None when the config states none."""
    getter = getattr(config, "get_text_config", None)
    text = getter(decoder=True) if getter is not None else config
    # GPT-2 maps `max_position_embeddings` to `n_positions` through its attribute map.
    value = getattr(text, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


def _append_only_layer_types() -> tuple[type, ...]:
    # Exact types only: a subclass (quantized, offloaded) may write in place.
    names = ("DynamicLayer", "DynamicSlidingWindowLayer")
    return tuple(t for t in (getattr(cache_utils, n, None) for n in names) if t is not None)


def _nested_tensors(obj: Any) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, tuple | list):
        for item in obj:
            yield from _nested_tensors(item)


def _append_only_tensors(cache: Any) -> Iterator[torch.Tensor]:
    """K/V tensors the model replaces (by `torch.cat`) rather than writes into."""
    if isinstance(cache, tuple | list):  # legacy format: the model concatenates onto new tuples
        yield from _nested_tensors(cache)
        return
    layers = getattr(cache, "layers", None)
    if layers is not None:  # 4.54+
        kinds = _append_only_layer_types()
        for layer in layers:
            if type(layer) in kinds and getattr(layer, "keys", None) is not None:
                yield layer.keys
                yield layer.values
        return
    if type(cache) is getattr(cache_utils, "DynamicCache", None):  # <= 4.53: per-layer lists
        yield from _nested_tensors(list(getattr(cache, "key_cache", [])))
        yield from _nested_tensors(list(getattr(cache, "value_cache", [])))


def copy_cache(cache: Any, device: torch.device | str | None = None) -> Any:
    """An independent cache with `cache`'s contents: extending one never changes the other.

    Without `device`, append-only K/V tensors are shared (free) and all other state (counters,
    in-place buffers of static or recurrent layers) is deep-copied. With `device`, every tensor
    is copied onto `device` (nothing shared): a snapshot kept on the host costs the accelerator
    nothing, and a copy back from it is a fresh cache the device holds alone.
    """
    # Every copy is made under inference mode, as the forward makes its tensors: a graph
    # compiled on inference tensors recompiles for an ordinary one (dynamo guards on the
    # dispatch keys), so a restored cache must hold inference tensors on every device.
    with torch.inference_mode():
        if device is None:
            memo = {id(t): t for t in _append_only_tensors(cache)}
        else:
            memo = {id(t): t.to(device, copy=True) for t in _all_tensors(cache)}
        # Tensor subclasses (quanto's quantized K/V) are rebuilt from copies of their inner
        # tensors: deepcopy refuses them, as their `clone` returns another type.
        for t in _all_tensors(cache):
            if type(t) is not torch.Tensor and hasattr(t, "__tensor_flatten__"):
                memo[id(t)] = _copy_subclass(t, device)
        return copy.deepcopy(cache, memo=dict(memo))


def _copy_subclass(tensor: torch.Tensor, device: torch.device | str | None) -> torch.Tensor:
    """A copy of a traceable tensor subclass, inner tensors copied (onto `device`, if given)."""
    names, context = tensor.__tensor_flatten__()  # type: ignore[attr-defined]
    inner = {}
    for name in names:
        value = getattr(tensor, name)
        if type(value) is not torch.Tensor:
            inner[name] = _copy_subclass(value, device)
        elif device is None:
            inner[name] = value.clone()
        else:
            inner[name] = value.to(device, copy=True)
    rebuilt: torch.Tensor = type(tensor).__tensor_unflatten__(  # type: ignore[attr-defined]
        inner, context, tensor.size(), tensor.stride()
    )
    return rebuilt


def has_static_addresses(cache: Any) -> bool:
    """Whether the model writes `cache` in place into buffers marked as fixed addresses.

    `torch._dynamo.mark_static_address` (transformers' `StaticCache`) tells compiled graphs and
    CUDA graphs that the buffer stays put, so such a cache is restored into (`copy_into`), not
    replaced by a copy.
    """
    return any(hasattr(t, "_dynamo_static_input_type") for t in _all_tensors(cache))


def copy_into(target: Any, source: Any) -> None:
    """Write `source`'s state into `target` in place: tensors by `copy_`, plain values by
    assignment. `source` is a copy of `target` (`copy_cache`), so both have one structure."""
    with torch.inference_mode():  # the buffers are inference tensors
        _copy_state(target, source, set())


_PLAIN = (str, int, float, bool, type(None))


def _copy_state(target: Any, source: Any, seen: set[int]) -> None:
    if id(source) in seen or isinstance(source, _PLAIN):
        return
    seen.add(id(source))
    if isinstance(source, torch.Tensor):
        if not isinstance(target, torch.Tensor) or target.shape != source.shape:
            raise EngineError(
                "cannot restore a cache in place: its tensors changed shape since the snapshot; "
                "take the snapshot from the cache the rounds use"
            )
        target.copy_(source)
        return
    if isinstance(source, dict):
        pairs = [(key, target[key], value) for key, value in source.items()]
    elif isinstance(source, list | tuple):
        pairs = list(zip(range(len(source)), target, source, strict=True))
    elif hasattr(source, "__dict__") and not isinstance(source, type):
        pairs = [(name, getattr(target, name), value) for name, value in vars(source).items()]
    else:
        return
    for key, into, value in pairs:
        if not isinstance(value, _PLAIN):
            _copy_state(into, value, seen)
        elif isinstance(target, dict | list):
            target[key] = value
        elif not isinstance(target, tuple):
            setattr(target, str(key), value)  # e.g. a sliding layer's position count


def _all_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor reachable from a cache object (attributes, lists, tuples, dicts), once each."""
    seen: set[int] = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen or item is None or isinstance(item, str | int | float | bool):
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, tuple | list | set):
            stack.extend(item)
        elif hasattr(item, "__dict__") and not isinstance(item, type):
            # A cache's or cache layer's attributes (4.4x caches are nn.Modules: their lists
            # of K/V tensors are plain attributes too).
            stack.extend(vars(item).values())
