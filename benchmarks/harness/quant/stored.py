"""Stored weight bytes, seen through every quantized tensor type (docs/quantization.md).

`numel * element_size`, `untyped_storage().nbytes()` and transformers' `get_memory_footprint()`
all report a quantized weight at its *dense* size (torchao and quanto tensor subclasses keep the
logical shape and dtype; one 256x256 int8 Linear reads 131,072 B where 66,816 B are stored).
`stored_weights(model)` counts what is really held instead:

* a plain tensor parameter: `numel * element_size` (a tied parameter once, as today);
* a tensor subclass (torchao `Int8Tensor`, `Float8Tensor`, `Int4OpaqueTensor`, ...; quanto's
  `QTensor`s): the inner tensors its `__tensor_flatten__` names, recursively;
* a bitsandbytes `Params4bit`: the packed bytes plus every tensor of its `quant_state` (absmax,
  the 16-entry code, and the nested state of double quantization); an `Int8Params`: the int8
  matrix plus its row scales (`SCB`, also held by the module's `state`: counted once);
* HQQ: a module's `meta` dictionary (scales, zeros) and its bias (a plain tensor there);
* the buffers of a module whose weight is quantized (a quantized Linear's own scales), and
  no other buffers: rotary tables and masks are not weights, so a dense model's figure is
  exactly today's `sum(p.numel() * p.element_size())`.

Every tensor is counted once, by storage and view (a parameter that is the module state's `CB`,
the tied LM head). `dense_bytes` is what the same parameters take unquantized in `dtype`: the
logical element count of each (the bitsandbytes 4-bit shape from its quant state).

It deliberately does not quantize anything (`methods`) or predict bytes (`predict`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class StoredWeights:
    """Stored and dense bytes of a model's weights (see the module docstring)."""

    stored_bytes: int
    dense_bytes: int
    quantized_modules: int  # modules whose weight is stored quantized


def is_quantized_tensor(t: torch.Tensor) -> bool:
    """A weight stored in another form than a plain tensor of its logical dtype."""
    inner = t.data if isinstance(t, nn.Parameter) else t
    if type(inner) is not torch.Tensor and hasattr(inner, "__tensor_flatten__"):
        return True
    return _bnb_kind(t) is not None


def _bnb_kind(t: torch.Tensor) -> str | None:
    # Matched by class name: bitsandbytes is optional and importing it has side effects.
    name = type(t).__name__
    return name if name in ("Params4bit", "Int8Params") else None


def _leaves(t: Any) -> Iterator[torch.Tensor]:
    """The plain tensors that hold `t`'s data: a subclass's inner tensors, recursively.

    A plain parameter is yielded itself, never its `.data` (a new object at every access: on the
    meta device, where views are told apart by `id`, a dead temporary's id is reused).
    """
    inner = t.data if isinstance(t, nn.Parameter) else t
    if type(inner) is not torch.Tensor and hasattr(inner, "__tensor_flatten__"):
        names, _context = inner.__tensor_flatten__()
        for name in names:
            yield from _leaves(getattr(inner, name))
    elif isinstance(t, torch.Tensor):
        yield t


def _nested(obj: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """Tensors inside a quant state / meta dict / object (bounded depth: no cycles)."""
    if depth > 4 or obj is None:
        return
    if isinstance(obj, torch.Tensor):
        yield from _leaves(obj)
    elif isinstance(obj, Mapping):
        for value in obj.values():
            yield from _nested(value, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _nested(value, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, (nn.Module, type)):
        for value in vars(obj).values():
            yield from _nested(value, depth + 1)


def _key(t: torch.Tensor) -> tuple[Any, ...]:
    """One tensor view: storage, offset, shape, dtype (a meta tensor: the object itself)."""
    if t.device.type == "meta":
        return ("meta", id(t))
    return (t.untyped_storage()._cdata, t.storage_offset(), tuple(t.shape), t.dtype)


def _side_tensors(module: nn.Module, param: torch.Tensor) -> Iterator[torch.Tensor]:
    """Tensors a quantized parameter needs beside its own data."""
    kind = _bnb_kind(param)
    if kind == "Params4bit":
        yield from _nested(getattr(param, "quant_state", None))
    elif kind == "Int8Params":
        scb = getattr(param, "SCB", None)
        if isinstance(scb, torch.Tensor):
            yield scb
        state = getattr(module, "state", None)
        for name in ("CB", "SCB"):
            held = getattr(state, name, None)
            if isinstance(held, torch.Tensor):
                yield held


def logical_numel(param: torch.Tensor) -> int:
    """Elements of the weight as the model sees it (a 4-bit bitsandbytes weight's own shape)."""
    if _bnb_kind(param) == "Params4bit":
        state = getattr(param, "quant_state", None)
        shape = getattr(state, "shape", None)
        if shape is not None:
            return int(torch.Size(shape).numel())
    return int(param.numel())


def _is_hqq(module: nn.Module) -> bool:
    return type(module).__name__ == "HQQLinear"


def _hqq_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """An HQQ Linear's `meta` (scale, zero) and its bias, a plain tensor attribute there."""
    if not _is_hqq(module):
        return []
    found = [(f"meta.{i}", t) for i, t in enumerate(_nested(getattr(module, "meta", None)))]
    bias = module.__dict__.get("bias")
    if isinstance(bias, torch.Tensor):
        found.append(("bias", bias))
    return found


def stored_weights(model: nn.Module, dtype: torch.dtype | None = None) -> StoredWeights:
    """Stored bytes of `model`'s weights and their dense size in `dtype` (default: as held)."""
    stored = sum(param_stored_bytes(model).values())  # each tensor view once, side tensors too
    dense = 0
    quantized = 0
    for param in model.parameters():  # tied parameters once
        if is_quantized_tensor(param):
            quantized += 1
            element = (
                _logical_element_size(param)
                if dtype is None
                else torch.empty((), dtype=dtype).element_size()
            )
            dense += logical_numel(param) * element
        else:
            dense += param.numel() * param.element_size()
    return StoredWeights(stored_bytes=stored, dense_bytes=dense, quantized_modules=quantized)


def _logical_element_size(param: torch.Tensor) -> int:
    # A subclass reports its logical dtype; a bitsandbytes parameter its storage dtype.
    state = getattr(param, "quant_state", None)
    dtype = getattr(state, "dtype", None)
    if isinstance(dtype, torch.dtype):
        return torch.empty((), dtype=dtype).element_size()
    return int(param.element_size())


def param_stored_bytes(model: nn.Module) -> dict[int, int]:
    """Stored bytes per parameter object (`id(param)`), its side tensors included.

    The roofline reads weights parameter by parameter (an embedding only for its rows looked
    up): this gives each parameter's real bytes, quantized or not.
    """
    sizes: dict[int, int] = {}
    seen: set[tuple[Any, ...]] = set()
    for module in model.modules():
        for _, param in module.named_parameters(recurse=False):
            if id(param) in sizes:
                continue
            tensors = [*_leaves(param), *_side_tensors(module, param)]
            tensors.extend(t for _, t in _hqq_tensors(module))
            if is_quantized_tensor(param) or _is_hqq(module):
                tensors.extend(t for _, t in module.named_buffers(recurse=False))
            total = 0
            for t in tensors:
                key = _key(t)
                if key not in seen:
                    seen.add(key)
                    total += t.numel() * t.element_size()
            sizes[id(param)] = total
    return sizes
