"""Per-rank bytes of a tensor-parallel model: KV, weights and the memory each rank needs.

* **KV per rank** (`per_rank_kv`): the analytic layout of `cache.kv.analytic_kv`, with what the
  model's TP plan shards divided out. transformers' plans shard `k_proj`/`v_proj` (or a fused
  `qkv_proj`/`query_key_value`) column-wise, so each rank computes, and caches, `Hkv / world`
  heads of every attention layer (full and sliding alike; the window is per position, not per
  head). The rule mirrors transformers' own `get_kv_heads_per_rank` (5.24,
  `distributed/tensor_parallel.py`): a colwise rule on a key projection splits the heads, no
  such rule leaves them whole on every rank.
  - `Hkv % world != 0`, MQA included (one head, tp 2): refused. The plan would split a head's
    columns; checked on 5.24 with a 1-KV-head Llama at tp 2: the weights load, then the forward
    fails with `shape '[1, 8, -1, 16]' is invalid for input of size 64`.
  - MLA (DeepSeek-V2/V3) in transformers >= 5.15 caches the compressed latent, which
    `kv_a_proj_with_mqa` produces before any sharded matrix: V2's plan gives it the
    `mla_kv_a_proj` style (replicated, a gradient hook only) and V3's plan has no attention rule
    at all. Every rank then holds the whole latent (checked on 5.24 at tp 2: K `[1, 1, T, 32]`,
    the tp-1 shape, on both ranks; the same token as tp 1). Before 5.15 the cache holds expanded
    heads whose split was never checked: refused rather than guessed.
  - Layers with fixed recurrent state (linear attention, Mamba): refused, never checked.
* **Weights per rank** (`rank_weights`): every parameter once (tied ones once), a `DTensor` by
  its local shard (`to_local()`); a DTensor's `numel()` is the *global* size, so counting it
  would double the bytes at tp 2. A DTensor replicated on every mesh dimension counts as
  replicated (whole on each rank). Subclassed (quantized) local tensors are flattened
  (`cache.measure.stored_tensors`). `shard_errors` checks across ranks that the local shards add
  up to the global tensors exactly.
* **Memory fit per rank** (`rank_fit_estimate`): weights / world + KV per rank + the activations
  of `roofline.fit` for the whole prefill (not divided: the hidden states and logits are whole on
  every rank, so the figure is an upper bound), so a cell that cannot fit is skipped at
  collection with the figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import transformers
from packaging.version import Version

from benchmarks.harness.cache.kv import KVLayout, LayerKV, analytic_kv
from benchmarks.harness.cache.measure import stored_tensors
from benchmarks.harness.device.freemem import FreeMemory
from benchmarks.harness.errors import KVError, PhasebenchError
from benchmarks.harness.model.models import ModelSpec
from benchmarks.harness.roofline.fit import (
    FitEstimate,
    Prefill,
    activation_bytes,
    fit_reason,
    model_facts,
)
from benchmarks.harness.roofline.flops import UnsupportedArchitectureError

# Projections whose output holds the attention keys, fused or not (transformers 5.24,
# `get_kv_heads_per_rank`); a "colwise" rule on one of them splits the KV heads.
KEY_PROJECTIONS = ("k_proj", "qkv_proj", "query_key_value")
# The MLA projection that makes the cached latent, and the styles that leave it whole per rank.
MLA_LATENT_PROJECTION = "kv_a_proj_with_mqa"
MLA_REPLICATED_STYLES = frozenset({"mla_kv_a_proj"})
# 5.15 switched DeepSeek-V2/V3 to caching the latent (FACTS §1.1); only that layout was checked.
MLA_LATENT_SINCE = Version("5.15.0")
_TRANSFORMERS_VERSION = Version(transformers.__version__)
_HEAD_SPLIT_KINDS = frozenset({"full_attention", "sliding_attention"})
_STATE_KINDS = frozenset({"linear_attention", "mamba", "conv"})
IGNORE_FIT = "PHASEBENCH_IGNORE_FIT=1"


class TPError(PhasebenchError):
    """A tensor-parallel cell cannot run as asked; the message says why and what to change."""


def keys_sharded(plan: Mapping[str, str]) -> bool:
    """Whether `plan` splits the KV heads: a colwise rule on a key projection."""
    return any(
        key.rsplit(".", 1)[-1] in KEY_PROJECTIONS and style == "colwise"
        for key, style in plan.items()
    )


def _mla_latent_style(plan: Mapping[str, str]) -> str | None:
    for key, style in plan.items():
        if key.rsplit(".", 1)[-1] == MLA_LATENT_PROJECTION:
            return style
    return None


def _split_heads(layer: LayerKV, world: int, model_type: str) -> LayerKV:
    heads = layer.k_shape[1]
    if heads < world:
        raise TPError(
            f"{model_type}: {heads} KV head(s) per layer < tp {world}: the TP plan splits "
            "k_proj/v_proj by output columns, which cannot give a rank less than one whole "
            f"head (transformers fails in the attention reshape); use tp <= {heads}"
        )
    if heads % world:
        raise TPError(
            f"{model_type}: num_key_value_heads {heads} is not a multiple of tp {world}: the "
            f"ranks would hold unequal head counts, which the plan cannot do; use a tp that "
            f"divides {heads}"
        )
    k_shape = (layer.k_shape[0], heads // world, *layer.k_shape[2:])
    v_shape = (layer.v_shape[0], layer.v_shape[1] // world, *layer.v_shape[2:])
    return replace(layer, k_shape=k_shape, v_shape=v_shape, bytes=layer.bytes // world)


def _mla_layer(layer: LayerKV, plan: Mapping[str, str], model_type: str) -> LayerKV:
    latent = layer.k_shape[1] == 1 and layer.v_shape[1] == 1
    if not latent or _TRANSFORMERS_VERSION < MLA_LATENT_SINCE:
        raise TPError(
            f"{model_type}: transformers {transformers.__version__} caches MLA as expanded "
            f"heads, whose split under tensor parallelism phasebench has not verified; use "
            f"transformers >= {MLA_LATENT_SINCE} (latent cache, replicated per rank)"
        )
    style = _mla_latent_style(plan)
    if style is not None and style not in MLA_REPLICATED_STYLES:
        raise TPError(
            f"{model_type}: the TP plan shards {MLA_LATENT_PROJECTION} as {style!r}, a layout "
            "of the MLA latent cache phasebench has not verified"
        )
    return layer  # every rank caches the whole latent (module docstring)


def per_rank_kv(
    config: Any,
    plan: Mapping[str, str],
    *,
    world: int,
    dtype: torch.dtype,
    batch: int,
    seq_len: int,
) -> KVLayout:
    """The K/V one rank of `world` holds after `seq_len` positions under `plan`.

    Raises TPError for a layout the plan cannot split or phasebench has not verified (module
    docstring), KVError for a layer without an analytic rule.
    """
    if world < 1:
        raise TPError(f"tp is {world}; use a positive tensor-parallel size")
    layout = analytic_kv(config, dtype=dtype, batch=batch, seq_len=seq_len)
    model_type = str(getattr(config, "model_type", "?"))
    split = keys_sharded(plan) and world > 1
    layers: list[LayerKV] = []
    for layer in layout.layers:
        if layer.kind in _STATE_KINDS:
            raise TPError(
                f"{model_type}: layer {layer.index} is {layer.kind}, whose fixed state per "
                "rank under tensor parallelism phasebench has not verified"
            )
        if layer.bytes == 0 and not layer.k_shape:  # MLP-only, MoE-only or KV-sharing layer
            layers.append(layer)
        elif layer.kind in _HEAD_SPLIT_KINDS:
            layers.append(_split_heads(layer, world, model_type) if split else layer)
        elif layer.kind == "mla":
            layers.append(_mla_layer(layer, plan, model_type) if world > 1 else layer)
        else:
            raise TPError(
                f"{model_type}: layer {layer.index} ({layer.kind}) has no per-rank KV rule"
            )
    return KVLayout(layers=tuple(layers), total_bytes=sum(layer.bytes for layer in layers))


@dataclass(frozen=True)
class RankWeights:
    """What one rank's parameters store, in bytes (tied parameters once)."""

    local_bytes: int  # this rank's shards plus the parameters every rank holds whole
    global_bytes: int  # the whole model: every DTensor at its global shape
    sharded_local_bytes: int  # this rank's part of the DTensor parameters
    sharded_global_bytes: int  # those DTensors at their global shapes
    replicated_bytes: int  # plain parameters, whole on every rank
    sharded_count: int  # number of DTensor parameters

    def to_json(self) -> dict[str, int]:
        """Plain JSON: the fields above, byte counts as ints."""
        return {
            "local_bytes": self.local_bytes,
            "global_bytes": self.global_bytes,
            "sharded_local_bytes": self.sharded_local_bytes,
            "sharded_global_bytes": self.sharded_global_bytes,
            "replicated_bytes": self.replicated_bytes,
            "sharded_count": self.sharded_count,
        }


