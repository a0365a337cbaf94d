"""Will a cell fit in the device's memory? An estimate from the config, made before building.

`need = weights + cache + activations`, each from the architecture alone:

* **weights**: every parameter's bytes, a tied LM head once, counted on a model built on the
  meta device (no memory, no values) by the roofline's own counter
  (`traffic.weights_read_bytes` with every embedding row read).
* **cache**: the analytic KV bytes at the cell's final length, P + N - 1 positions (a static
  cache: what it allocates), plus the fixed state of linear-attention/Mamba layers; computed by
  the caller (`plan`), which knows the cell's cache implementation.
* **activations** of the prefill (the phase with the largest transients), for T = B * P
  tokens, element size e, hidden h, H query and Hkv key/value heads of width d, MLP width I:
  `ACTIVATION_MARGIN x (hidden + max(attention, mlp) + logits + cache copy)` where
  - hidden = T * h * (3e + 4): the residual stream, the normed input, the block output and the
    float32 copy the norm computes;
  - attention = T * (4H + 2Hkv) * d * e: q and the output, k and v, and k and v expanded to
    H heads (`repeat_kv`); B * P^2 * e for the 4-D additive mask transformers builds for eager
    attention, sliding windows and (4.x) many SDPA calls, counted always as a bound; plus
    B * H * P^2 * (e + 4) where the kernel materialises the scores
    (eager attention on every device: the scores and their float32 softmax; SDPA on MPS, whose
    kernel is a matmul-softmax-matmul graph with a float32 score matrix). CUDA and CPU SDPA,
    flash and flex attention tile the scores and add none;
  - mlp = T * I * e * 3 for gated MLPs (gate, up, their product); 4 for Phi-3 (its fused
    gate_up output, 2I wide, lives while the activation and the product are made) and GPT-2 (the
    fc output and its tanh GELU's temporaries, three alive at once);
  - logits = B * L * vocab * 4: L = 1 (`logits_to_keep`) or P for an old forward that cannot
    limit them, at float32 width to bound an upcast or a soft-capping copy;
  - cache copy = the largest layer's KV (a dynamic cache grows by `torch.cat`, so for a moment
    one layer holds its old and new tensors; 0 for a static cache).
  Layers run one after another, so one layer's intermediates are alive at a time; attention and
  MLP intermediates do not coexist. `ACTIVATION_MARGIN` covers allocator rounding and the small
  temporaries not listed (RoPE, residual adds).

A figure that cannot be estimated (an architecture without a shape formula or KV rule) is left
out and named in `notes`: the need is then a lower bound, still enough to skip what cannot fit.
This module does not read free memory (`device.freemem`) or decide skips (`plan`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.harness.cache.kv import element_bytes
from benchmarks.harness.device.freemem import FreeMemory
from benchmarks.harness.model import compat
from benchmarks.harness.model.models import ModelSpec, build_meta_model
from benchmarks.harness.quant.predict import predict_weights
from benchmarks.harness.roofline.flops import ModelShape
from benchmarks.harness.roofline.traffic import weights_read_bytes

ACTIVATION_MARGIN = 1.25
FORMULA = (
    "activations = 1.25 x (hidden + max(attention, MLP) + logits + a cache layer's copy) of "
    "one prefill layer, docs/suite.md 'Memory fit'"
)
# `weights_read_bytes` counts an embedding that is not the LM head for `batch` rows; a batch
# beyond any vocabulary counts every row, i.e. the resident table.
_ALL_ROWS = 1 << 62
_LOGITS_BYTES = 4  # float32 width whatever the dtype (module docstring)
_NORM_UPCAST_BYTES = 4
_FUSED_GATE_UP = frozenset({"phi3"})  # one `gate_up_proj` matrix, chunked into gate and up


@dataclass(frozen=True)
class ModelFacts:
    """What the fit needs of a model in one dtype, read once from its meta-device build."""

    config: Any
    weights_bytes: int
    attention: str  # the kernel transformers picked (`config._attn_implementation`)
    limits_logits: bool  # the forward takes `logits_to_keep` (else logits for all P)


def model_facts(
    spec: ModelSpec, dtype: torch.dtype, quant: str = "none", device_type: str = "cpu"
) -> ModelFacts:
    """Build `spec` on the meta device (a checkpoint from its config only) and read its facts;
    the weights as method `quant` stores them on `device_type`."""
    model = build_meta_model(spec, dtype)
    weights = weights_read_bytes(model, batch=_ALL_ROWS)
    if quant != "none":  # the stored bytes the method will leave (`quant.predict`)
        weights = predict_weights(model, quant, dtype=dtype, device_type=device_type).total_bytes
    return ModelFacts(
        config=model.config,
        weights_bytes=weights,
        attention=str(getattr(model.config, "_attn_implementation", None) or "eager"),
        limits_logits=compat.logits_kwarg(model) is not None,
    )


def dense_scores(attention: str, device_type: str) -> bool:
    """Whether the attention kernel materialises the `[B, H, P, P]` scores (module docstring)."""
    return attention == "eager" or (attention == "sdpa" and device_type == "mps")


@dataclass(frozen=True)
class Prefill:
    """The shape of the prefill whose activations are estimated."""

    batch: int
    prompt_len: int
    dtype: torch.dtype
    attention: str
    device_type: str
    limits_logits: bool
    cache_layer_bytes: int  # the largest layer's KV (0: a static cache, which never copies)


def activation_bytes(config: Any, prefill: Prefill) -> int:
    """The prefill's transient bytes by the module docstring's formula.

    Raises UnsupportedArchitectureError for an architecture `ModelShape` does not know.
    """
    shape = ModelShape.from_config(config)
    e = element_bytes(prefill.dtype)
    batch, length = prefill.batch, prefill.prompt_len
    tokens = batch * length
    hidden = tokens * shape.hidden_size * (3 * e + _NORM_UPCAST_BYTES)
    heads, width = shape.num_heads, shape.head_dim
    attention = tokens * (4 * heads + 2 * shape.num_kv_heads) * width * e
    attention += batch * length * length * e  # the 4-D mask
    if dense_scores(prefill.attention, prefill.device_type):
        attention += batch * heads * length * length * (e + 4)
    mlp = tokens * shape.intermediate_size * _mlp_tensors(shape) * e
    logits_positions = 1 if prefill.limits_logits else length
    logits = batch * logits_positions * shape.vocab_size * _LOGITS_BYTES
    transient = hidden + max(attention, mlp) + logits + prefill.cache_layer_bytes
    return math.ceil(ACTIVATION_MARGIN * transient)


def _mlp_tensors(shape: ModelShape) -> int:
    """`T x I` tensors alive at the MLP's peak (module docstring)."""
    return 4 if shape.mlp_matrices == 2 or shape.model_type in _FUSED_GATE_UP else 3


