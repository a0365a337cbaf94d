"""The bytes of a quantized KV cache, per layer, after the prefill and after every step.

Bytes of one K (or V) tensor of T quantized positions, shape [B, H, T, D], N = B*H*T*D
elements, e = bytes per element of the model dtype, G = group size (axis 0, transformers'
default), b = bits:

* fp8:      N (float8_e4m3fn) + 4 (one float32 scale, 0-d), no residual.
* hqq b:    N*b/8 (uint8: the [G, N/G] view packed along its G rows, 8/b per byte) + N/G
            scales + N/G zero points (model dtype). Needs G | N and 8/b | G.
* quanto b: ceil((N/G) / (8/b)) * G (uint8: the [N/G, G] groups packed along rows, the last
            byte row padded) + N/G scales + N/G shifts (model dtype). Needs G | H*T*D.

plus the residual window, r * B*H*D*e per K and per V. After the prefill T = P and r = 0;
after j decode steps r = j mod period and T = P + j - r (`quantized.residual_positions`).
`analytic_quantized_kv` sums the parts per layer into a `kv.KVLayout`, which
`measure.measure_kv(cache).logical_bytes` equals exactly. `quantized_kv_bytes_per_token` and
`kv_dequant_read_bytes_estimate` are for roofline figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import torch

from benchmarks.harness.cache.kv import KVLayout, LayerKV, analytic_kv, element_bytes
from benchmarks.harness.errors import KVError
from benchmarks.harness.kvquant.backends import (
    FP8_SCALE_BYTES,
    kv_quant_backend,
    kv_shapes,
    residual_positions,
)


@dataclass(frozen=True)
class QuantizedTensorBytes:
    """The stored bytes of one layer's K (or V): quantized data, its scales and zero points
    (shifts for quanto), and the unquantized residual window."""

    packed_bytes: int
    scale_bytes: int
    zero_bytes: int
    residual_bytes: int

    @property
    def total_bytes(self) -> int:
        """Everything the layer keeps for this tensor."""
        return self.packed_bytes + self.scale_bytes + self.zero_bytes + self.residual_bytes

    @property
    def quantized_bytes(self) -> int:
        """The quantized part alone (data, scales, zero points)."""
        return self.packed_bytes + self.scale_bytes + self.zero_bytes


def quantized_tensor_bytes(
    kv_quant: str,
    *,
    shape: tuple[int, int, int],
    quantized_positions: int,
    residual_positions: int,
    group_size: int,
    dtype: torch.dtype,
) -> QuantizedTensorBytes:
    """Bytes of one K or V tensor, `shape` = (batch, heads, head_dim) (formulas: module doc)."""
    batch, heads, dim = shape
    esize = element_bytes(dtype)
    residual_bytes = residual_positions * batch * heads * dim * esize
    numel = batch * heads * quantized_positions * dim
    backend, bits = kv_quant_backend(kv_quant)
    if backend == "fp8":
        return QuantizedTensorBytes(numel, FP8_SCALE_BYTES, 0, residual_bytes)
    if numel % group_size or (backend == "quanto" and (numel // batch) % group_size):
        raise KVError(
            f"kv_quant {kv_quant}: group size {group_size} does not divide the {numel} "
            f"elements of {quantized_positions} positions; pick a divisor of heads*head_dim."
        )
    groups = numel // group_size
    per_byte = 8 // bits  # values packed into one uint8
    if backend == "hqq":
        if group_size % per_byte:
            raise KVError(
                f"kv_quant {kv_quant}: HQQ packs {per_byte} rows of the group size per byte; "
                f"group size {group_size} is not a multiple of {per_byte}."
            )
        packed_bytes = (group_size // per_byte) * groups
    else:  # quanto packs the [groups, G] rows, padding the last byte row
        packed_bytes = math.ceil(groups / per_byte) * group_size
    return QuantizedTensorBytes(packed_bytes, groups * esize, groups * esize, residual_bytes)


@dataclass(frozen=True)
class QuantizedLayer:
    """One layer's quantized cache after some positions: K and V parts."""

    index: int
    kind: str
    quantized_positions: int
    residual_positions: int
    keys: QuantizedTensorBytes
    values: QuantizedTensorBytes

    @property
    def bytes(self) -> int:
        """K and V together."""
        return self.keys.total_bytes + self.values.total_bytes


