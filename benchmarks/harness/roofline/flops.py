"""Analytic FLOPs per phase, from the Hugging Face config alone (see `roofline` for the model).

`ModelShape` reads the matrix shapes; `prefill_flops` and `decode_step_flops` count 2 FLOPs per
multiply-add of every projection, the MLP, attention scores and values over the keys the kernel
is given, and the LM head. Architectures without a verified formula raise
`UnsupportedArchitectureError` (the suite records "n/a").
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.harness.cache.kv import analytic_kv, text_config
from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.model import compat

# Families whose matrices are exactly the ones counted below (validated against
# torch.utils.flop_counter in tests/harness/roofline/test_roofline.py).
SUPPORTED_MODEL_TYPES = frozenset(
    {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "gpt2"}
)
# Gated MLPs (gate, up, down); GPT-2's MLP has two matrices (c_fc, c_proj).
_PLAIN_MLP_TYPES = frozenset({"gpt2"})
_ATTENTION_KINDS = frozenset({"full_attention", "sliding_attention"})


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
    """FLOPs of one prefill forward over `[batch, prompt_len]`.

    `logits_positions` is how many positions get logits: 1 (the last, as the engine asks with
    `logits_to_keep=1`), or `prompt_len` for a model whose forward cannot limit them
    (`prefill_logits_positions(model)` says which).
    """
    check_positive(batch=batch, prompt_len=prompt_len, logits_positions=logits_positions)
    shape = ModelShape.from_config(config)
    attention_layers = sum(1 for _ in _attention_layers(config, batch=batch, seq_len=0))
    return FlopCount(
        linear_flops=batch * prompt_len * shape.linear_flops_per_token(),
        attention_flops=batch
        * attention_layers
        * prefill_attention_pairs(prompt_len)
        * shape.attention_flops_per_query_key(),
        lm_head_flops=batch * logits_positions * shape.lm_head_flops_per_position(),
    )


def prefill_attention_pairs(prompt_len: int) -> int:
    """(query, key) pairs one prefill layer scores per sequence: P^2, the causal mask not removed.

    The convention of this module and docs/measurement.md: the dense kernels phasebench times
    on CPU (eager, math SDPA) compute every score and mask afterwards, so P(P+1)/2 would
    undercount their work by half.
    """
    return prompt_len * prompt_len


def prefill_logits_positions(model: Any, prompt_len: int) -> int:
    """1 when the model's forward takes `logits_to_keep`/`num_logits_to_keep`, else prompt_len.

    Old forwards (e.g. GPT-2 on transformers 4.46) compute logits for every prompt position and
    the engine slices the last one, so the LM head really runs P times.
    """
    return 1 if compat.logits_kwarg(model) is not None else prompt_len


def decode_step_flops(config: Any, *, batch: int, context_len: int) -> FlopCount:
    """FLOPs of one decode step of `[batch, 1]` when the cache holds `context_len` positions."""
    check_positive(batch=batch, context_len=context_len)
    shape = ModelShape.from_config(config)
    keys = sum(held + 1 for held in _attention_layers(config, batch=batch, seq_len=context_len))
    return FlopCount(
        linear_flops=batch * shape.linear_flops_per_token(),
        attention_flops=batch * keys * shape.attention_flops_per_query_key(),
        lm_head_flops=batch * shape.lm_head_flops_per_position(),
    )


def _attention_layers(config: Any, *, batch: int, seq_len: int) -> Iterator[int]:
    """Positions held by each attention layer's cache after `seq_len` positions."""
    # The KV module owns the per-version cache rules; the dtype does not change positions.
    layout = analytic_kv(config, dtype=torch.float32, batch=batch, seq_len=seq_len)
    for layer in layout.layers:
        if layer.kind in _ATTENTION_KINDS:
            yield layer.k_shape[2]


def check_positive(**values: int) -> None:
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{name} is {value}; the roofline needs a positive value.")
