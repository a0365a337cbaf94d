"""mlx-lm's caches as arithmetic (`kvrules`) against the real mlx-lm 0.32.2 caches.

Each cache class is fed the same forwards as its arithmetic twin, and after every one the
arrays' `nbytes` (read by `measure`, and mlx-lm's own `nbytes`) must equal the prediction:
KVCache across the 256-step boundary and through a trim on growth, RotatingKVCache through
its window (concatenated chunks and in-place steps, with and without kept positions),
QuantizedKVCache at 4 and 8 bits and two group sizes. Random forward sequences over many seeds,
plus the named sequences a single wrong rule would fail.
"""

from __future__ import annotations

import importlib
import random

import pytest

from benchmarks.harness.mlx.kvrules import LayerShape, QuantizedStepKV, RotatingKV, StepKV
from benchmarks.harness.mlx.measure import measure
from tests.harness.mlx.mlxskip import needs_mlx

B, HEADS, DIM = 2, 2, 64


def _shape(element_bytes: int = 2) -> LayerShape:
    return LayerShape(batch=B, kv_heads=HEADS, k_dim=DIM, v_dim=DIM, element_bytes=element_bytes)


# --- the arithmetic alone (no mlx): the rules as mlx-lm's source states them -----------------


def test_kvcache_allocates_whole_steps_of_256_and_grows_at_the_boundary():
    cache = StepKV(_shape())
    cache.update(300)
    assert cache.allocated_positions == 512
    for _ in range(212):
        cache.update(1)
    assert (cache.allocated_positions, cache.used_positions) == (512, 512)
    cache.update(1)  # position 513: one more step, nothing trimmed (512 is whole steps)
    assert cache.allocated_positions == 768


def test_kvcache_trims_to_the_written_positions_when_it_grows():
    cache = StepKV(_shape())
    cache.update(100)  # 256 slots, 100 written
    cache.update(300)  # does not fit: trimmed to 100, then 2 steps appended
    assert cache.allocated_positions == 100 + 512
    assert cache.allocated_bytes - cache.used_bytes == (612 - 400) * _shape().position_bytes


def test_a_quantized_position_is_packed_words_plus_a_scale_and_bias_per_group():
    cache = QuantizedStepKV(_shape(element_bytes=2), bits=4, group_size=64)
    # K and V: 64 dims x 4 bits = 8 uint32 words (32 bytes), 1 group -> scale + bias (4 bytes)
    assert cache.position_bytes() == B * HEADS * 2 * (32 + 4)


def test_a_rotating_cache_stops_growing_at_its_window():
    cache = RotatingKV(_shape(), max_size=16)
    cache.update(7)  # a prompt chunk is kept whole
    assert cache.allocated_positions == 7
    cache.update(1)  # grows to the window at once (a step of 256 capped at 16)
    assert cache.allocated_positions == 16
    for _ in range(30):
        cache.update(1)
    assert (cache.allocated_positions, cache.used_positions) == (16, 16)


# --- against mlx-lm ---------------------------------------------------------------------------


def _real(kind: str, **kwargs: int):
    cache = importlib.import_module("mlx_lm.models.cache")
    return {
        "KVCache": cache.KVCache,
        "RotatingKVCache": cache.RotatingKVCache,
        "QuantizedKVCache": cache.QuantizedKVCache,
    }[kind](**kwargs)


def _feed(real, new: int) -> None:
    mx = importlib.import_module("mlx.core")
    keys = mx.zeros((B, HEADS, new, DIM), dtype=mx.bfloat16)
    real.update_and_fetch(keys, keys)
    mx.eval(real.state)


def _agree(real, twin, where: str) -> None:
    found = measure([real])
    assert found.allocated_bytes == real.nbytes, where  # our reading = mlx-lm's own nbytes
    assert (found.allocated_bytes, found.used_bytes) == (
        twin.allocated_bytes,
        twin.used_bytes,
    ), where


def _run(kind: str, twin, updates: list[int], **kwargs: int) -> None:
    real = _real(kind, **kwargs)
    for index, new in enumerate(updates):
        _feed(real, new)
        twin.update(new)
        _agree(real, twin, f"{kind} {kwargs} after forward {index} of {updates[: index + 1]}")


def _sequence(rng: random.Random) -> list[int]:
    """A prompt chunk, then steps of one with an occasional further chunk (chunked prefill)."""
    updates = [rng.randint(1, 600)]
    for _ in range(rng.randint(5, 40)):
        updates.append(1 if rng.random() < 0.8 else rng.randint(2, 300))
    return updates


NAMED = {
    "p300-across-512": [300, *[1] * 220],
    "p255-across-256": [255, 1, 1, 1],
    "trim-on-growth": [100, 300, 1],
    "whole-steps-no-trim": [256, 1, 256, 1],
    "one-token-prompt": [1, 1, 1],
}


@needs_mlx
@pytest.mark.parametrize("updates", NAMED.values(), ids=NAMED.keys())
def test_kvcache_named_sequences(updates):
    _run("KVCache", StepKV(_shape()), updates)


@needs_mlx
@pytest.mark.parametrize("seed", range(12))
def test_kvcache_random_sequences(seed):
    _run("KVCache", StepKV(_shape()), _sequence(random.Random(seed)))


@needs_mlx
@pytest.mark.parametrize(("max_size", "keep"), [(16, 0), (16, 4), (300, 0), (300, 4)])
@pytest.mark.parametrize("seed", range(6))
def test_rotating_cache_random_sequences(seed, max_size, keep):
    rng = random.Random(seed)
    twin = RotatingKV(_shape(), max_size=max_size, keep=keep)
    _run("RotatingKVCache", twin, _sequence(rng), max_size=max_size, keep=keep)


@needs_mlx
@pytest.mark.parametrize("prompt", [7, 15, 16, 17, 40])
def test_rotating_cache_at_the_window(prompt):
    twin = RotatingKV(_shape(), max_size=16)
    _run("RotatingKVCache", twin, [prompt, *[1] * 40, 5, *[1] * 20], max_size=16)


@needs_mlx
@pytest.mark.parametrize(("bits", "group_size"), [(4, 64), (8, 64), (4, 32), (8, 32)])
@pytest.mark.parametrize("seed", range(4))
def test_quantized_cache_random_sequences(seed, bits, group_size):
    twin = QuantizedStepKV(_shape(), bits=bits, group_size=group_size)
    updates = _sequence(random.Random(seed))
    _run("QuantizedKVCache", twin, updates, bits=bits, group_size=group_size)


class _NoTrim(StepKV):
    """The rule without mlx-lm's trim on growth: what a plausible misreading predicts."""

    def update(self, new: int) -> None:
        if self.capacity is None or self.offset + new > self.capacity:
            self.capacity = (self.capacity or 0) + (256 + new - 1) // 256 * 256
        self.offset += new


@needs_mlx
def test_a_rule_without_the_trim_disagrees_with_mlx_lm():
    with pytest.raises(AssertionError):
        _run("KVCache", _NoTrim(_shape()), NAMED["trim-on-growth"])