def quantized_kv_layers(
    config: Any,
    *,
    dtype: torch.dtype,
    batch: int,
    prompt_len: int,
    seq_len: int,
    kv_quant: str,
    group_size: int,
    residual: int,
) -> tuple[QuantizedLayer, ...]:
    """Per-layer parts after the prefill of `prompt_len` and `seq_len - prompt_len` steps."""
    steps = seq_len - prompt_len
    if batch <= 0 or prompt_len <= 0 or steps < 0:
        raise KVError(
            f"batch {batch}, prompt_len {prompt_len}, seq_len {seq_len}: a quantized cache "
            "starts with a prefill of at least one position and only grows from it."
        )
    held_positions = residual_positions(kv_quant, steps, residual)
    kinds = [layer.kind for layer in analytic_kv(config, dtype=dtype, batch=1, seq_len=1).layers]
    layers = []
    for index, (k_heads, k_dim, v_heads, v_dim) in enumerate(kv_shapes(config)):
        parts = [
            quantized_tensor_bytes(
                kv_quant,
                shape=(batch, heads, dim),
                quantized_positions=seq_len - held_positions,
                residual_positions=held_positions,
                group_size=group_size,
                dtype=dtype,
            )
            for heads, dim in ((k_heads, k_dim), (v_heads, v_dim))
        ]
        layers.append(
            QuantizedLayer(
                index, kinds[index], seq_len - held_positions, held_positions, parts[0], parts[1]
            )
        )
    return tuple(layers)


def analytic_quantized_kv(
    config: Any,
    *,
    dtype: torch.dtype,
    batch: int,
    prompt_len: int,
    seq_len: int,
    kv_quant: str,
    group_size: int,
    residual: int,
) -> KVLayout:
    """The `KVLayout` of a quantized cache after `seq_len` positions (prefill of
    `prompt_len`): each layer's logical K/V shape [B, heads, seq_len, dim] and its stored
    bytes, which `measure.measure_kv(cache).logical_bytes` must equal."""
    parts = quantized_kv_layers(
        config,
        dtype=dtype,
        batch=batch,
        prompt_len=prompt_len,
        seq_len=seq_len,
        kv_quant=kv_quant,
        group_size=group_size,
        residual=residual,
    )
    layers = tuple(
        LayerKV(
            index=part.index,
            kind=part.kind,
            k_shape=(batch, k_heads, seq_len, k_dim),
            v_shape=(batch, v_heads, seq_len, v_dim),
            bytes=part.bytes,
        )
        for part, (k_heads, k_dim, v_heads, v_dim) in zip(parts, kv_shapes(config), strict=True)
    )
    return KVLayout(layers=layers, total_bytes=sum(layer.bytes for layer in layers))


def quantized_kv_bytes_per_token(
    config: Any, *, dtype: torch.dtype, kv_quant: str, group_size: int, batch: int = 1
) -> float:
    """Bytes the quantized part of the cache grows by per cached position, scales and zero
    points amortized: sum over layers of (K and V widths H*D) * B * (b/8 + 2e/G); fp8 is
    B * H*D per tensor (its two 4-byte scales per layer do not grow). It leaves out the
    residual window (at most R - 1 dense positions) and quanto's padding of the last byte row
    (under G bytes), so it is the exact slope of the bytes between two flushes, as a float of
    the exact fraction."""
    if batch <= 0:
        raise KVError(f"batch is {batch}; use a positive batch size.")
    backend, bits = kv_quant_backend(kv_quant)
    widths = sum(k_h * k_d + v_h * v_d for k_h, k_d, v_h, v_d in kv_shapes(config))
    if backend == "fp8":
        return float(batch * widths)
    per_element = Fraction(bits, 8) + Fraction(2 * element_bytes(dtype), group_size)
    return float(batch * widths * per_element)


def kv_dequant_read_bytes_estimate(
    config: Any,
    *,
    dtype: torch.dtype,
    batch: int,
    prompt_len: int,
    seq_len: int,
    kv_quant: str,
    group_size: int,
    residual: int,
) -> int:
    """An estimate of the KV bytes one decode step from `seq_len` to `seq_len + 1` positions
    moves because the cache dequantizes its whole quantized prefix at every step: the
    quantized bytes read (data, scales, zero points) plus the dense-dtype K/V of the prefix
    materialized (T_q * B*H*D*e per tensor; the concatenation reads it once more, not counted).

    T_q is what the layer holds quantized before the step (`seq_len - r`); fp8 appends the
    new position first and dequantizes all `seq_len + 1`. Not counted: the dense K/V the
    attention then reads (a dense cache's own traffic, `roofline.traffic`), the residual, and
    the re-quantization of the whole prefix every `period`-th step. An estimate for roofline
    figures (what the kernels do, not measured), never compared with a measurement.
    """
    backend, _bits = kv_quant_backend(kv_quant)
    steps = seq_len - prompt_len
    held_positions = residual_positions(kv_quant, steps, residual)
    dequantized_positions = seq_len + 1 if backend == "fp8" else seq_len - held_positions
    esize = element_bytes(dtype)
    total_bytes = 0
    for k_heads, k_dim, v_heads, v_dim in kv_shapes(config):
        for heads, dim in ((k_heads, k_dim), (v_heads, v_dim)):
            part = quantized_tensor_bytes(
                kv_quant,
                shape=(batch, heads, dim),
                quantized_positions=dequantized_positions,
                residual_positions=0,
                group_size=group_size,
                dtype=dtype,
            )
            total_bytes += (
                part.quantized_bytes + dequantized_positions * batch * heads * dim * esize
            )
    return total_bytes
