"""A tensor-parallel cell's roofline: one rank's FLOPs and bytes against what serves it.

The single-device roofline (`roofline.roofline_extra_info`) takes the whole model on one device;
a tp cell's model lives on the ranks. What one rank does, from the analytic counts and the
ranks' own byte figures (`result.json`):

* **FLOPs per rank** (`tp_prefill_rank_flop`, `tp_decode_rank_flop`): a TP plan splits every
  layer's matrices and attention heads evenly over the ranks (colwise in, rowwise out), so a
  rank runs `(linear + attention) / tp` of the model's count (`roofline.flops`, causal pairs);
  the LM head is split only where the applied plan shards `lm_head` (transformers 5.x), else
  every rank computes all of it (4.57).
* **Decode bytes per rank** (`tp_decode_rank_bytes`, a list): the rank's stored weight shards
  (`tp_weights_rank_bytes`), its KV at context P (`tp_kv_rank_after_prefill_bytes`) and the
  position the step writes, taken as the rank cache's growth per step ((final - after prefill)
  / (N - 1); a full sliding window's overwrite is not counted). The all-reduces' traffic is not
  in it: it is the separate estimate `tp_allreduce_bytes_per_step_estimate`.
* **Against which peak** (`tp_roofline_scope`): on CUDA each rank has a device, so the busiest
  rank's rate is judged against one device's peak (`peaks`: the suite's for that device and
  dtype). On a CPU the ranks share the host's cores and memory, so the ranks' summed rate is
  judged against the host's peak: a rank's share of the host is not a peak anyone measured.

`tp_prefill_pct_of_peak_flops` and `tp_decode_pct_of_peak_bandwidth` are percentages, as the
single-device `*_pct_of_peak_*` fields (the same `achieved_fraction`: above 100 % raises
`RooflineError`, a measurement bug). A figure that cannot be known is None, and
`tp_roofline_note` says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.harness.roofline.flops import (
    UnsupportedArchitectureError,
    decode_step_flops,
    prefill_flops,
)
from benchmarks.harness.roofline.peaks import Peaks
from benchmarks.harness.roofline.roofline import achieved_fraction, bandwidth_fraction

PER_DEVICE = "per device: the busiest rank's rate against one device's peak"
SHARED_HOST = "shared host: the ranks' summed rate against the host's peak (one CPU serves all)"


def lm_head_sharded(plan: Mapping[str, str]) -> bool:
    """Whether the applied plan splits the LM head's output over the ranks."""
    return any(
        key.split(".")[-1] == "lm_head" and style.startswith("colwise")
        for key, style in plan.items()
    )


def rank_flops(
    config: Any, plan: Mapping[str, str], *, batch: int, prompt_len: int, world: int, phase: str
) -> int:
    """One rank's FLOPs for one prefill (`phase="prefill"`) or one decode step at context P."""
    if phase == "prefill":
        count = prefill_flops(config, batch=batch, prompt_len=prompt_len)
    else:
        count = decode_step_flops(config, batch=batch, context_len=prompt_len)
    head = count.lm_head_flops // world if lm_head_sharded(plan) else count.lm_head_flops
    return (count.linear_flops + count.attention_flops) // world + head


def decode_rank_bytes(
    weights: Sequence[int], after_prefill: Sequence[int], final: Sequence[int], new_tokens: int
) -> list[int]:
    """Per rank: its weight shards + its KV at P + one step's growth of its cache."""
    steps = max(new_tokens - 1, 1)
    return [
        w + kv + max(end - kv, 0) // steps
        for w, kv, end in zip(weights, after_prefill, final, strict=True)
    ]


def tp_roofline_fields(
    result: Mapping[str, Any],
    config: Any,
    peaks: Peaks,
    *,
    device_type: str,
    batch: int,
    prompt_len: int,
    new_tokens: int,
    measurement: str,
    median_s: float,
) -> dict[str, Any]:
    """The `tp_*` roofline fields of a prefill or decode record (module docstring)."""
    world = int(result["tp_size"])
    plan = {str(k): str(v) for k, v in (result.get("plan") or {}).items()}
    shared = device_type == "cpu"
    fields: dict[str, Any] = {
        "tp_roofline_scope": SHARED_HOST if shared else PER_DEVICE,
        "tp_roofline_note": None,
        "peak_flop_per_s": peaks.flop_per_s,
        "peak_bandwidth_bytes_per_s": peaks.bandwidth_bytes_per_s,
        "peak_source": peaks.source,
    }
    if median_s <= 0:
        fields["tp_roofline_note"] = "no positive round time"
        return fields
    try:
        flop = rank_flops(
            config, plan, batch=batch, prompt_len=prompt_len, world=world, phase=measurement
        )
    except UnsupportedArchitectureError as unsupported:
        fields["tp_roofline_note"] = str(unsupported)
        return fields
    if measurement == "prefill":
        rate = flop * (world if shared else 1) / median_s
        fields["tp_prefill_rank_flop"] = flop
        fields["tp_prefill_pct_of_peak_flops"] = achieved_fraction(
            rate, peaks.flop_per_s, what="tensor-parallel prefill FLOP/s"
        )
        return fields
    moved = decode_rank_bytes(
        result["weights_per_rank_bytes"],
        result["kv_per_rank_after_prefill_bytes"],
        result["kv_per_rank_final_bytes"],
        new_tokens,
    )
    fields["tp_decode_rank_flop"] = flop
    fields["tp_decode_rank_bytes"] = moved
    # One memory serves what is compared: the host's all ranks, a GPU's its own rank.
    served = sum(moved) if shared else max(moved)
    mover = "the ranks move" if shared else "the busiest rank moves"
    pct, note = bandwidth_fraction(
        served, served / median_s, peaks, mover=mover, what="tensor-parallel decode bytes/s"
    )
    fields["tp_decode_pct_of_peak_bandwidth"] = pct
    fields["tp_roofline_note"] = note
    return fields