@dataclass(frozen=True)
class FitEstimate:
    """The parts of a cell's memory need; a part that could not be estimated is None."""

    weights_bytes: int
    cache_bytes: int | None
    cache_positions: int
    batch: int
    activation_bytes: int | None
    notes: tuple[str, ...] = ()  # what is left out of `need_bytes`, and why

    @property
    def need_bytes(self) -> int:
        """Weights + cache + activations (the known parts: a lower bound when notes say so)."""
        return self.weights_bytes + (self.cache_bytes or 0) + (self.activation_bytes or 0)

    def describe(self) -> str:
        """`needs 26.0 GB (weights 16.1 GB + KV 4.6 GB at 4351 tokens x b8 + activations ...)`."""
        parts = [f"weights {gb(self.weights_bytes)}"]
        if self.cache_bytes is not None:
            parts.append(
                f"KV {gb(self.cache_bytes)} at {self.cache_positions} tokens x b{self.batch}"
            )
        if self.activation_bytes is not None:
            parts.append(f"activations {gb(self.activation_bytes)}")
        text = (
            f"needs {'at least ' if self.notes else ''}{gb(self.need_bytes)} ({' + '.join(parts)})"
        )
        return text + "".join(f"; {note}" for note in self.notes)


def fit_reason(estimate: FitEstimate, free: FreeMemory, override: str) -> str | None:
    """The skip reason when the estimate exceeds the free memory; None when it fits or when the
    free memory is unknown (nothing is skipped on a guess). `override` names the way out."""
    if free.free_bytes is None or estimate.need_bytes <= free.free_bytes:
        return None
    formula = f"; {FORMULA}" if estimate.activation_bytes is not None else ""
    return (
        f"{estimate.describe()} > {gb(free.free_bytes)} free on {free.device} ({free.source})"
        f"{formula}; {override} runs it anyway"
    )


def gb(nbytes: int) -> str:
    """Decimal gigabytes with one decimal (`16.1 GB`); under 1 GB, megabytes (`50.2 MB`)."""
    if nbytes >= 10**9:
        return f"{nbytes / 1e9:.1f} GB"
    return f"{nbytes / 1e6:.1f} MB"


def notes_for(errors: Sequence[tuple[str, Exception]]) -> tuple[str, ...]:
    """`(what, error)` pairs as notes: `KV not estimated: <the error's first line>`."""
    return tuple(f"{what} not estimated: {str(error).splitlines()[0]}" for what, error in errors)
