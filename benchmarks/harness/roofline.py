"""Roofline arithmetic: analytic FLOPs and bytes moved per phase, % of peak.

What is counted (DESIGN §3 "roofline"), from the Hugging Face config alone:

* **FLOPs** are matrix-multiply FLOPs, 2 per multiply-add, for the decoder families whose shapes
  we know (`SUPPORTED_MODEL_TYPES`): per token and layer the q, k, v, o projections (GQA and an
  explicit `head_dim` honoured), the MLP (gated: gate, up, down = 3 matrices; GPT-2: 2 matrices of
  `n_inner` or 4 x hidden), attention scores `Q K^T` and values `A V` over the keys the kernel is
  given, and the LM head on the positions whose logits are computed (prefill: the last position
  only, as `generate` and our engine do, unless the forward cannot limit them; decode: the one
  new position).
* **Attention keys** follow what the dense kernels are handed. Prefill: every query meets all
  P keys, **P^2 pairs per sequence and layer, not the causal P(P+1)/2 or P^2/2**
  (`prefill_attention_pairs`): eager and math/CPU SDPA kernels compute the masked scores, as
  `torch.utils.flop_counter` and the PaLM/nanoGPT MFU formulas count; a fused kernel that skips
  masked blocks does about half the counted attention work. Decode at context T: the new query
  meets what the layer's cache holds plus itself, `held(T) + 1`, `held` from
  `kv.analytic_kv` (T on full layers, `min(T, W - 1)` on sliding layers in transformers >=
  4.56), so KV accounting and FLOPs never disagree.
* **Bytes per decode step** = weights read + KV read + KV written. Weights: every parameter once
  per step (unique storage; a tied LM head counts once, as the full matrix, because the LM head
  reads all of it); an embedding table that is *not* the LM head is read for only B rows (one row
  per sequence; the rest of the table is never touched). Buffers (RoPE `inv_freq`, ...) are
  ignored: they are tiny and usually cache-resident. KV read: the analytic KV bytes at the
  context T (`analytic_kv(...).total_bytes`). KV written: one position on every attention layer
  (`kv_bytes_per_token`). Activations are not counted: at decode they are kilobytes. **The
  dynamic cache's per-step copy is not counted**: `DynamicCache` grows by `torch.cat`, which
  reads the T cached positions and writes T + 1 again every step (about 2 x the KV bytes read,
  measured in tests/test_roofline.py); a static cache does not copy. `decode_bytes` is the
  compulsory traffic of a step whatever the cache, so a dynamic-cache step really moves more
  and its `decode_pct_of_peak_bandwidth` understates the bandwidth it uses.
* **Bytes per prefill** = weights read once + KV written for the P positions: every parameter
  once as above, except that an embedding table that is not the LM head counts `min(B*P, rows)`
  rows (one lookup per token); KV written is the analytic cache after prefill
  (`analytic_kv(...)` at P). Activations (and, for unfused kernels, the P x P score matrices) are
  not counted, so this is the compulsory traffic and the prefill intensity FLOP/byte it gives is
  an upper bound. The counts themselves (`prefill_flop`, `prefill_bytes`, `decode_flop`,
  `decode_bytes`) are recorded next to the rates so that a report can place each phase on a
  roofline chart by arithmetic intensity.

Deliberately not counted: elementwise work (norms, activations, RoPE, softmax, residual adds,
logit soft-capping), which is O(hidden) per token against O(hidden^2) for the matrices; MoE,
MLA, linear-attention and Mamba layers (their architectures raise
`UnsupportedArchitectureError`, and the suite records "n/a" instead of a guess).

`RooflineError` is raised when an achieved figure exceeds the device's peak. That is a *bug
signal* (a wrong FLOP/byte count, an unsynchronized timer, or a stale/low peak measurement), not
bad user input, so it deliberately does not derive from `PhasebenchError`: it must surface with a
traceback and never be printed as a one-line user error.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from benchmarks.harness import compat
from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.kv import analytic_kv, kv_bytes_per_token, text_config
from benchmarks.harness.peaks import Peaks

# Families whose matrices are exactly the ones counted below (validated against
# torch.utils.flop_counter in tests/test_roofline.py).
SUPPORTED_MODEL_TYPES = frozenset(
    {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "gpt2"}
)
# Gated MLPs (gate, up, down); GPT-2's MLP has two matrices (c_fc, c_proj).
_PLAIN_MLP_TYPES = frozenset({"gpt2"})
_ATTENTION_KINDS = frozenset({"full_attention", "sliding_attention"})


class RooflineError(Exception):
    """An achieved FLOP/s or bytes/s above the device's peak: a measurement bug, not user input."""


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
    _check_positive(batch=batch, prompt_len=prompt_len, logits_positions=logits_positions)
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
    _check_positive(batch=batch, context_len=context_len)
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


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{name} is {value}; the roofline needs a positive value.")


