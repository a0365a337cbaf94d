"""Analytic FLOPs per phase, from the Hugging Face config alone (see `roofline` for the model).

`ModelShape` reads the matrix shapes; `prefill_flops` and `decode_step_flops` count 2 FLOPs per
multiply-add of every projection, the MLP, attention scores and values over the (query, key)
pairs the causal mask allows (`causal_attention_pairs`: a sliding layer of window W at most W
keys per query), and the LM head. Architectures without a verified formula raise
`UnsupportedArchitectureError` (the suite records "n/a").

The attention count is the work the model needs, not what a kernel does: a dense kernel (eager,
math SDPA, a static cache's masked tail) also scores the masked pairs, a fused one (flash,
memory-efficient SDPA on CUDA) skips whole masked tiles but computes the diagonal tiles whole.
Every correct kernel computes at least these pairs, so an achieved rate over this count never
exceeds the rate the device ran, and above 100 % of a peak stays a bug signal on every kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.harness.cache.kv import layer_types, text_config
from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.model import compat

# Families whose matrices are exactly the ones counted below (validated against
# torch.utils.flop_counter, less the masked pairs a dense kernel scores, in
# tests/harness/roofline/test_roofline.py).
SUPPORTED_MODEL_TYPES = frozenset(
    {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "gpt2"}
)
# Gated MLPs (gate, up, down); GPT-2's MLP has two matrices (c_fc, c_proj).
_PLAIN_MLP_TYPES = frozenset({"gpt2"})
# transformers' layer-type names (`kv.layer_types`) of causal self-attention over all positions
# and over a sliding window; the listed others hold no attention. Anything else (chunked
# attention, a layer reusing another's K/V) has no verified count.
_FULL_TYPES = frozenset({"full_attention", "attention"})
_SLIDING_TYPES = frozenset({"sliding_attention"})
_NO_ATTENTION_TYPES = frozenset({"linear_attention", "mamba", "conv", "moe", "mlp"})
# What `attention_flops` counts, recorded with the roofline fields (`roofline_attention_pairs`):
# records before it counted P^2 prefill pairs and every cached key at decode.
ATTENTION_PAIRS_RULE = "causal"


class UnsupportedArchitectureError(PhasebenchError):
    """The config's architecture has no verified FLOP formula here; record "n/a" instead."""


@dataclass(frozen=True)
class ModelShape:
    """The matrix shapes of a decoder-only transformer, read from its config."""

    model_type: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    mlp_matrices: int  # 3: gated (gate, up, down); 2: GPT-2 (c_fc, c_proj)
    vocab_size: int

    @classmethod
    def from_config(cls, config: Any) -> ModelShape:
        """Read the shapes from a transformers config (multimodal: its text decoder).

        Raises UnsupportedArchitectureError for a model type outside SUPPORTED_MODEL_TYPES or a
        config with a missing field.
        """
        cfg = text_config(config)
        model_type = str(getattr(cfg, "model_type", ""))
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedArchitectureError(
                f"config model_type `{model_type}` has no verified FLOP formula; roofline "
                f"fields are n/a (supported: {', '.join(sorted(SUPPORTED_MODEL_TYPES))})."
            )
        # GPT-2 maps num_attention_heads/hidden_size/num_hidden_layers to n_head/n_embd/n_layer.
        hidden = _positive(cfg, "hidden_size")
        heads = _positive(cfg, "num_attention_heads")
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        # Phi-3's `head_dim` attribute is None; Gemma and Qwen3 set one explicitly.
        head_dim = getattr(cfg, "head_dim", None) or hidden // heads
        if model_type in _PLAIN_MLP_TYPES:
            intermediate = getattr(cfg, "n_inner", None) or 4 * hidden
            mlp_matrices = 2
        else:
            intermediate = _positive(cfg, "intermediate_size")
            mlp_matrices = 3
        return cls(
            model_type=model_type,
            num_layers=_positive(cfg, "num_hidden_layers"),
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=int(kv_heads),
            head_dim=int(head_dim),
            intermediate_size=int(intermediate),
            mlp_matrices=mlp_matrices,
            vocab_size=_positive(cfg, "vocab_size"),
        )

    def linear_flops_per_token(self) -> int:
        """q, k, v, o projections and the MLP of all layers, for one token."""
        h, d = self.hidden_size, self.head_dim
        q_out, kv_out = self.num_heads * d, self.num_kv_heads * d
        attention = 2 * h * (q_out + 2 * kv_out) + 2 * q_out * h
        mlp = self.mlp_matrices * 2 * h * self.intermediate_size
        return self.num_layers * (attention + mlp)

    def attention_flops_per_query_key(self) -> int:
        """Scores (Q K^T) plus values (A V) for one query against one key, in one layer."""
        return 2 * 2 * self.num_heads * self.head_dim

    def lm_head_flops_per_position(self) -> int:
        """Logits for one position."""
        return 2 * self.hidden_size * self.vocab_size


def _positive(config: Any, name: str) -> int:
    value = getattr(config, name, None)
    if not isinstance(value, int) or value <= 0:
        raise UnsupportedArchitectureError(
            f"config ({getattr(config, 'model_type', '?')}) field `{name}` is {value!r}; "
            "roofline fields need it as a positive integer."
        )
    return value


