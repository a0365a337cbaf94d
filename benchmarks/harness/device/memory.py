"""Memory and CPU counters read around a phase: what the device and the process hold.

`MemoryMonitor(device)` reads the device's allocator (CUDA: allocated, reserved and their true
peaks; MPS: allocated and driver memory, sampled, since MPS has no peak API) and the process
RSS; `labels` says what each number is. `CpuMeter` measures the process's CPU time over a phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import psutil
import torch

from benchmarks.harness.errors import DeviceError


@dataclass(frozen=True)
class MemorySample:
    """One reading of the device's memory counters; None where the device has no such counter.

    `labels` says what each number is (see `MemoryMonitor.labels`).
    """

    allocated_bytes: int | None
    reserved_bytes: int | None
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    rss_bytes: int
    labels: Mapping[str, str] = field(compare=False)


class _Counters(Protocol):
    """The accelerator side of a `MemoryMonitor`: allocated/reserved now, and the phase's peak."""

    labels: Mapping[str, str]

    def reset_peak(self) -> None: ...

    def read(self) -> tuple[int | None, int | None, int | None, int | None]: ...


class _NoCounters:
    """CPU tensors come from the system allocator: torch keeps no byte counters for them."""

    labels: Mapping[str, str] = {
        "allocated": "n/a (torch keeps no allocator counter for CPU tensors)",
        "reserved": "n/a (torch keeps no allocator counter for CPU tensors)",
        "peak_allocated": "n/a",
        "peak_reserved": "n/a",
    }

    def __init__(self, device: torch.device) -> None:
        del device

    def reset_peak(self) -> None:
        """Nothing to reset."""

    def read(self) -> tuple[int | None, int | None, int | None, int | None]:
        return None, None, None, None


class _CudaCounters:
    """The CUDA caching allocator's own statistics (block-rounded, so never byte-exact)."""

    labels: Mapping[str, str] = {
        "allocated": "torch.cuda.memory_allocated: bytes in live tensors",
        "reserved": "torch.cuda.memory_reserved: bytes held by the caching allocator",
        "peak_allocated": "torch.cuda.max_memory_allocated since the phase began",
        "peak_reserved": "torch.cuda.max_memory_reserved since the phase began",
    }

    def __init__(self, device: torch.device) -> None:
        self._device = device

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self._device)

    def read(self) -> tuple[int | None, int | None, int | None, int | None]:
        return (
            int(torch.cuda.memory_allocated(self._device)),
            int(torch.cuda.memory_reserved(self._device)),
            int(torch.cuda.max_memory_allocated(self._device)),
            int(torch.cuda.max_memory_reserved(self._device)),
        )


class _MpsCounters:
    """MPS has no peak-memory API: the peak is the running max of values sampled at boundaries."""

    labels: Mapping[str, str] = {
        "allocated": "torch.mps.current_allocated_memory: bytes in live MPS tensors, "
        "sampled at phase boundaries",
        "reserved": "torch.mps.driver_allocated_memory: bytes the Metal driver holds for the "
        "process (allocator pools included), sampled at phase boundaries",
        "peak_allocated": "running max of current_allocated_memory sampled at phase "
        "boundaries (MPS has no peak API; a lower bound)",
        "peak_reserved": "running max of driver_allocated_memory sampled at phase "
        "boundaries (MPS has no peak API; a lower bound)",
    }

    def __init__(self, device: torch.device) -> None:
        del device
        self._peak_allocated = 0
        self._peak_driver = 0

    def reset_peak(self) -> None:
        # The new phase starts from what is allocated now, as CUDA's reset does.
        self._peak_allocated = int(torch.mps.current_allocated_memory())
        self._peak_driver = int(torch.mps.driver_allocated_memory())

    def read(self) -> tuple[int | None, int | None, int | None, int | None]:
        allocated = int(torch.mps.current_allocated_memory())
        driver = int(torch.mps.driver_allocated_memory())
        self._peak_allocated = max(self._peak_allocated, allocated)
        self._peak_driver = max(self._peak_driver, driver)
        return allocated, driver, self._peak_allocated, self._peak_driver


_COUNTERS: Mapping[str, Callable[[torch.device], _Counters]] = {
    "cpu": _NoCounters,
    "cuda": _CudaCounters,
    "mps": _MpsCounters,
}

RSS_LABEL = "psutil process RSS: resident memory of the whole process (weights, Python, arenas)"


class MemoryMonitor:
    """Labelled memory counters for one device plus the process RSS.

    `reset_peak()` starts a phase; `sample()` reads the counters and the phase's peak so far.
    """

    def __init__(self, device: torch.device) -> None:
        counters = _COUNTERS.get(device.type)
        if counters is None:
            raise DeviceError(f"no memory counters for device type {device.type!r}.")
        self._counters = counters(device)
        self._process = psutil.Process()

    @property
    def labels(self) -> dict[str, str]:
        """What each counter is: keys allocated, reserved, peak_allocated, peak_reserved, rss."""
        return {**self._counters.labels, "rss": RSS_LABEL}

    def reset_peak(self) -> None:
        """Begin a new phase for the peak counters (CUDA: `reset_peak_memory_stats`)."""
        self._counters.reset_peak()

    def sample(self) -> MemorySample:
        """Read every counter now."""
        allocated, reserved, peak_allocated, peak_reserved = self._counters.read()
        return MemorySample(
            allocated_bytes=allocated,
            reserved_bytes=reserved,
            peak_allocated_bytes=peak_allocated,
            peak_reserved_bytes=peak_reserved,
            rss_bytes=int(self._process.memory_info().rss),
            labels=self.labels,
        )


class CpuMeter:
    """Process CPU time over wall time between laps, as one-core-equivalent percent.

    `time.process_time` counts every thread of the process (user + system), so torch's intra-op
    threads add up: 250 means two and a half cores busy on average over the interval.
    """

    def __init__(self) -> None:
        self._wall_s = time.perf_counter()
        self._cpu_s = time.process_time()

    def reset(self) -> None:
        """Start a new interval without reading the old one (e.g. to exclude instrumentation)."""
        self._wall_s = time.perf_counter()
        self._cpu_s = time.process_time()

    def lap(self) -> float:
        """CPU percent since the last lap or reset, then start a new interval."""
        wall_s, cpu_s = time.perf_counter(), time.process_time()
        wall_delta_s = wall_s - self._wall_s
        cpu_delta_s = cpu_s - self._cpu_s
        self._wall_s, self._cpu_s = wall_s, cpu_s
        if wall_delta_s <= 0.0:
            return 0.0
        return 100.0 * cpu_delta_s / wall_delta_s