@dataclass(frozen=True)
class DecodeBytes:
    """Bytes one decode step moves through memory (see the module docstring for the model)."""

    weights_bytes: int
    kv_read_bytes: int
    kv_written_bytes: int

    @property
    def total_bytes(self) -> int:
        """All three parts."""
        return self.weights_bytes + self.kv_read_bytes + self.kv_written_bytes


def weights_read_bytes(model: nn.Module, *, batch: int) -> int:
    """Parameter bytes one decode step of `batch` sequences reads.

    Each distinct parameter storage counts once in full, except an embedding table that is not
    the LM head's weight, which counts `min(batch, rows)` rows.
    """
    output = _output_weight(model)
    embedding_rows: dict[int, int] = {}
    for module in model.modules():
        if isinstance(module, nn.Embedding) and module.weight is not output:
            embedding_rows[id(module.weight)] = min(batch, module.num_embeddings)
    seen: set[int] = set()
    total = 0
    for param in model.parameters():  # yields shared (tied) parameters once
        key = param.untyped_storage()._cdata if param.device.type != "meta" else id(param)
        if key in seen:
            continue
        seen.add(key)
        nbytes = param.numel() * param.element_size()
        rows = embedding_rows.get(id(param))
        if rows is not None:
            nbytes = rows * (nbytes // max(param.shape[0], 1))
        total += nbytes
    return total


def _output_weight(model: nn.Module) -> nn.Parameter | None:
    getter = getattr(model, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    weight = getattr(head, "weight", None)
    return weight if isinstance(weight, nn.Parameter) else None


def decode_step_bytes(
    model: nn.Module, *, batch: int, context_len: int, dtype: torch.dtype | None = None
) -> DecodeBytes:
    """Bytes moved by one decode step at `context_len` cached positions.

    `dtype` is the KV cache's dtype; by default the dtype of the model's first parameter.
    """
    _check_positive(batch=batch, context_len=context_len)
    config = model.config
    ModelShape.from_config(config)  # refuse architectures whose layers we do not model
    kv_dtype = dtype if dtype is not None else next(model.parameters()).dtype
    return DecodeBytes(
        weights_bytes=weights_read_bytes(model, batch=batch),
        kv_read_bytes=analytic_kv(
            config, dtype=kv_dtype, batch=batch, seq_len=context_len
        ).total_bytes,
        kv_written_bytes=kv_bytes_per_token(config, dtype=kv_dtype, batch=batch),
    )


@dataclass(frozen=True)
class PrefillBytes:
    """Bytes one prefill moves through memory (see the module docstring for the model)."""

    weights_bytes: int
    kv_written_bytes: int

    @property
    def total_bytes(self) -> int:
        """Both parts."""
        return self.weights_bytes + self.kv_written_bytes


def prefill_bytes(
    model: nn.Module, *, batch: int, prompt_len: int, dtype: torch.dtype | None = None
) -> PrefillBytes:
    """Compulsory bytes of one prefill over `[batch, prompt_len]`: weights once, KV written.

    Embedding tables that are not the LM head are read for one row per token, `batch *
    prompt_len` rows at most the table. `dtype` is the KV cache's dtype; by default the dtype of
    the model's first parameter.
    """
    _check_positive(batch=batch, prompt_len=prompt_len)
    config = model.config
    ModelShape.from_config(config)  # refuse architectures whose layers we do not model
    kv_dtype = dtype if dtype is not None else next(model.parameters()).dtype
    return PrefillBytes(
        weights_bytes=weights_read_bytes(model, batch=batch * prompt_len),
        kv_written_bytes=analytic_kv(
            config, dtype=kv_dtype, batch=batch, seq_len=prompt_len
        ).total_bytes,
    )


def achieved_fraction(achieved: float, peak: float | None, *, what: str) -> float | None:
    """`achieved / peak * 100`, or None when the peak is unknown.

    Raises RooflineError above 100 %: no real kernel beats the hardware, so a higher figure
    means the count, the timer or the peak is wrong.
    """
    if peak is None or peak <= 0:
        return None
    pct = achieved / peak * 100.0
    if pct > 100.0:
        raise RooflineError(
            f"{what} is {pct:.1f}% of the peak ({achieved:.4g} vs {peak:.4g}): a measurement "
            "bug (FLOP/byte count, an unsynchronized timer, or a peak measured while the machine "
            "was busy: remeasure with refresh, or delete .phasebench/peaks.json)."
        )
    return pct


def roofline_extra_info(
    model: nn.Module,
    *,
    batch: int,
    prompt_len: int,
    peaks: Peaks,
    prefill_s: float | None = None,
    decode_step_s: float | None = None,
) -> dict[str, float | str | None]:
    """The roofline fields of a benchmark's `extra_info` (DESIGN §3).

    Give the median prefill time and/or the median decode step time measured at context
    `prompt_len`; the fields of a phase not given are None. Besides the rates, the analytic
    counts behind them are recorded: `prefill_flop` and `prefill_bytes` (one prefill; bytes =
    weights once + KV written for the P positions), `decode_flop` and `decode_bytes` (one decode
    step at context P; bytes = weights + KV read + KV written), so that `prefill_flop_per_s ==
    prefill_flop / prefill_s` and `decode_bytes_per_s == decode_bytes / decode_step_s`, and a
    chart can place each phase by arithmetic intensity (FLOP / byte). An architecture without a FLOP
    formula gives None figures and a `roofline_note`. When the decode working set fits in the
    device's last-level cache (`peaks.cache_bytes`), a DRAM bandwidth roofline does not apply:
    `decode_pct_of_peak_bandwidth` is None and the note says why.
    """
    fields: dict[str, float | str | None] = {
        "prefill_flop": None,
        "prefill_bytes": None,
        "prefill_flop_per_s": None,
        "prefill_pct_of_peak_flops": None,
        "decode_flop": None,
        "decode_bytes": None,
        "decode_bytes_per_s": None,
        "decode_pct_of_peak_bandwidth": None,
        "peak_flop_per_s": peaks.flop_per_s,
        "peak_bandwidth_bytes_per_s": peaks.bandwidth_bytes_per_s,
        "peak_source": peaks.source,
    }
    try:
        if prefill_s is not None and prefill_s > 0:
            flops = prefill_flops(
                model.config,
                batch=batch,
                prompt_len=prompt_len,
                logits_positions=prefill_logits_positions(model, prompt_len),
            ).total_flops
            prefill_moved = prefill_bytes(model, batch=batch, prompt_len=prompt_len).total_bytes
            rate = flops / prefill_s
            fields["prefill_flop"] = flops
            fields["prefill_bytes"] = prefill_moved
            fields["prefill_flop_per_s"] = rate
            fields["prefill_pct_of_peak_flops"] = achieved_fraction(
                rate, peaks.flop_per_s, what="prefill FLOP/s"
            )
        if decode_step_s is not None and decode_step_s > 0:
            step_flops = decode_step_flops(
                model.config, batch=batch, context_len=prompt_len
            ).total_flops
            moved = decode_step_bytes(model, batch=batch, context_len=prompt_len).total_bytes
            rate = moved / decode_step_s
            fields["decode_flop"] = step_flops
            fields["decode_bytes"] = moved
            fields["decode_bytes_per_s"] = rate
            if peaks.cache_bytes is not None and moved <= peaks.cache_bytes:
                fields["roofline_note"] = (
                    f"decode moves {moved} bytes per step, within the {peaks.cache_bytes}-byte "
                    "last-level cache: no DRAM bandwidth roofline"
                )
            else:
                fields["decode_pct_of_peak_bandwidth"] = achieved_fraction(
                    rate, peaks.bandwidth_bytes_per_s, what="decode bytes/s"
                )
    except UnsupportedArchitectureError as unsupported:
        fields["roofline_note"] = str(unsupported)
    return fields
