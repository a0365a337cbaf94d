"""KV expectations per cache implementation, for the suite and the `kv --cache static` CLI.

* `analytic_layout(cell, config, dtype=..., seq_len=...)`: the `kv.KVLayout` this cell's cache
  holds after `seq_len` cached positions: the dynamic layout (`kv.analytic_kv`), for a static
  cell the static cache's allocated tensors, for a quantized-KV cell the quantized cache's
  stored tensors after `seq_len - prompt_len` decode steps (`kvquant.kvbytes`). Its `total_bytes`
  is what `measure.measure_kv(cache).logical_bytes` must read (`expected_logical_bytes`).
* `kv_quant_fields(cell, config, dtype, context_len)`: a quantized-KV cell's packed bytes per
  cached position and the estimated bytes a decode step at `context_len` reads (nothing for
  other cells).
* `static_fields(cell, config, dtype, cache, seq_len)`: a static cell's allocated and used
  bytes, analytic and measured, for `extra_info` (nothing for other cells).
* `static_check(config, cell, dtype, probed)`: a static cell's cache as the engine's
  asserting pass read it after the prefill and after every decode step, allocated and used
  bytes per layer, analytic against measured (`static`). Returns the mismatches.
* `static_report(request, max_cache_len)` / `run_static_cli`: the `kv` CLI's JSON for
  `--cache static [--max-cache-len L]` (exit 0, or 1 when measured bytes differ).

It deliberately does not time anything and does not choose which cells are static (the matrix).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import transformers

from benchmarks.harness.cache.kv import KVLayout, LayerKV, analytic_kv
from benchmarks.harness.cache.static import (
    StaticKV,
    analytic_static_kv,
    make_static_cache,
    measure_static_kv,
    unsupported_reason,
)
from benchmarks.harness.engine import make_prompt
from benchmarks.harness.errors import KVError
from benchmarks.harness.kvquant.kvbytes import (
    analytic_quantized_kv,
    kv_dequant_read_bytes_estimate,
    quantized_kv_bytes_per_token,
)
from benchmarks.harness.kvquant.report import KVArguments as QuantKVArguments
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model import compat
from benchmarks.harness.model.models import build_model
from benchmarks.harness.runmode.decide import causal_lm_class


def analytic_layout(cell: Cell, config: Any, *, dtype: torch.dtype, seq_len: int) -> KVLayout:
    """The K/V tensors this cell's cache holds after `seq_len` positions (DESIGN §4, §9).

    A static cell's layers hold their allocated positions, written or not; `used` bytes are
    in `static_fields` and `static_check`. A quantized-KV cell's cache was filled by a prefill
    of `cell.prompt_len` positions, then `seq_len - prompt_len` decode steps.
    """
    if cell.kv_quantized:
        return analytic_quantized_kv(
            config,
            dtype=dtype,
            batch=cell.batch,
            prompt_len=cell.prompt_len,
            seq_len=seq_len,
            kv_quant=str(cell.kv_quant),
            group_size=cell.kv_group,
            residual=cell.kv_residual_len,
        )
    dynamic = analytic_kv(config, dtype=dtype, batch=cell.batch, seq_len=seq_len)
    positions = cell.cache_positions
    if positions is None:
        return dynamic
    static = analytic_static_kv(
        config, dtype=dtype, batch=cell.batch, max_cache_len=positions, seq_len=seq_len
    )
    layers = tuple(
        LayerKV(
            index=layer.index,
            kind=layer.kind,
            k_shape=_resized(layer.k_shape, held.allocated_positions),
            v_shape=_resized(layer.v_shape, held.allocated_positions),
            bytes=held.allocated_bytes,
        )
        for layer, held in zip(dynamic.layers, static.layers, strict=True)
    )
    return KVLayout(layers=layers, total_bytes=static.allocated_bytes)


def _resized(shape: tuple[int, ...], positions: int) -> tuple[int, ...]:
    # [B, heads, positions, dim]; layers without K/V have the empty shape.
    return (shape[0], shape[1], positions, shape[3]) if shape and positions else ()


def expected_logical_bytes(cell: Cell, config: Any, dtype: torch.dtype, seq_len: int) -> int:
    """The logical K/V bytes this cell's cache holds after `seq_len` positions."""
    return analytic_layout(cell, config, dtype=dtype, seq_len=seq_len).total_bytes


