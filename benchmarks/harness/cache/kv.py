"""KV-cache accounting: analytic bytes from a config, measured bytes from a cache object.

The analytic side (DESIGN §4) walks the decoder layers of `config.get_text_config(decoder=True)`
and says, per layer, what transformers' *dynamic* cache holds after T cached positions:

* full attention: T positions of K `[B, kv_heads, T, head_dim]` and V of the same shape;
* sliding window W: `min(T, W - 1)` positions in transformers >= 4.56 (older versions keep T);
* MLA (DeepSeek-V2/V3): the compressed latent, K `[B, 1, T, kv_lora_rank]` and
  V `[B, 1, T, qk_rope_head_dim]`, in transformers >= 5.15; expanded heads before;
* Falcon's new decoder architecture caches all query heads; `multi_query` caches one;
* linear attention, Mamba, MoE/MLP-only and KV-sharing layers hold no per-token KV.

The fixed-size conv/recurrent state of those linear-attention and Mamba layers is analytic too,
in `state.py`; `measure_kv` reports the measured one as `state_bytes`.

The measured side reads any cache object transformers returns (`Cache.layers`, the
`key_cache`/`value_cache` lists of <= 4.53, legacy tuples, `EncoderDecoderCache`, fp8
`QuantizedCache`) and reports logical bytes (`numel * element_size`) and unique storage bytes.

It deliberately does not model static caches (they allocate their maximum length up front), the
Quanto/HQQ quantized layouts, or compressed-attention layers whose rules were never verified: those
raise `KVError` on the analytic side rather than return a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import transformers
from packaging.version import Version

from benchmarks.harness.errors import KVError

_TRANSFORMERS_VERSION = Version(transformers.__version__)
# 4.56 is the first release whose models build `DynamicCache(config=...)`, which trims sliding
# layers to W - 1 positions; before it every layer of a dynamic cache keeps all T (FACTS §1.1).
SLIDING_TRIM_SINCE = Version("4.56.0")
# 5.15 switched DeepSeek-V2/V3 to caching the compressed MLA latent (FACTS §1.1).
MLA_LATENT_SINCE = Version("5.15.0")
# MLA model types whose cache layout was checked on both sides of the 5.15 boundary. Other MLA
# models (minicpm3, kimi_linear, ...) are refused rather than guessed.
_MLA_MODEL_TYPES = frozenset({"deepseek_v2", "deepseek_v3"})

# Layer-type names (transformers' `config.layer_types` vocabulary plus Jamba's
# `layers_block_type`) that hold per-token K/V, and those that hold none.
_FULL_TYPES = frozenset({"full_attention", "attention"})
_SLIDING_TYPES = frozenset({"sliding_attention", "chunked_attention"})
_NO_KV_TYPES = frozenset({"linear_attention", "mamba", "conv", "moe", "mlp", "dummy"})


@dataclass(frozen=True)
class LayerKV:
    """What one decoder layer's cache holds: K and V shapes `[B, heads, positions, dim]`."""

    index: int
    kind: str  # full_attention | sliding_attention | mla | linear_attention | mamba | dummy | ...
    k_shape: tuple[int, ...]
    v_shape: tuple[int, ...]
    bytes: int

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for the CLI: `type`, `k_shape`, `v_shape`, `bytes`."""
        return {
            "index": self.index,
            "type": self.kind,
            "k_shape": list(self.k_shape),
            "v_shape": list(self.v_shape),
            "bytes": self.bytes,
        }


@dataclass(frozen=True)
class KVLayout:
    """The analytic cache of a whole model at one sequence length."""

    layers: tuple[LayerKV, ...]
    total_bytes: int


@dataclass(frozen=True)
class _LayerRule:
    """How one layer grows: per-position K/V widths and the window (None: unbounded)."""

    kind: str
    k_heads: int
    k_dim: int
    v_heads: int
    v_dim: int
    window_positions: int | None  # the most positions the layer holds; None = all

    def held_positions(self, seq_len: int) -> int:
        if self.k_heads == 0 and self.v_heads == 0:
            return 0
        if self.window_positions is None:
            return seq_len
        return min(seq_len, self.window_positions)

    def layer_kv(self, index: int, *, batch: int, seq_len: int, element_bytes: int) -> LayerKV:
        if self.k_heads == 0 and self.v_heads == 0:
            return LayerKV(index=index, kind=self.kind, k_shape=(), v_shape=(), bytes=0)
        held = self.held_positions(seq_len)
        k_shape = (batch, self.k_heads, held, self.k_dim)
        v_shape = (batch, self.v_heads, held, self.v_dim)
        per_position = self.k_heads * self.k_dim + self.v_heads * self.v_dim
        return LayerKV(
            index=index,
            kind=self.kind,
            k_shape=k_shape,
            v_shape=v_shape,
            bytes=batch * held * per_position * element_bytes,
        )


def text_config(config: Any) -> Any:
    """The decoder's config: `get_text_config(decoder=True)` where it exists (multimodal models)."""
    getter = getattr(config, "get_text_config", None)
    if getter is None:
        return config
    try:
        return getter(decoder=True)
    except TypeError:  # very old signatures without `decoder=`
        return getter()


