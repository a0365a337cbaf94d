"""Bytes a phase moves through memory: weights read, KV read and written (see `roofline`).

`decode_step_bytes` and `prefill_bytes` give the compulsory traffic of a decode step and of a
prefill; `weights_read_bytes` counts every parameter once (a tied LM head once, an embedding
table that is not the LM head only for the rows looked up).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from benchmarks.harness.cache.kv import analytic_kv, kv_bytes_per_token
from benchmarks.harness.quant.stored import is_quantized_tensor, param_stored_bytes
from benchmarks.harness.roofline.flops import ModelShape, check_positive


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

    Each distinct parameter storage counts once in full, at its stored size (a quantized weight
    with its scales and zero points, `quant.stored`), except an embedding table that is not the
    LM head's weight, which counts `min(batch, rows)` rows.
    """
    output = _output_weight(model)
    embedding_rows: dict[int, int] = {}
    for module in model.modules():
        if isinstance(module, nn.Embedding) and module.weight is not output:
            embedding_rows[id(module.weight)] = min(batch, module.num_embeddings)
    stored = param_stored_bytes(model)  # a quantized weight at its real size
    seen: set[int] = set()
    total = 0
    for param in model.parameters():  # yields shared (tied) parameters once
        key = (
            id(param)
            if param.device.type == "meta" or is_quantized_tensor(param)
            else (param.untyped_storage()._cdata)
        )
        if key in seen:
            continue
        seen.add(key)
        nbytes = stored[id(param)]
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
    model: nn.Module,
    *,
    batch: int,
    context_len: int,
    dtype: torch.dtype | None = None,
    kv_total: Callable[[int], int] | None = None,
) -> DecodeBytes:
    """Bytes moved by one decode step at `context_len` cached positions.

    `dtype` is the KV cache's dtype; by default the dtype of the model's first parameter.
    `kv_total(positions)`: the cache's stored bytes at that many positions, for a cache that is
    not the dense dynamic one (a quantized cache): the step reads what is stored at
    `context_len` and writes the growth to `context_len + 1`.
    """
    check_positive(batch=batch, context_len=context_len)
    config = model.config
    ModelShape.from_config(config)  # refuse architectures whose layers we do not model
    if kv_total is not None:
        held = kv_total(context_len)
        return DecodeBytes(
            weights_bytes=weights_read_bytes(model, batch=batch),
            kv_read_bytes=held,
            kv_written_bytes=max(kv_total(context_len + 1) - held, 0),
        )
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
    model: nn.Module,
    *,
    batch: int,
    prompt_len: int,
    dtype: torch.dtype | None = None,
    kv_total: Callable[[int], int] | None = None,
) -> PrefillBytes:
    """Compulsory bytes of one prefill over `[batch, prompt_len]`: weights once, KV written.

    Embedding tables that are not the LM head are read for one row per token, `batch *
    prompt_len` rows at most the table. `dtype` is the KV cache's dtype; by default the dtype of
    the model's first parameter; `kv_total` as for `decode_step_bytes`.
    """
    check_positive(batch=batch, prompt_len=prompt_len)
    config = model.config
    ModelShape.from_config(config)  # refuse architectures whose layers we do not model
    if kv_total is not None:  # a quantized cache: its stored bytes after the prompt
        return PrefillBytes(
            weights_bytes=weights_read_bytes(model, batch=batch * prompt_len),
            kv_written_bytes=kv_total(prompt_len),
        )
    kv_dtype = dtype if dtype is not None else next(model.parameters()).dtype
    return PrefillBytes(
        weights_bytes=weights_read_bytes(model, batch=batch * prompt_len),
        kv_written_bytes=analytic_kv(
            config, dtype=kv_dtype, batch=batch, seq_len=prompt_len
        ).total_bytes,
    )
