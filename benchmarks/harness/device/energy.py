"""Energy counters per device: which hardware counter measures a device, or why none does.

`open_energy(device)` returns an `EnergyWindow` (start before the timed rounds, stop after them:
the joules in between) or an `EnergyUnavailable` with the reason:

* cuda: NVML's total-energy counter (Volta and newer), source `nvml:total_energy`;
* cpu on Linux: the powercap RAPL package domains summed over sockets (`rapl.py`), source
  `rapl:package-0+package-1`;
* cpu on macOS: `powermetrics` CPU power, as root only (`powermetrics.py`), `powermetrics:cpu`;
* mps: `powermetrics` CPU + GPU + ANE power, as root only, `powermetrics:combined`.

What is measured is **total** energy: the device's idle power is not subtracted (an idle
baseline would need its own measurement, and the tokens pay for it too), and a RAPL package
counter includes other processes on those sockets (`other_cpu_pct` says how busy they were).

Why a window over all timed rounds and not a reading per step: these counters are coarse. NVML
refreshes its energy counter every 20-100 ms and powermetrics samples every 100 ms, while a
decode step takes milliseconds; a per-step difference would be mostly zeros and a few whole
refresh intervals. Over a window of many rounds the refresh error is one interval at each end,
small against the window (`energy_window_s` is recorded so a reader can judge it).
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from benchmarks.harness.device.nvml import NvmlGpu, NvmlUnavailable
from benchmarks.harness.device.powermetrics import (
    PowermetricsSampler,
    PowermetricsUnavailable,
    open_powermetrics,
)
from benchmarks.harness.device.rapl import POWERCAP_ROOT, RaplCounter, open_rapl

Sampler = PowermetricsSampler | PowermetricsUnavailable


@dataclass(frozen=True)
class EnergyUnavailable:
    """Why no energy counter measures this device (one line, recorded as `energy_reason`)."""

    reason: str


class EnergyWindow(Protocol):
    """A counter read around a window: `start()`, then `stop()` -> joules (None: see failure)."""

    source: str
    failure: str | None

    def start(self) -> None: ...

    def stop(self) -> float | None: ...


class CumulativeWindow:
    """A window over a cumulative counter (`read_j`: joules since some origin, or None)."""

    def __init__(self, source: str, read_j: Callable[[], float | None]) -> None:
        self.source = source
        self.failure: str | None = None
        self._read_j = read_j
        self._start_j: float | None = None

    def start(self) -> None:
        """Read the counter where the window begins."""
        self._start_j = self._read_j()

    def stop(self) -> float | None:
        """Joules since `start`; None when a read failed or the counter went backwards."""
        end_j = self._read_j()
        if self._start_j is None or end_j is None:
            self.failure = f"{self.source}: the counter could not be read"
            return None
        used = end_j - self._start_j
        if used < 0:
            self.failure = f"{self.source}: the counter went backwards (driver reloaded?)"
            return None
        return used


def nvml_window(gpu: NvmlGpu | NvmlUnavailable) -> CumulativeWindow | EnergyUnavailable:
    """NVML's total-energy counter of an opened GPU, or why not (no NVML, pre-Volta GPU)."""
    if isinstance(gpu, NvmlUnavailable):
        return EnergyUnavailable(gpu.reason)
    if gpu.energy_j() is None:
        return EnergyUnavailable(
            "NVML total-energy counter not supported on this GPU (it needs Volta or newer)"
        )
    return CumulativeWindow("nvml:total_energy", gpu.energy_j)


def rapl_window(root: Path = POWERCAP_ROOT) -> CumulativeWindow | EnergyUnavailable:
    """The RAPL package counters under `root`, or why not."""
    counter = open_rapl(root)
    if not isinstance(counter, RaplCounter):
        return EnergyUnavailable(counter.reason)
    return CumulativeWindow(counter.source, counter.read_j)


def open_energy(
    device_type: str,
    *,
    gpu: NvmlGpu | NvmlUnavailable | None = None,
    system: str | None = None,
    powercap_root: Path = POWERCAP_ROOT,
    powermetrics: Callable[[str], Sampler] = open_powermetrics,
) -> EnergyWindow | EnergyUnavailable:
    """The energy window for a device type (`cuda` needs its opened NVML `gpu`), or why none."""
    system = system or platform.system()
    if device_type == "cuda":
        if gpu is None:
            return EnergyUnavailable("no NVML handle was opened for this CUDA device")
        return nvml_window(gpu)
    if device_type == "cpu" and system == "Linux":
        return rapl_window(powercap_root)
    if device_type in ("cpu", "mps") and system == "Darwin":
        sampler = powermetrics("cpu" if device_type == "cpu" else "combined")
        if isinstance(sampler, PowermetricsUnavailable):
            return EnergyUnavailable(sampler.reason)
        return sampler
    return EnergyUnavailable(f"no energy counter known for {device_type} on {system}")
