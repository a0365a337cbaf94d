"""The device's state and energy around one benchmark's timed rounds, as extra_info fields.

`RoundsMeter(device)` is started just before a benchmark's timed rounds and stopped just after
them (`benchmarks.suite.Rounds`); nothing is read inside the rounds, so the timed path is
untouched. It records:

* **GPU state** (CUDA, through NVML, `nvml.py`): SM and memory clocks sampled before and after
  the rounds (`gpu_sm_clock_mhz_min` / `_max`, `gpu_mem_clock_mhz_min`) against the GPU's
  maximum clocks, the throttle reasons seen in either sample (`gpu_throttle_reasons`; "gpu_idle"
  is left out: both samples are taken while the GPU waits for the host, by construction), the
  largest sampled power draw and the power limit, and `gpu_power_w_mean` = the energy counter's
  joules over the window / its seconds (a true mean, where two power samples would not be).
  Off CUDA, or without NVML, every `gpu_*` field is None and `gpu_state_reason` says why.
* **Energy** (`energy.py`): `energy_window_j` over `energy_window_s` seconds, from the counter
  named by `energy_source`; None with `energy_reason` where there is none. The window includes
  the untimed setup between rounds; `records.phase_energy_fields` turns it into joules per token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from benchmarks.harness.device.devices import resolve_device
from benchmarks.harness.device.energy import EnergyUnavailable, EnergyWindow, open_energy
from benchmarks.harness.device.nvml import NvmlGpu, NvmlUnavailable, open_gpu

IDLE_REASON = "gpu_idle"

GPU_FIELDS = (
    "gpu_nvml_index",
    "gpu_sm_clock_mhz_min",
    "gpu_sm_clock_mhz_max",
    "gpu_mem_clock_mhz_min",
    "gpu_max_sm_clock_mhz",
    "gpu_max_mem_clock_mhz",
    "gpu_throttle_reasons",
    "gpu_power_w_mean",
    "gpu_power_w_max",
    "gpu_power_limit_w",
)


def _sample(gpu: NvmlGpu) -> dict[str, Any]:
    return {
        "sm": gpu.sm_clock_mhz(),
        "mem": gpu.mem_clock_mhz(),
        "throttle": gpu.throttle_reasons(),
        "power": gpu.power_w(),
    }


def _present(samples: list[dict[str, Any]], key: str) -> list[Any]:
    return [s[key] for s in samples if s[key] is not None]


class RoundsMeter:
    """GPU state and energy around a window (`start()`, rounds, `stop()` -> extra_info fields).

    `open_nvml` and `open_counter` are injectable (tests give fakes); `clock` times the window.
    """

    def __init__(
        self,
        device: torch.device | None,
        *,
        open_nvml: Callable[[int], NvmlGpu | NvmlUnavailable] | None = None,
        open_counter: Callable[..., EnergyWindow | EnergyUnavailable] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._device = device
        self._open_nvml = open_nvml or open_gpu
        self._open_counter = open_counter or open_energy
        self._clock = clock
        self._gpu: NvmlGpu | NvmlUnavailable | None = None
        self._energy: EnergyWindow | EnergyUnavailable | None = None
        self._before: dict[str, Any] | None = None
        self._started_s = 0.0

    def start(self) -> None:
        """Open the counters, sample the GPU, then read the energy counter (last: the rounds
        follow). Never raises: a counter that fails is recorded as unavailable."""
        device = self._device
        if device is not None and device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            self._gpu = self._open_nvml(index)
        if isinstance(self._gpu, NvmlGpu):
            self._before = _sample(self._gpu)
        if device is None:
            self._energy = EnergyUnavailable("the benchmark names no device")
        else:
            try:
                self._energy = self._open_counter(device.type, gpu=self._gpu)
            except Exception as error:  # a counter must never cost the benchmark its rounds
                self._energy = EnergyUnavailable(f"opening the energy counter failed: {error}")
        if not isinstance(self._energy, EnergyUnavailable):
            try:
                self._energy.start()
            except Exception as error:  # e.g. powermetrics could not be spawned
                self._energy = EnergyUnavailable(f"{self._energy.source} did not start: {error}")
        self._started_s = self._clock()

    def stop(self) -> dict[str, Any]:
        """Read the energy counter, sample the GPU again, close NVML; the extra_info fields."""
        window_s = self._clock() - self._started_s
        fields: dict[str, Any] = {"energy_window_s": window_s, "energy_window_j": None}
        energy = self._energy
        if energy is None or isinstance(energy, EnergyUnavailable):
            reason = energy.reason if energy is not None else "the meter was not started"
            fields.update({"energy_source": None, "energy_reason": reason})
        else:
            try:
                joules = energy.stop()
            except Exception as error:  # a reading must never cost the benchmark its record
                joules, energy.failure = None, f"{energy.source}: {error}"
            fields["energy_window_j"] = joules
            fields["energy_source"] = energy.source if joules is not None else None
            fields["energy_reason"] = energy.failure if joules is None else None
            if joules is not None and joules == 0:
                fields["energy_window_j"] = None
                fields["energy_source"] = None
                fields["energy_reason"] = (
                    f"{energy.source}: the counter did not advance over {window_s:.3f} s "
                    "(shorter than its refresh interval): more rounds are needed"
                )
        fields.update(self._gpu_fields(fields))
        if isinstance(self._gpu, NvmlGpu):
            self._gpu.close()
        return fields

    def _gpu_fields(self, energy: dict[str, Any]) -> dict[str, Any]:
        fields: dict[str, Any] = dict.fromkeys(GPU_FIELDS)
        gpu = self._gpu
        if not isinstance(gpu, NvmlGpu):
            fields["gpu_state_reason"] = (
                gpu.reason if isinstance(gpu, NvmlUnavailable) else "not a CUDA device"
            )
            return fields
        samples = [s for s in (self._before, _sample(gpu)) if s is not None]
        sm, mem, power = (_present(samples, k) for k in ("sm", "mem", "power"))
        throttles = _present(samples, "throttle")
        seen = sorted({r for reasons in throttles for r in reasons if r != IDLE_REASON})
        window_j, window_s = energy["energy_window_j"], energy["energy_window_s"]
        from_counter = energy["energy_source"] == "nvml:total_energy" and window_s > 0
        fields.update(
            {
                "gpu_state_reason": None,
                "gpu_nvml_index": gpu.nvml_index,
                "gpu_sm_clock_mhz_min": min(sm, default=None),
                "gpu_sm_clock_mhz_max": max(sm, default=None),
                "gpu_mem_clock_mhz_min": min(mem, default=None),
                "gpu_max_sm_clock_mhz": gpu.max_sm_clock_mhz(),
                "gpu_max_mem_clock_mhz": gpu.max_mem_clock_mhz(),
                "gpu_throttle_reasons": seen if throttles else None,
                "gpu_power_w_mean": window_j / window_s if from_counter else None,
                "gpu_power_w_max": max(power, default=None),
                "gpu_power_limit_w": gpu.power_limit_w(),
            }
        )
        return fields


def meter_for(params: Mapping[str, object]) -> RoundsMeter:
    """A meter for the device a benchmark's params name (`cuda:1`, ...); no device: no readings."""
    spec = params.get("device")
    return RoundsMeter(resolve_device(spec) if isinstance(spec, str) else None)