def required_int(config: Any, name: str) -> int:
    """`config.<name>` as a positive int; KVError naming the field otherwise."""
    value = getattr(config, name, None)
    if not isinstance(value, int) or value <= 0:
        model_type = getattr(config, "model_type", "?")
        raise KVError(
            f"config ({model_type}) field `{name}` is {value!r}; set it to a positive integer."
        )
    return value


def layer_types(config: Any, num_layers: int) -> list[str]:
    """One transformers layer-type name per decoder layer, from whichever field this version has."""
    declared = getattr(config, "layer_types", None)
    if declared is not None:
        types = [str(t) for t in declared]
    elif getattr(config, "layers_block_type", None) is not None:  # Jamba before `layer_types`
        types = [str(t) for t in config.layers_block_type]
    else:
        types = [_inferred_layer_type(config, i) for i in range(num_layers)]
    if len(types) != num_layers:
        raise KVError(
            f"config field `layer_types` has {len(types)} entries but `num_hidden_layers` is "
            f"{num_layers}; make them agree."
        )
    return _mark_shared_layers(config, types)


def _inferred_layer_type(config: Any, index: int) -> str:
    """Layer type for configs without `layer_types` (transformers 4.x), as their models decide."""
    window = getattr(config, "sliding_window", None)
    if window is None:
        return "full_attention"
    model_type = getattr(config, "model_type", "")
    if model_type == "gemma2":  # Gemma-2 alternates, sliding on even layers
        return "sliding_attention" if index % 2 == 0 else "full_attention"
    pattern = getattr(config, "sliding_window_pattern", None)
    if isinstance(pattern, int) and pattern > 0:  # Gemma-3 before `layer_types`
        return "full_attention" if (index + 1) % pattern == 0 else "sliding_attention"
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        if not getattr(config, "use_sliding_window", False):
            return "full_attention"
        max_window_layers = getattr(config, "max_window_layers", 0) or 0
        return "sliding_attention" if index >= max_window_layers else "full_attention"
    return "sliding_attention"


def _mark_shared_layers(config: Any, types: list[str]) -> list[str]:
    """Layers that reuse another layer's K/V (Gemma-3n, Gemma-4) hold none of their own."""
    try:
        modes = getattr(config, "kv_sharing_modes", None)
    except ValueError:  # Gemma-3n's property raises on inconsistent configs; use the count below
        modes = None
    if modes is not None:
        return ["dummy" if mode == "reuse" else t for t, mode in zip(types, modes, strict=True)]
    shared = getattr(config, "num_kv_shared_layers", 0) or 0
    if shared > 0:
        return types[: len(types) - shared] + ["dummy"] * shared
    return types


def _attention_heads(config: Any) -> tuple[int, int]:
    """(K/V heads as cached, head_dim) for ordinary multi-head / GQA / MQA attention."""
    heads = required_int(config, "num_attention_heads")
    hidden = required_int(config, "hidden_size")
    model_type = getattr(config, "model_type", "")
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    if model_type == "falcon":
        # The new decoder architecture broadcasts K/V to every query head *before* caching
        # (FACTS §2); the old one caches one head with multi_query, else all heads.
        if getattr(config, "new_decoder_architecture", False):
            return heads, head_dim
        return (1 if getattr(config, "multi_query", False) else heads), head_dim
    if model_type == "gpt_bigcode":
        return (1 if getattr(config, "multi_query", False) else heads), head_dim
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return int(kv_heads), int(head_dim)