def _dtensor_type() -> type[torch.Tensor] | None:
    if not torch.distributed.is_available():
        return None
    from torch.distributed.tensor import DTensor  # noqa: PLC0415 - absent without distributed

    return DTensor


def _stored_bytes(tensor: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in stored_tensors(tensor))


def _replicated_everywhere(parameter: torch.Tensor) -> bool:
    # A DTensor placed `Replicate()` on every mesh dimension is whole on each rank: counting it
    # as a shard would make the ranks' "shards" add up to `world` times the global tensor.
    placements = getattr(parameter, "placements", ())
    return bool(placements) and all(p.is_replicate() for p in placements)


def rank_weights(model: torch.nn.Module) -> RankWeights:
    """This rank's parameter bytes, a DTensor by its local shard (never its global numel)."""
    dtensor = _dtensor_type()
    sharded_local = sharded_global = replicated = count = 0
    with torch.no_grad():
        for parameter in model.parameters():  # `parameters()` yields a tied parameter once
            if dtensor is None or not isinstance(parameter, dtensor):
                replicated += _stored_bytes(parameter)
                continue
            local = parameter.to_local()  # type: ignore[attr-defined]
            if _replicated_everywhere(parameter):
                replicated += _stored_bytes(local)
                continue
            sharded_local += _stored_bytes(local)
            # The global figure is wanted here, for the cross-rank check only.
            sharded_global += parameter.numel() * parameter.element_size()
            count += 1
    return RankWeights(
        local_bytes=sharded_local + replicated,
        global_bytes=sharded_global + replicated,
        sharded_local_bytes=sharded_local,
        sharded_global_bytes=sharded_global,
        replicated_bytes=replicated,
        sharded_count=count,
    )