def kv_quant_fields(
    cell: Cell, config: Any, dtype: torch.dtype, context_len: int | None = None
) -> dict[str, Any]:
    """`kv_quant_bytes_per_token` (the packed cache's growth per position, scales and zeros
    amortized: the slope between flushes) and `kv_dequant_read_bytes_estimate` (what one decode
    step at `context_len` reads, labelled an estimate: the packed prefix plus the dense K/V the
    implementation dequantizes it into; only with a `context_len`, i.e. for a decode step); {}
    for a cell whose cache is not quantized."""
    if not cell.kv_quantized:
        return {}
    kv_quant = str(cell.kv_quant)
    per_token = quantized_kv_bytes_per_token(
        config, dtype=dtype, kv_quant=kv_quant, group_size=cell.kv_group, batch=cell.batch
    )
    if context_len is None:
        return {"kv_quant_bytes_per_token": per_token}
    return {
        "kv_quant_bytes_per_token": per_token,
        "kv_dequant_read_bytes_estimate": kv_dequant_read_bytes_estimate(
            config,
            dtype=dtype,
            batch=cell.batch,
            prompt_len=cell.prompt_len,
            seq_len=context_len,
            kv_quant=kv_quant,
            group_size=cell.kv_group,
            residual=cell.kv_residual_len,
        ),
        "kv_dequant_read_label": (
            "estimate: the quantized prefix read, plus the dense K/V it is dequantized into "
            "each step (attention's own reads and flush re-quantization not included)"
        ),
    }


def static_fields(
    cell: Cell, config: Any, dtype: torch.dtype, cache: Any, seq_len: int
) -> dict[str, int]:
    """`kv_static_*` extra_info of a static cell whose `cache` holds `seq_len` positions."""
    positions = cell.cache_positions
    if positions is None:
        return {}
    analytic = analytic_static_kv(
        config, dtype=dtype, batch=cell.batch, max_cache_len=positions, seq_len=seq_len
    )
    measured = measure_static_kv(cache)
    return {
        "kv_static_max_cache_len": positions,
        "kv_static_positions": seq_len,
        "kv_static_analytic_allocated_bytes": analytic.allocated_bytes,
        "kv_static_measured_allocated_bytes": measured.allocated_bytes,
        "kv_static_analytic_used_bytes": analytic.used_bytes,
        "kv_static_measured_used_bytes": measured.used_bytes,
    }


def static_fields_mismatch(info: dict[str, Any]) -> str | None:
    """What differs in `static_fields` output (None: they match, or the cell is not static)."""
    if "kv_static_analytic_used_bytes" not in info:
        return None
    pairs = [
        (what, info[f"kv_static_analytic_{what}_bytes"], info[f"kv_static_measured_{what}_bytes"])
        for what in ("allocated", "used")
    ]
    wrong = [f"{what}: analytic {a}, measured {m} bytes" for what, a, m in pairs if a != m]
    return "; ".join(wrong) if wrong else None


@dataclass(frozen=True)
class StaticPoint:
    """A static cache after `positions` cached positions: analytic and measured."""

    positions: int
    analytic: StaticKV
    measured: StaticKV

    def mismatch(self) -> str | None:
        """A one-line description of what differs, or None when every layer matches."""
        if self.analytic.per_layer() == self.measured.per_layer():
            return None
        return (
            f"at {self.positions} positions: allocated/used analytic "
            f"{self.analytic.allocated_bytes}/{self.analytic.used_bytes}, measured "
            f"{self.measured.allocated_bytes}/{self.measured.used_bytes} bytes"
        )


def _static_loop(model: Any, prompt: torch.Tensor, new_tokens: int, cache: Any) -> list[StaticKV]:
    """Greedy prefill + N - 1 steps on `cache` (filled in place); the cache after each."""
    kwarg = compat.cache_kwarg(model)
    states: list[StaticKV] = []
    with torch.inference_mode():
        outputs = model(input_ids=prompt, use_cache=True, **{kwarg: cache})
        states.append(measure_static_kv(compat.output_cache(outputs)))
        for _ in range(new_tokens - 1):
            token = outputs.logits[:, -1:, :].argmax(dim=-1)
            outputs = model(input_ids=token, use_cache=True, **{kwarg: cache})
            states.append(measure_static_kv(compat.output_cache(outputs)))
    return states


def static_points(
    model: Any, prompt: torch.Tensor, new_tokens: int, max_cache_len: int, dtype: torch.dtype
) -> list[StaticPoint]:
    """Analytic and measured static-cache bytes after the prefill and after every step."""
    batch, prompt_len = int(prompt.shape[0]), int(prompt.shape[1])
    cache = make_static_cache(model, batch=batch, max_cache_len=max_cache_len)
    measured = _static_loop(model, prompt, new_tokens, cache)
    return paired_points(
        model.config,
        measured,
        batch=batch,
        prompt_len=prompt_len,
        max_cache_len=max_cache_len,
        dtype=dtype,
    )


def paired_points(
    config: Any,
    measured: Sequence[StaticKV],
    *,
    batch: int,
    prompt_len: int,
    max_cache_len: int,
    dtype: torch.dtype,
) -> list[StaticPoint]:
    """Each measured state (after the prefill, then after each step) beside its prediction."""
    return [
        StaticPoint(
            positions=prompt_len + step,
            analytic=analytic_static_kv(
                config,
                dtype=dtype,
                batch=batch,
                max_cache_len=max_cache_len,
                seq_len=prompt_len + step,
            ),
            measured=state,
        )
        for step, state in enumerate(measured)
    ]