def _mla_rule(config: Any) -> _LayerRule:
    model_type = getattr(config, "model_type", "")
    if model_type not in _MLA_MODEL_TYPES:
        raise KVError(
            f"config model_type `{model_type}` uses MLA (`kv_lora_rank`), whose cache layout "
            f"phasebench has not verified; use one of {sorted(_MLA_MODEL_TYPES)}."
        )
    rope_dim = required_int(config, "qk_rope_head_dim")
    if _TRANSFORMERS_VERSION >= MLA_LATENT_SINCE:
        latent = required_int(config, "kv_lora_rank")
        return _LayerRule("mla", 1, latent, 1, rope_dim, None)
    heads = required_int(config, "num_attention_heads")
    nope_dim = required_int(config, "qk_nope_head_dim")
    v_dim = required_int(config, "v_head_dim")
    return _LayerRule("mla", heads, nope_dim + rope_dim, heads, v_dim, None)


def _layer_rules(config: Any) -> list[_LayerRule]:
    cfg = text_config(config)
    num_layers = required_int(cfg, "num_hidden_layers")
    types = layer_types(cfg, num_layers)
    is_mla = getattr(cfg, "kv_lora_rank", None) is not None
    rules: list[_LayerRule] = []
    for layer_type in types:
        if layer_type in _NO_KV_TYPES:
            rules.append(_LayerRule(layer_type, 0, 0, 0, 0, None))
        elif is_mla and layer_type in _FULL_TYPES:
            rules.append(_mla_rule(cfg))
        elif layer_type in _FULL_TYPES or layer_type in _SLIDING_TYPES:
            kv_heads, head_dim = _attention_heads(cfg)
            window = _window_positions(cfg, layer_type)
            kind = "full_attention" if layer_type in _FULL_TYPES else "sliding_attention"
            rules.append(_LayerRule(kind, kv_heads, head_dim, kv_heads, head_dim, window))
        else:
            raise KVError(
                f"config layer type `{layer_type}` ({getattr(cfg, 'model_type', '?')}) has no "
                "KV rule in phasebench; add one to benchmarks/harness/cache/kv.py with a test."
            )
    return rules


def _window_positions(config: Any, layer_type: str) -> int | None:
    if layer_type in _FULL_TYPES or _TRANSFORMERS_VERSION < SLIDING_TRIM_SINCE:
        return None
    field = "attention_chunk_size" if layer_type == "chunked_attention" else "sliding_window"
    window = required_int(config, field)
    # DynamicSlidingWindowLayer keeps W - 1 positions: the next token's own K/V makes W.
    return window - 1


def element_bytes(dtype: torch.dtype) -> int:
    """Bytes per element of `dtype`."""
    return torch.empty((), dtype=dtype).element_size()


def analytic_kv(config: Any, *, dtype: torch.dtype, batch: int, seq_len: int) -> KVLayout:
    """Per-layer K/V shapes and bytes a dynamic cache holds after `seq_len` cached positions.

    `config` is a transformers config (multimodal ones are reduced to their text decoder).
    Raises KVError for layer kinds with no verified rule, or a non-positive batch/length.
    """
    if batch <= 0:
        raise KVError(f"batch is {batch}; use a positive batch size.")
    if seq_len < 0:
        raise KVError(f"sequence length is {seq_len}; use a non-negative length.")
    esize = element_bytes(dtype)
    layers = tuple(
        rule.layer_kv(i, batch=batch, seq_len=seq_len, element_bytes=esize)
        for i, rule in enumerate(_layer_rules(config))
    )
    return KVLayout(layers=layers, total_bytes=sum(layer.bytes for layer in layers))


def kv_bytes_per_token(config: Any, *, dtype: torch.dtype, batch: int = 1) -> int:
    """Bytes the cache grows by per cached position while no sliding window is full."""
    if batch <= 0:
        raise KVError(f"batch is {batch}; use a positive batch size.")
    per_position = sum(r.k_heads * r.k_dim + r.v_heads * r.v_dim for r in _layer_rules(config))
    return batch * per_position * element_bytes(dtype)