def shard_errors(ranks: Sequence[RankWeights]) -> list[str]:
    """What is wrong with the ranks' weights taken together (empty: the shards add up).

    Every rank sees the same global model and the same replicated bytes, and the local shards
    sum to the global DTensors exactly; with anything sharded, each rank stores less than all.
    """
    if not ranks:
        return ["no rank reported its weights"]
    errors: list[str] = []
    first = ranks[0]
    for rank, weights in enumerate(ranks):
        if weights.global_bytes != first.global_bytes:
            errors.append(
                f"rank {rank} sees a {weights.global_bytes} B model, rank 0 {first.global_bytes} B"
            )
        if weights.replicated_bytes != first.replicated_bytes:
            errors.append(
                f"rank {rank} holds {weights.replicated_bytes} B replicated, rank 0 "
                f"{first.replicated_bytes} B"
            )
        if weights.sharded_count and weights.local_bytes >= weights.global_bytes:
            errors.append(
                f"rank {rank} stores {weights.local_bytes} B, not less than the global "
                f"{weights.global_bytes} B"
            )
    local_sum = sum(w.sharded_local_bytes for w in ranks)
    if local_sum != first.sharded_global_bytes:
        errors.append(
            f"the ranks' shards add up to {local_sum} B, the sharded parameters are "
            f"{first.sharded_global_bytes} B"
        )
    return errors


def rank_fit_estimate(
    spec: ModelSpec,
    plan: Mapping[str, str],
    *,
    tp: int,
    dtype: torch.dtype,
    batch: int,
    prompt_len: int,
    new_tokens: int,
    device_type: str,
) -> FitEstimate:
    """One rank's memory need: weights / tp + KV per rank + the prefill's activations.

    Weights come from the architecture built on the meta device (`roofline.fit.model_facts`);
    `ceil(weights / tp)` leaves the few replicated norms out (a few KB per layer).
    """
    facts = model_facts(spec, dtype, device_type=device_type)
    final = prompt_len + new_tokens - 1
    notes: list[str] = []
    cache_bytes: int | None = None
    largest_layer = 0
    try:
        layout = per_rank_kv(facts.config, plan, world=tp, dtype=dtype, batch=batch, seq_len=final)
        cache_bytes = layout.total_bytes
        largest_layer = max((layer.bytes for layer in layout.layers), default=0)
    except (KVError, TPError) as error:
        notes.append(f"KV not estimated: {str(error).splitlines()[0]}")
    activations: int | None = None
    try:
        activations = activation_bytes(
            facts.config,
            Prefill(
                batch=batch,
                prompt_len=prompt_len,
                dtype=dtype,
                attention=facts.attention,
                device_type=device_type,
                limits_logits=facts.limits_logits,
                cache_layer_bytes=largest_layer,
            ),
        )
    except UnsupportedArchitectureError as error:
        notes.append(f"activations not estimated: {str(error).splitlines()[0]}")
    return FitEstimate(
        weights_bytes=math.ceil(facts.weights_bytes / tp),
        cache_bytes=cache_bytes,
        cache_positions=final,
        batch=batch,
        activation_bytes=activations,
        notes=tuple(notes),
    )


def rank_fit_reason(estimate: FitEstimate, free: FreeMemory, tp: int) -> str | None:
    """The skip reason when one rank's need exceeds one device's free memory, else None."""
    reason = fit_reason(estimate, free, IGNORE_FIT)
    return None if reason is None else f"per rank of tp {tp}: {reason}"
