"""Roofline arithmetic: analytic FLOPs and bytes moved per phase, % of peak.

What is counted (DESIGN §3 "roofline"), from the Hugging Face config alone:

* **FLOPs** are matrix-multiply FLOPs, 2 per multiply-add, for the decoder families whose shapes
  we know (`SUPPORTED_MODEL_TYPES`): per token and layer the q, k, v, o projections (GQA and an
  explicit `head_dim` honoured), the MLP (gated: gate, up, down = 3 matrices; GPT-2: 2 matrices of
  `n_inner` or 4 x hidden), attention scores `Q K^T` and values `A V` over the keys the kernel is
  given, and the LM head on the positions whose logits are computed (prefill: the last position
  only, as `generate` and our engine do, unless the forward cannot limit them; decode: the one
  new position).
* **Attention pairs** are the (query, key) pairs the causal mask allows
  (`flops.causal_attention_pairs`; recorded as `roofline_attention_pairs: "causal"`): prefill
  **P(P+1)/2 per sequence and layer**, a sliding layer of window W at most W keys per query;
  decode at context T: `T + 1` keys on a full layer, `min(T + 1, W)` on a sliding one (from
  transformers 4.56 exactly what the cache holds plus the new position, `kv.analytic_kv`). This
  is the work the model needs, which every correct kernel does at least: dense kernels (eager,
  math/CPU SDPA, a static cache's masked tail) also score the masked pairs and fused CUDA
  kernels compute the diagonal tiles whole, so their FLOP/s over this count is lower than what
  they execute, never higher, and > 100 % of a peak stays a bug signal. Records before this
  rule (no `roofline_attention_pairs`) counted all P^2 prefill pairs and every cached key.
* **Bytes per decode step** = weights read + KV read + KV written. Weights: every parameter once
  per step (unique storage; a tied LM head counts once, as the full matrix, because the LM head
  reads all of it); an embedding table that is *not* the LM head is read for only B rows (one row
  per sequence; the rest of the table is never touched). Buffers (RoPE `inv_freq`, ...) are
  ignored: they are tiny and usually cache-resident. KV read: the analytic KV bytes at the
  context T (`analytic_kv(...).total_bytes`). KV written: one position on every attention layer
  (`kv_bytes_per_token`). Activations are not counted: at decode they are kilobytes. **The
  dynamic cache's per-step copy is not counted**: `DynamicCache` grows by `torch.cat`, which
  reads the T cached positions and writes T + 1 again every step (about 2 x the KV bytes read,
  measured in tests/harness/roofline/test_roofline.py); a static cache does not copy.
  `decode_bytes` is the
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

from collections.abc import Callable

from torch import nn

from benchmarks.harness.roofline.flops import (
    ATTENTION_PAIRS_RULE,
    UnsupportedArchitectureError,
    decode_step_flops,
    prefill_flops,
    prefill_logits_positions,
)
from benchmarks.harness.roofline.peaks import Peaks
from benchmarks.harness.roofline.traffic import decode_step_bytes, prefill_bytes


class RooflineError(Exception):
    """An achieved FLOP/s or bytes/s above the device's peak: a measurement bug, not user input."""


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


def bandwidth_fraction(
    moved_bytes: int, rate_bytes_per_s: float, peaks: Peaks, *, mover: str, what: str
) -> tuple[float | None, str | None]:
    """% of the peak bandwidth of a step that moves `moved_bytes` through one device's memory, or
    (None, why) when they fit in its last-level cache: a DRAM roofline does not apply there.
    `mover` starts the note ("decode moves"), `what` names the rate in a `RooflineError`."""
    if peaks.cache_bytes is not None and moved_bytes <= peaks.cache_bytes:
        return None, (
            f"{mover} {moved_bytes} bytes per step, within the {peaks.cache_bytes}-byte "
            "last-level cache: no DRAM bandwidth roofline"
        )
    return achieved_fraction(rate_bytes_per_s, peaks.bandwidth_bytes_per_s, what=what), None


def peak_fields(peaks: Peaks) -> dict[str, float | str | None]:
    """The roofline fields before any phase is placed: every rate None, the peaks it would be
    read against (either engine's `roofline_extra_info` fills the rest)."""
    return {
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
        # The most GEMM rows the measured FLOP/s peak ran (None: a table peak, or none).
        "peak_flop_tokens": peaks.flop_tokens,
        "roofline_attention_pairs": ATTENTION_PAIRS_RULE,
    }


def roofline_extra_info(
    model: nn.Module,
    *,
    batch: int,
    prompt_len: int,
    peaks: Peaks,
    prefill_s: float | None = None,
    decode_step_s: float | None = None,
    kv_total: Callable[[int], int] | None = None,
) -> dict[str, float | str | None]:
    """The roofline fields of a benchmark's `extra_info` (DESIGN §3).

    `kv_total(positions)`: stored cache bytes for a cache that is not the dense dynamic one (a
    quantized cache), so decode bytes are its compulsory, stored bytes (`traffic`).

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
    fields = peak_fields(peaks)
    try:
        if prefill_s is not None and prefill_s > 0:
            flops = prefill_flops(
                model.config,
                batch=batch,
                prompt_len=prompt_len,
                logits_positions=prefill_logits_positions(model, prompt_len),
            ).total_flops
            prefill_moved = prefill_bytes(
                model, batch=batch, prompt_len=prompt_len, kv_total=kv_total
            ).total_bytes
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
            moved = decode_step_bytes(
                model, batch=batch, context_len=prompt_len, kv_total=kv_total
            ).total_bytes
            rate = moved / decode_step_s
            fields["decode_flop"] = step_flops
            fields["decode_bytes"] = moved
            fields["decode_bytes_per_s"] = rate
            pct, note = bandwidth_fraction(
                moved, rate, peaks, mover="decode moves", what="decode bytes/s"
            )
            fields["decode_pct_of_peak_bandwidth"] = pct
            if note is not None:
                fields["roofline_note"] = note
    except UnsupportedArchitectureError as unsupported:
        fields["roofline_note"] = str(unsupported)
    return fields
