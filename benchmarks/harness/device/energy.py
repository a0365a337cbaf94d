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

Why a long window, and what it can resolve: these counters are coarse. NVML's energy counter
advances about every 100 ms (`NVML_ENERGY_UPDATE_PERIOD_S`), powermetrics samples every 100 ms
(`powermetrics.INTERVAL_MS`), RAPL about every 1 ms; a decode step takes milliseconds. The
difference of two reads covers the window to within one update period (the value read is the
counter's last update), so a window is metered only when it spans at least
`ENERGY_MIN_COUNTER_UPDATES` updates and `ENERGY_MIN_WINDOW_S` (`short_window_reason`): the
error is then at most 1 / updates of the window's energy, and `energy_counter_updates` is
recorded with every figure so that no reader takes more precision from it than it has.
"""

from __future__ import annotations

import math
import platform
import time
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
from benchmarks.harness.device.rapl import (
    POWERCAP_ROOT,
    RAPL_UPDATE_PERIOD_S,
    RaplCounter,
    open_rapl,
)

Sampler = PowermetricsSampler | PowermetricsUnavailable

NVML_ENERGY_UPDATE_PERIOD_S = 0.1
"""How often nvmlDeviceGetTotalEnergyConsumption advances: about every 100 ms, and on
A100/H100 its power is sampled only ~25 % of each period (Yang et al., "Part-time Power
Measurements: nvidia-smi's Lack of Attention", arXiv 2312.02741; ../shared/FACTS.md §7).
From the literature, not measured here; `nox -s doctor` measures it on the machine."""

ENERGY_MIN_COUNTER_UPDATES = 10
"""Updates a metered window must span: one update of error in ten is 10 % at worst."""

ENERGY_MIN_WINDOW_S = 1.0
"""The shortest window metered at all, whatever the counter: below it, a counter as fine as
RAPL still reads a moment (a boost, a frequency step), not the operation."""


def min_window_s(update_period_s: float) -> float:
    """The shortest window a counter updating every `update_period_s` seconds can meter."""
    return max(ENERGY_MIN_WINDOW_S, ENERGY_MIN_COUNTER_UPDATES * update_period_s)


def counter_updates(window_s: float, update_period_s: float) -> int:
    """How many whole update periods of the counter a window spans."""
    if update_period_s <= 0:
        return 0
    return math.floor(window_s / update_period_s + 1e-9)  # 80 x 0.025 s is 20 periods, not 19


def short_window_reason(source: str, window_s: float, update_period_s: float) -> str | None:
    """Why a window of `window_s` is too short for the counter (`energy_reason`), or None."""
    needed_s = min_window_s(update_period_s)
    if window_s >= needed_s:
        return None
    return (
        f"{source}: a {window_s:.3f}-s window spans {counter_updates(window_s, update_period_s)} "
        f"update(s) of a counter that advances every {update_period_s * 1e3:g} ms; "
        f"{needed_s:g} s (>= {ENERGY_MIN_COUNTER_UPDATES} updates) is the least it can meter"
    )


@dataclass(frozen=True)
class EnergyUnavailable:
    """Why no energy counter measures this device (one line, recorded as `energy_reason`)."""

    reason: str


class EnergyWindow(Protocol):
    """A counter read around a window: `start()`, then `stop()` -> joules (None: see failure).

    `update_period_s`: how often the counter's value changes (the resolution of a window).
    """

    source: str
    failure: str | None
    update_period_s: float

    def start(self) -> None: ...

    def stop(self) -> float | None: ...


class CumulativeWindow:
    """A window over a cumulative counter (`read_j`: joules since some origin, or None)."""

    def __init__(
        self, source: str, read_j: Callable[[], float | None], update_period_s: float
    ) -> None:
        self.source = source
        self.failure: str | None = None
        self.update_period_s = update_period_s
        self._read_j = read_j
        self._start_j: float | None = None

    def start(self) -> None:
        """Read the counter where the window begins."""
        self._start_j = self._read_j()

    def start_on_update(
        self,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> bool:
        """Begin the window at one of the counter's updates: poll it (1/20 of a period apart,
        for at most two periods) until its value changes. The value read is then the energy up
        to now, so what ran before (a block's setup) is not in the window; a plain `start`
        would carry up to one period of it. False: no change seen, the window began unaligned.
        """
        first = self._read_j()
        self._start_j = first
        if first is None:
            return False
        deadline_s = clock() + 2 * self.update_period_s
        while clock() < deadline_s:
            sleep(self.update_period_s / 20)
            value = self._read_j()
            if value is None:
                return False
            if value != first:
                self._start_j = value
                return True
        return False

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
    return CumulativeWindow("nvml:total_energy", gpu.energy_j, NVML_ENERGY_UPDATE_PERIOD_S)


def rapl_window(root: Path = POWERCAP_ROOT) -> CumulativeWindow | EnergyUnavailable:
    """The RAPL package counters under `root`, or why not."""
    counter = open_rapl(root)
    if not isinstance(counter, RaplCounter):
        return EnergyUnavailable(counter.reason)
    return CumulativeWindow(counter.source, counter.read_j, RAPL_UPDATE_PERIOD_S)


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
