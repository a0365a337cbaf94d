"""The GPU's state over a window (a benchmark's timed rounds), from NVML reads at its edges only.

A reading taken after a device sync sees an idle GPU: a power cap or thermal slowdown during a
700-W prefill is over by then, and the clocks read are idle clocks (issue 30, row 3). So every
figure here comes from something NVML *accumulates* during the window, read once before it
(`read_edge`) and once after (`window_fields`); nothing runs beside the rounds (a sampling
thread would take the GIL from the timed path whenever it woke):

* **Throttle time**: NVML's cumulative violation counters (`NvmlGpu.violation_s`), differenced:
  `gpu_throttle_power_s` and `gpu_throttle_thermal_s`, the seconds of the window the clocks
  were held below the application clocks by the power or the thermal limiter.
* **Clocks and power during the window**: the driver's own sample buffers (`NvmlGpu.samples`),
  read after the window for the samples newer than the newest one before it:
  `gpu_sm_clock_mhz_min` / `_max`, `gpu_mem_clock_mhz_min` over `gpu_clock_samples` SM-clock
  samples, and `gpu_power_w_max` over `gpu_power_samples` power samples. How often the driver
  samples is its own (the counts say how much the figures rest on); a buffer that holds fewer
  samples than the window had keeps the newest.
* `gpu_throttle_reasons`: the reasons NVML reports at the two edges, as before (gpu_idle left
  out: both edges see a GPU waiting for the host). Only a state that outlasts the rounds shows
  there (applications clocks, a slowdown still on); throttling *during* the rounds is in the
  `gpu_throttle_*_s` counters.

A reading this GPU or driver lacks is None, and `gpu_state_note` says which and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.harness.device.nvml import SAMPLE_KINDS, VIOLATION_POLICIES, NvmlGpu, Sample

IDLE_REASON = "gpu_idle"

GPU_FIELDS = (
    "gpu_nvml_index",
    "gpu_window_s",
    "gpu_sm_clock_mhz_min",
    "gpu_sm_clock_mhz_max",
    "gpu_mem_clock_mhz_min",
    "gpu_clock_samples",
    "gpu_max_sm_clock_mhz",
    "gpu_max_mem_clock_mhz",
    "gpu_throttle_reasons",
    "gpu_throttle_power_s",
    "gpu_throttle_thermal_s",
    "gpu_power_w_mean",
    "gpu_power_w_max",
    "gpu_power_samples",
    "gpu_power_limit_w",
)


@dataclass(frozen=True)
class Edge:
    """What is read at one edge of the window: violation totals, the newest buffered sample's
    timestamp per kind (0 when the buffer is empty or unsupported), the current reasons."""

    violation_s: dict[str, float | None]
    newest_sample_us: dict[str, int]
    reasons: tuple[str, ...] | None


def read_edge(gpu: NvmlGpu, *, with_samples: bool) -> Edge:
    """Read the counters at an edge; `with_samples`: also where each sample buffer ends (the
    window's first edge: the samples after it are the window's)."""
    newest: dict[str, int] = {}
    if with_samples:
        for kind in SAMPLE_KINDS:
            buffered = gpu.samples(kind)
            newest[kind] = buffered[-1].timestamp_us if buffered else 0
    return Edge(
        violation_s={policy: gpu.violation_s(policy) for policy in VIOLATION_POLICIES},
        newest_sample_us=newest,
        reasons=gpu.throttle_reasons(),
    )


def window_fields(
    gpu: NvmlGpu, before: Edge, window_s: float, power_w_mean: float | None
) -> dict[str, Any]:
    """The `gpu_*` fields of the window that began at `before` and ends now (read here)."""
    after = read_edge(gpu, with_samples=False)
    notes: list[str] = []
    in_window = {kind: gpu.samples(kind, before.newest_sample_us[kind]) for kind in SAMPLE_KINDS}
    sm, mem, power = (_values(in_window[k], k, notes) for k in SAMPLE_KINDS)
    throttle = {
        policy: _delta(before.violation_s[policy], after.violation_s[policy], policy, notes)
        for policy in VIOLATION_POLICIES
    }
    edges = [r for r in (before.reasons, after.reasons) if r is not None]
    return {
        "gpu_state_reason": None,
        "gpu_nvml_index": gpu.nvml_index,
        "gpu_window_s": window_s,
        "gpu_sm_clock_mhz_min": min(sm, default=None),
        "gpu_sm_clock_mhz_max": max(sm, default=None),
        "gpu_mem_clock_mhz_min": min(mem, default=None),
        "gpu_clock_samples": len(sm) if in_window["sm_clock_mhz"] is not None else None,
        "gpu_max_sm_clock_mhz": gpu.max_sm_clock_mhz(),
        "gpu_max_mem_clock_mhz": gpu.max_mem_clock_mhz(),
        "gpu_throttle_reasons": (
            sorted({r for reasons in edges for r in reasons if r != IDLE_REASON}) if edges else None
        ),
        "gpu_throttle_power_s": throttle["power"],
        "gpu_throttle_thermal_s": throttle["thermal"],
        "gpu_power_w_mean": power_w_mean,
        "gpu_power_w_max": max(power, default=None),
        "gpu_power_samples": len(power) if in_window["power_w"] is not None else None,
        "gpu_power_limit_w": gpu.power_limit_w(),
        "gpu_state_note": "; ".join(notes) or None,
    }


def unavailable_fields(reason: str) -> dict[str, Any]:
    """Every `gpu_*` field None, and why (off CUDA, no NVML, no GPU matching torch's)."""
    return {**dict.fromkeys(GPU_FIELDS), "gpu_state_reason": reason, "gpu_state_note": None}


def _values(samples: list[Sample] | None, kind: str, notes: list[str]) -> list[float]:
    if samples is None:
        notes.append(f"no {kind} samples: the driver keeps none for this GPU")
        return []
    if not samples:
        notes.append(f"no {kind} sample in the window: the driver sampled none during it")
    return [s.value for s in samples]


def _delta(start: float | None, end: float | None, policy: str, notes: list[str]) -> float | None:
    if start is None or end is None:
        notes.append(f"no {policy} violation counter (nvmlDeviceGetViolationStatus unsupported)")
        return None
    if end < start:
        notes.append(f"the {policy} violation counter went backwards (driver reloaded?)")
        return None
    return end - start
