"""Measured bytes of a real mlx-lm cache (a list with one cache object per layer).

`measure(cache)`: `allocated_bytes`, the `nbytes` of every K/V array the caches hold (a
quantized cache's packed words, scales and biases), i.e. what they occupy; `used_bytes`, the
positions holding real K/V (`offset`, or for a `RotatingKVCache` at most its arrays' length) at
the per-position bytes of the layer's own arrays; and the class name of each layer's cache.
Read from the arrays, not from mlx-lm's own `nbytes` property (the tests compare the two).

It deliberately reads shapes and `nbytes` only: nothing is evaluated or copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MeasuredMlxKV:
    """What an mlx-lm cache's arrays hold, summed over layers."""

    allocated_bytes: int
    used_bytes: int
    kinds: tuple[str, ...]  # mlx-lm class per layer
    positions: int  # the first layer's offset: positions the cache has seen


def _arrays(part: Any) -> list[Any]:
    if part is None:
        return []
    return list(part) if isinstance(part, tuple | list) else [part]


def _layer(cache: Any) -> tuple[int, int]:
    keys, values = _arrays(cache.keys), _arrays(cache.values)
    allocated = sum(int(a.nbytes) for a in (*keys, *values))
    if not keys:
        return 0, 0
    slots = int(keys[0].shape[-2])  # [B, heads, slots, dim] (quantized: per packed array)
    held = min(int(cache.offset), slots)
    return allocated, allocated // slots * held if slots else 0


def measure(cache: Sequence[Any]) -> MeasuredMlxKV:
    """Allocated and used K/V bytes of `cache` (see the module docstring)."""
    allocated = used = 0
    for layer in cache:
        layer_allocated, layer_used = _layer(layer)
        allocated += layer_allocated
        used += layer_used
    return MeasuredMlxKV(
        allocated_bytes=allocated,
        used_bytes=used,
        kinds=tuple(type(layer).__name__ for layer in cache),
        positions=int(cache[0].offset) if cache else 0,
    )
