"""mlx-lm's KV caches as arithmetic: each class owns its growth rule and its bytes.

One class per cache of mlx-lm 0.32.2's `mlx_lm/models/cache.py`, replaying `update_and_fetch`
on positions instead of arrays (`update(new)` = one forward of `new` tokens), so the bytes the
cache's arrays occupy after any sequence of forwards are predicted without running anything:

* `StepKV` is `KVCache`: K and V `[B, heads, capacity, dim]` grow in steps of 256 positions.
  A forward that does not fit appends `ceil(new / 256)` steps of zeros; before that the arrays
  are trimmed to the written positions when those are not a whole number of steps (so a cache
  that holds 100 positions in 256 slots and receives 300 more ends with 100 + 512 slots).
* `QuantizedStepKV` is `QuantizedKVCache`: the same positions rule, each position stored as
  `dim * bits / 32` uint32 words plus a scale and a bias per `group_size` elements in the
  model's dtype, for K and for V (`kv_bits` 4 or 8).
* `RotatingKV` is `RotatingKVCache(max_size, keep)` (sliding windows): a multi-token forward
  concatenates (the first one keeps the whole prompt, even beyond `max_size`; later ones keep
  `max_size - 1` positions before appending), a one-token forward grows in steps of 256 up to
  `max_size`, then trims to `max_size` and writes in place, rotating after the first `keep`.

`allocated_bytes` is what the arrays occupy (mlx-lm's `cache.nbytes`); `used_bytes` the
positions holding real K/V (written and not yet overwritten); their difference is what the
growth rule costs. It deliberately imports no mlx: the prediction is the analytic side of the
exact KV check (`benchmarks/harness/mlx/account.py` compares it with the real arrays).
"""

from __future__ import annotations

from dataclasses import dataclass

STEP = 256  # mlx-lm's `step` of KVCache, QuantizedKVCache and RotatingKVCache
UINT32_BYTES = 4


@dataclass(frozen=True)
class LayerShape:
    """What one position of one layer's cache holds: K `[B, heads, ., k_dim]`, V likewise."""

    batch: int
    kv_heads: int
    k_dim: int
    v_dim: int
    element_bytes: int  # the model's dtype: K/V, or a quantized cache's scales and biases

    @property
    def position_bytes(self) -> int:
        """Dense K + V bytes per cached position (all sequences of the batch)."""
        return self.batch * self.kv_heads * (self.k_dim + self.v_dim) * self.element_bytes


class StepKV:
    """mlx-lm `KVCache`: capacity in steps of 256, trimmed to the written positions on growth."""

    kind = "KVCache"

    def __init__(self, shape: LayerShape) -> None:
        self.shape = shape
        self.capacity: int | None = None  # None: no arrays yet (mlx-lm's `keys is None`)
        self.offset = 0

    def update(self, new: int) -> None:
        """One forward of `new` positions (mlx-lm's `update_and_fetch`)."""
        prev = self.offset
        if self.capacity is None or prev + new > self.capacity:
            grown = (STEP + new - 1) // STEP * STEP
            if self.capacity is None:
                self.capacity = grown
            else:
                kept = prev if prev % STEP != 0 else self.capacity
                self.capacity = kept + grown
        self.offset += new

    @property
    def allocated_positions(self) -> int:
        """Positions the arrays have room for."""
        return self.capacity or 0

    @property
    def used_positions(self) -> int:
        """Positions holding real K/V."""
        return self.offset

    def position_bytes(self) -> int:
        """Bytes one position occupies."""
        return self.shape.position_bytes

    @property
    def allocated_bytes(self) -> int:
        """What the arrays occupy (`cache.nbytes`)."""
        return self.allocated_positions * self.position_bytes()

    @property
    def used_bytes(self) -> int:
        """What the positions holding real K/V occupy."""
        return self.used_positions * self.position_bytes()


class QuantizedStepKV(StepKV):
    """mlx-lm `QuantizedKVCache(group_size, bits)`: `StepKV`'s positions, packed bytes."""

    kind = "QuantizedKVCache"

    def __init__(self, shape: LayerShape, *, bits: int, group_size: int) -> None:
        super().__init__(shape)
        self.bits = bits
        self.group_size = group_size

    def position_bytes(self) -> int:
        """uint32 words of `dim * bits / 32`, and a scale and a bias per group, for K and V."""
        words_per_int = 8 * UINT32_BYTES // self.bits
        s = self.shape
        per_head = sum(
            dim // words_per_int * UINT32_BYTES + 2 * (dim // self.group_size) * s.element_bytes
            for dim in (s.k_dim, s.v_dim)
        )
        return s.batch * s.kv_heads * per_head


class RotatingKV(StepKV):
    """mlx-lm `RotatingKVCache(max_size, keep)`: a window of `max_size` positions."""

    kind = "RotatingKVCache"

    def __init__(self, shape: LayerShape, *, max_size: int, keep: int = 0) -> None:
        super().__init__(shape)
        self.max_size = max_size
        self.keep = keep
        self.index = 0  # mlx-lm's `_idx`: where the next position is written

    def update(self, new: int) -> None:
        """`_update_in_place` for one position, `_update_concat` for more."""
        if new == 1:
            self._in_place(new)
        else:
            self._concat(new)

    def _concat(self, new: int) -> None:
        if self.capacity is None:
            self.capacity = new  # the whole first chunk, however long
        else:
            # `_temporal_order` keeps the size unless the arrays hold unwritten slots at the end
            if self.index != self.capacity and self.index >= self.offset:
                self.capacity = self.index
            trim = self.capacity - self.max_size + 1
            self.capacity = (self.capacity - trim if trim > 0 else self.capacity) + new
        self.offset += new
        self.index = self.capacity

    def _in_place(self, new: int) -> None:
        prev = self.offset
        if self.capacity is None or (prev >= self.capacity and self.capacity < self.max_size):
            grown = min(STEP, self.max_size - prev)
            self.capacity = grown if self.capacity is None else self.capacity + grown
            self.index = prev
        if self.capacity > self.max_size:  # trim to the window, keeping the first `keep`
            self.capacity = self.max_size
            self.index = self.max_size
        if self.index == self.max_size:
            self.index = self.keep
        self.offset += new
        self.index += new

    @property
    def used_positions(self) -> int:
        """Positions holding real K/V: the offset until the window is full, then all of it."""
        return min(self.offset, self.allocated_positions)


def replay(layers: list[StepKV], updates: list[int]) -> tuple[int, int]:
    """Apply the forwards `updates` (positions each) to every layer: (allocated, used) bytes."""
    for new in updates:
        for layer in layers:
            layer.update(new)
    return sum(layer.allocated_bytes for layer in layers), sum(layer.used_bytes for layer in layers)