@dataclass(frozen=True)
class FlopCount:
    """Matrix-multiply FLOPs of one phase, split by where they happen."""

    linear_flops: int  # q, k, v, o and MLP matrices
    attention_flops: int  # Q K^T and A V
    lm_head_flops: int

    @property
    def total_flops(self) -> int:
        """All three parts."""
        return self.linear_flops + self.attention_flops + self.lm_head_flops


def prefill_flops(
    config: Any, *, batch: int, prompt_len: int, logits_positions: int = 1
) -> FlopCount:
    """FLOPs of one prefill forward over `[batch, prompt_len]` from an empty cache.

    `logits_positions` is how many positions get logits: 1 (the last, as the engine asks with
    `logits_to_keep=1`), or `prompt_len` for a model whose forward cannot limit them
    (`prefill_logits_positions(model)` says which).
    """
    check_positive(batch=batch, prompt_len=prompt_len, logits_positions=logits_positions)
    shape = ModelShape.from_config(config)
    pairs = sum(prefill_attention_pairs(prompt_len, window) for window in attention_windows(config))
    return FlopCount(
        linear_flops=batch * prompt_len * shape.linear_flops_per_token(),
        attention_flops=batch * pairs * shape.attention_flops_per_query_key(),
        lm_head_flops=batch * logits_positions * shape.lm_head_flops_per_position(),
    )


def prefill_attention_pairs(prompt_len: int, window: int | None = None) -> int:
    """(query, key) pairs one prefill layer needs per sequence: P(P+1)/2 under a causal mask,
    at most `window` keys per query on a sliding layer (`causal_attention_pairs`)."""
    return causal_attention_pairs(prompt_len, cached=0, window=window)


def causal_attention_pairs(queries: int, *, cached: int = 0, window: int | None = None) -> int:
    """(query, key) pairs a causal attention layer needs per sequence for `queries` new
    positions after `cached` ones: the query at position t sees keys max(0, t - W + 1)..t,
    min(t + 1, W) of them (`window` W: transformers' sliding mask `kv_idx > q_idx - W`, the same
    on 4.46's Mistral/Gemma-2/Phi-3 masks; None: no window). A prefill is `cached = 0`, a
    decode step `queries = 1, cached = T`, a chunk after a cached prefix anything between.
    """
    if queries < 0 or cached < 0 or (window is not None and window <= 0):
        raise ValueError(
            f"queries {queries}, cached {cached}, window {window}: the pair count needs "
            "non-negative positions and a positive window."
        )
    last = cached + queries  # keys seen by the last query, before any window
    if window is None or last <= window:
        return (cached + 1 + last) * queries // 2
    ramp_end = max(cached, window)  # queries up to here see t + 1 keys; later ones W
    ramp = (cached + 1 + ramp_end) * (ramp_end - cached) // 2
    return ramp + (last - ramp_end) * window


def attention_windows(config: Any) -> list[int | None]:
    """One entry per causal self-attention layer: its sliding window W, or None (all keys).

    The layer types are `kv.layer_types` (the KV accounting's own reading of the config), the
    window the config's `sliding_window`, whatever the transformers version keeps in its cache.
    """
    cfg = text_config(config)
    windows: list[int | None] = []
    for kind in layer_types(cfg, _positive(cfg, "num_hidden_layers")):
        if kind in _FULL_TYPES:
            windows.append(None)
        elif kind in _SLIDING_TYPES:
            windows.append(_positive(cfg, "sliding_window"))
        elif kind not in _NO_ATTENTION_TYPES:
            raise UnsupportedArchitectureError(
                f"config ({getattr(cfg, 'model_type', '?')}) layer type `{kind}` has no "
                "verified attention pair count; roofline fields are n/a."
            )
    return windows


def prefill_logits_positions(model: Any, prompt_len: int) -> int:
    """1 when the model's forward takes `logits_to_keep`/`num_logits_to_keep`, else prompt_len.

    Old forwards (e.g. GPT-2 on transformers 4.46) compute logits for every prompt position and
    the engine slices the last one, so the LM head really runs P times.
    """
    return 1 if compat.logits_kwarg(model) is not None else prompt_len


def decode_step_flops(config: Any, *, batch: int, context_len: int) -> FlopCount:
    """FLOPs of one decode step of `[batch, 1]` when the cache holds `context_len` positions.

    The new query meets `context_len + 1` keys on a full layer and at most W on a sliding one
    (from transformers 4.56 exactly what the layer's cache holds plus itself, `kv.analytic_kv`;
    older versions keep every position and mask all but W).
    """
    check_positive(batch=batch, context_len=context_len)
    shape = ModelShape.from_config(config)
    pairs = sum(
        causal_attention_pairs(1, cached=context_len, window=window)
        for window in attention_windows(config)
    )
    return FlopCount(
        linear_flops=batch * shape.linear_flops_per_token(),
        attention_flops=batch * pairs * shape.attention_flops_per_query_key(),
        lm_head_flops=batch * shape.lm_head_flops_per_position(),
    )


def check_positive(**values: int) -> None:
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{name} is {value}; the roofline needs a positive value.")