def static_check(
    config: Any, cell: Cell, dtype: torch.dtype, probed: Sequence[StaticKV]
) -> list[str]:
    """Mismatches of a static cell's cache after the prefill and after every step (none: []).

    `probed`: `measure_static_kv` of the cell's own cache at every boundary of the engine's
    asserting pass (`Engine.generate(..., probe=measure_static_kv)`): the cache the cell's
    rounds used, through the calls they made, so a compiled cell checks its compiled path and
    compiles nothing new (a loop of its own, with other arguments, recompiled: 13 s per cell).
    """
    positions = cell.cache_positions
    if positions is None:
        raise ValueError(f"{cell.id} has no static cache")  # a bug in the caller
    if len(probed) != cell.new_tokens:
        return [
            f"{len(probed)} static-cache readings for {cell.new_tokens} points: the asserting "
            "pass ran without the cell's probe (pass `probe=kv.probe` to `Engine.generate`)"
        ]
    points = paired_points(
        config,
        probed,
        batch=cell.batch,
        prompt_len=cell.prompt_len,
        max_cache_len=positions,
        dtype=dtype,
    )
    return [m for m in (p.mismatch() for p in points) if m is not None]


class KVArguments(QuantKVArguments, Protocol):
    """What `static_report` reads of the CLI's validated `kv` request (read-only): the quantized
    report's fields and the dtype's name."""

    @property
    def dtype_name(self) -> str: ...


def static_report(request: KVArguments, max_cache_len: int | None) -> tuple[dict[str, Any], bool]:
    """The `kv --cache static` JSON object, and whether measured matched (True when analytic only).

    `max_cache_len` None sizes the cache to P + N - 1 (at least P + 1), as the suite does.
    """
    final = request.prompt_len + request.new_tokens - 1
    length = max(final, request.prompt_len + 1) if max_cache_len is None else max_cache_len
    per_step = [
        analytic_static_kv(
            request.config,
            dtype=request.dtype,
            batch=request.batch,
            max_cache_len=length,
            seq_len=request.prompt_len + step,
        )
        for step in range(request.new_tokens)
    ]
    report: dict[str, Any] = {
        "model": request.spec.name,
        "transformers": transformers.__version__,
        "cache": "static",
        "dtype": request.dtype_name,
        "batch": request.batch,
        "prompt_len": request.prompt_len,
        "new_tokens": request.new_tokens,
        "max_cache_len": length,
        "allocated_bytes": per_step[-1].allocated_bytes,
        "after_prefill_used_bytes": per_step[0].used_bytes,
        "final_used_bytes": per_step[-1].used_bytes,
        "per_step_used_bytes": [s.used_bytes for s in per_step],
        "layers": [
            {
                "index": layer.index,
                "type": layer.kind,
                "allocated_positions": layer.allocated_positions,
                "used_positions": layer.used_positions,
                "allocated_bytes": layer.allocated_bytes,
                "used_bytes": layer.used_bytes,
            }
            for layer in per_step[-1].layers
        ],
    }
    if request.device is None:
        return report, True
    model = build_model(request.spec, request.device, request.dtype, seed=request.seed)
    vocab = int(model.config.get_text_config(decoder=True).vocab_size)
    prompt = make_prompt(request.batch, request.prompt_len, vocab, request.seed, request.device)
    points = static_points(model, prompt, request.new_tokens, length, request.dtype)
    report["measured"] = {
        "device": str(request.device),
        "per_step_allocated_bytes": [p.measured.allocated_bytes for p in points],
        "per_step_used_bytes": [p.measured.used_bytes for p in points],
    }
    match = all(p.mismatch() is None for p in points)
    report["match"] = match
    return report, match


def run_static_cli(request: KVArguments, max_cache_len: int | None) -> int:
    """`kv --cache static`: print the JSON object; 0, or 1 when measured bytes differ.

    Raises KVError (exit 2 in the CLI) for an architecture whose static cache is not modelled,
    a `--max-cache-len` below the positions the request needs, or `--device meta` (used
    positions are counted from values).
    """
    reason = unsupported_reason(request.config, causal_lm_class(request.config))
    if reason is not None:
        raise KVError(f"--cache static: {reason}; use --cache dynamic.")
    final = request.prompt_len + request.new_tokens - 1
    if max_cache_len is not None and max_cache_len < final:
        raise KVError(
            f"--max-cache-len {max_cache_len} is below the {final} positions of "
            "--prompt-len + --new-tokens - 1; raise it."
        )
    if request.device is not None and request.device.type == "meta":
        raise KVError("--cache static counts used positions from values; use a real --device.")
    report, match = static_report(request, max_cache_len)
    print(json.dumps(report, indent=2))
    return 0 if match else 1
