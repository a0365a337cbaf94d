"""Turn measurements into the schema-1 `extra_info` of a history record (the JSON edge).

Pure functions: statistics over per-step times (percentiles, the least-squares decode slope,
TPOT), the KV fields (analytic against measured), and a converter that makes every value plain
JSON (pytest-benchmark writes `"UNSERIALIZABLE[...]"` for a torch dtype or a numpy scalar).
The metric definitions are DESIGN §3's; each key carries its unit.

It deliberately does not time anything, touch a device, or know pytest: the suite measures,
this module only names and derives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

EXTRA_INFO_SCHEMA = 1
# Client-observed inter-token latency percentiles reported for every generate cell.
ITL_PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics.

    This is numpy's default ("linear") method, so figures match `numpy.percentile` and the
    serving benchmarks that use it (vLLM's benchmark_serving, genai-perf).
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q} outside 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    """The median (the 50th percentile)."""
    return percentile(values, 50)


def least_squares_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Ordinary least-squares slope of ys against xs; None with fewer than two distinct xs."""
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} xs against {len(ys)} ys")
    if len(xs) < 2:
        return None
    mean_x = sum(xs) / len(xs)
    mean_y = sum(ys) / len(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx == 0:
        return None
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    return sxy / sxx


def decode_slope_s_per_ktok(step_s: Sequence[float], prompt_len: int) -> float | None:
    """Growth of decode step time per 1,000 cached tokens over one generation.

    Decode step i (1-based) runs with `prompt_len + i` positions in the cache once its own K/V
    is written, so the fit is step time against that position count, times 1,000. None when
    there are fewer than two steps (N < 3).
    """
    positions = [prompt_len + i for i in range(1, len(step_s) + 1)]
    slope = least_squares_slope(positions, step_s)
    return None if slope is None else slope * 1000


def tpot_s(e2e_s: float, ttft_s: float, new_tokens: int) -> float | None:
    """Time per output token after the first: `(e2e - ttft) / (N - 1)`; None when N == 1."""
    if new_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (new_tokens - 1)


@dataclass(frozen=True)
class GenerationFigures:
    """What one whole generation (one timed round) reports: latencies and per-step series."""

    e2e_s: float
    ttft_s: float
    prefill_s: float
    step_s: tuple[float, ...]
    gap_s: tuple[float, ...]
    kv_bytes_after_prefill: int
    kv_bytes_per_step: tuple[int, ...]


def _per_position_medians(series: Sequence[Sequence[float]]) -> list[float]:
    """Element-wise medians of equally long series (one per round)."""
    return [median(list(column)) for column in zip(*series, strict=True)]


def generation_metrics(
    rounds: Sequence[GenerationFigures],
    *,
    prompt_len: int,
    e2e_rounds_s: Sequence[float] | None = None,
) -> dict[str, Any]:
    """The generate measurement's metrics (DESIGN §3) over every timed round.

    `e2e_s` is the median of `e2e_rounds_s` (the benchmark's own round times, so the field and
    the gated statistic are one quantity), or of the rounds' own `e2e_s` when the benchmark did
    not time (disabled). `ttft_s` and `generate_prefill_s` are medians over rounds; `tpot_s` =
    (e2e_s - ttft_s) / (N - 1); the ITL percentiles pool the gaps of all rounds, with
    `itl_samples` saying how many they rest on (p99 of 31 gaps is their maximum, near enough).
    `step_s` / `gap_s` are per-position medians over rounds (step i at context P + i), and the
    decode slope is fitted to those. KV bytes are the last round's (every round holds the same).
    """
    if not rounds:
        raise ValueError("generation_metrics needs at least one round")
    last = rounds[-1]
    new_tokens = len(last.step_s) + 1
    e2e_source = list(e2e_rounds_s) if e2e_rounds_s else [r.e2e_s for r in rounds]
    e2e_s = median(e2e_source)
    ttft_s = median([r.ttft_s for r in rounds])
    steps = [s for r in rounds for s in r.step_s]
    gaps = [g for r in rounds for g in r.gap_s]
    step_s = _per_position_medians([r.step_s for r in rounds])
    metrics: dict[str, Any] = {
        "e2e_s": e2e_s,
        "e2e_samples": len(e2e_source),
        "ttft_s": ttft_s,
        "ttft_samples": len(rounds),
        "generate_prefill_s": median([r.prefill_s for r in rounds]),
        # Every round's, so the report can say whether it agrees with test_prefill (consistency).
        "generate_prefill_rounds_s": [r.prefill_s for r in rounds],
        "tpot_s": tpot_s(e2e_s, ttft_s, new_tokens),
        "decode_slope_s_per_ktok": decode_slope_s_per_ktok(step_s, prompt_len),
        "step_s": step_s,
        "gap_s": _per_position_medians([r.gap_s for r in rounds]),
        "kv_bytes_after_prefill": last.kv_bytes_after_prefill,
        "kv_bytes_per_step": list(last.kv_bytes_per_step),
    }
    for q in ITL_PERCENTILES:
        metrics[f"itl_p{q}_s"] = percentile(gaps, q) if gaps else None
    metrics["itl_samples"] = len(gaps)
    metrics["step_p50_s"] = median(steps) if steps else None
    metrics["step_samples"] = len(steps)
    return metrics


@dataclass(frozen=True)
class KVCheck:
    """Analytic against measured KV bytes after prefill and after every decode step.

    `analytic_bytes[0]` / `measured_bytes[0]` are after prefill (P positions); entry i is after
    decode step i (P + i positions). They must be equal entry by entry (DESIGN §4).
    """

    bytes_per_token: int
    analytic_bytes: tuple[int, ...]
    measured_bytes: tuple[int, ...]
    storage_final_bytes: int | None

    def mismatches(self) -> list[str]:
        """One line per position count where analytic and measured bytes differ."""
        lines = []
        if len(self.analytic_bytes) != len(self.measured_bytes):
            lines.append(
                f"{len(self.measured_bytes)} measured points against "
                f"{len(self.analytic_bytes)} analytic ones"
            )
        for step, (want, got) in enumerate(
            zip(self.analytic_bytes, self.measured_bytes, strict=False)
        ):
            if want != got:
                where = "after prefill" if step == 0 else f"after decode step {step}"
                lines.append(f"{where}: analytic {want} bytes, measured {got} bytes")
        return lines

    def fields(self) -> dict[str, Any]:
        """The `kv_*` fields every measurement's extra_info carries."""
        return {
            "kv_bytes_per_token": self.bytes_per_token,
            "kv_analytic_after_prefill_bytes": self.analytic_bytes[0],
            "kv_measured_after_prefill_bytes": self.measured_bytes[0],
            "kv_analytic_final_bytes": self.analytic_bytes[-1],
            "kv_measured_final_bytes": self.measured_bytes[-1],
            "kv_storage_final_bytes": self.storage_final_bytes,
        }


def jsonable(value: Any) -> Any:
    """`value` as plain JSON: dataclasses and mappings to dicts, sequences to lists, numpy and
    torch scalars to float/int, non-finite floats to None, anything else (a dtype) to `str`."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return _scalar_or_str(value)


def _scalar_or_str(value: Any) -> Any:
    # numpy and torch scalars (and one-element tensors) have `.item()`; anything else is named.
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return jsonable(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


# Tokens one timed round processes, per measurement whose rounds are a single phase: prefill
# rounds take B x P prompt tokens, decode rounds produce B tokens (one step).
PHASE_TOKENS = {
    "prefill": lambda batch, prompt_len: batch * prompt_len,
    "decode": lambda batch, prompt_len: batch,
}


def phase_energy_fields(
    info: Mapping[str, Any], rounds_s: Sequence[float] | None, params: Mapping[str, Any]
) -> dict[str, Any]:
    """`prefill_j_per_tok` or `decode_j_per_tok` from the energy block, and `energy_timed_s`.

    `info` is the benchmark's extra_info: its `measurement` and the energy fields of
    `devstate.RoundsMeter` (`energy_method`, `energy_window_j`, `energy_window_s`,
    `energy_block_calls`); `params` the cell's axes (`batch`, `prompt_len`); `rounds_s` the
    timed rounds. A phase's figure comes only from its back-to-back block, which holds the
    timed call and nothing else (`energyblock.py`):
    `J/tok = energy_window_j / (energy_block_calls x tokens per call)`. Total energy, idle power
    included. A window around the rounds holds their setup (a cache restore is most of a
    decode round), so it makes no per-token figure: None, with `energy_reason`.

    `energy_timed_s` is the seconds of the measured operation inside the energy window: all of
    a block's window, the timed rounds' sum for a window around the rounds (the rest is setup).
    A measurement that is not one phase gets `energy_timed_s` only.
    """
    block = str(info.get("energy_method", "")).startswith("block:")
    window_s = info.get("energy_window_s")
    timed_s = window_s if block else (sum(rounds_s) if rounds_s else None)
    fields: dict[str, Any] = {"energy_timed_s": timed_s}
    tokens = PHASE_TOKENS.get(str(info.get("measurement", "")))
    batch, prompt_len = params.get("batch"), params.get("prompt_len")
    if tokens is None or not isinstance(batch, int) or not isinstance(prompt_len, int):
        return fields
    name = f"{info['measurement']}_j_per_tok"
    joules, calls = info.get("energy_window_j"), info.get("energy_block_calls")
    if block and isinstance(joules, int | float) and isinstance(calls, int) and calls > 0:
        fields[name] = float(joules) / (calls * tokens(batch, prompt_len))
        return fields
    fields[name] = None
    if not block and not info.get("energy_reason"):
        fields["energy_reason"] = (
            "no back-to-back energy block was metered: a window around the timed rounds holds "
            "their setup, so no per-token figure is made from it"
        )
    return fields
