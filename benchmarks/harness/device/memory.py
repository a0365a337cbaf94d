"""Memory and CPU counters read around a phase: what the device and the process hold.

`MemoryMonitor(device)` reads the device's allocator (CUDA: allocated, reserved and their true
peaks, from one `torch.cuda.memory_stats` call per sample; MPS: allocated and driver memory,
whose "peak" is only the running max of the samples, since MPS has no peak API, and is flagged
`peak_sampled`) and the process RSS; `labels` says what each number is. `peak_fields` names a
true peak and a sampled maximum differently in a record (`peak_allocated_bytes` against
`peak_allocated_sampled_bytes`), so the two are never compared as one quantity. `CpuMeter`
measures the process's CPU time over a phase. `PhaseRecorder` reads all of it at every phase
boundary of one generation: the bookkeeping of the engine's untimed, instrumented pass.

CUDA graphs: a replay allocates nothing through the caching allocator (cudagraph trees capture
every graph of a cell into one private memory pool, reserved at capture), so a CUDA-graph cell's
peak allocated bytes leave its graphs' workspace out while its reserved bytes hold the pool;
`cuda_graph_pool_bytes` reads the pool apart. A dropped pool returns to the allocator's cache
only: `release_cached_memory` hands it back to the driver (`torch.cuda.empty_cache`).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable, Mapping
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
    # True where the device has no peak counter and the peaks are maxima of samples (MPS).
    peak_sampled: bool = False


class Counters(Protocol):
    """The accelerator side of a `MemoryMonitor`: allocated/reserved now, and the phase's peak
    (torch's per device type below; MLX's in `benchmarks/harness/mlx/runtime.py`)."""

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
    """The CUDA caching allocator's own statistics (block-rounded, so never byte-exact).

    One `memory_stats` call per read: `memory_allocated`, `memory_reserved` and their `max_*`
    each rebuild that whole dictionary, so four calls cost four times one.
    """

    labels: Mapping[str, str] = {
        "allocated": "torch.cuda.memory_allocated (memory_stats allocated_bytes.all.current): "
        "bytes in live tensors",
        "reserved": "torch.cuda.memory_reserved (memory_stats reserved_bytes.all.current): "
        "bytes held by the caching allocator",
        "peak_allocated": "torch.cuda.max_memory_allocated since the phase began "
        "(memory_stats allocated_bytes.all.peak); a CUDA-graph cell's replays allocate "
        "nothing, so its graphs' workspace (cuda_graph_pool_bytes) is not in it",
        "peak_reserved": "torch.cuda.max_memory_reserved since the phase began "
        "(memory_stats reserved_bytes.all.peak); includes a CUDA-graph cell's graph pool "
        "(cuda_graph_pool_bytes), reserved at capture",
    }

    def __init__(self, device: torch.device) -> None:
        self._device = device

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self._device)

    def read(self) -> tuple[int | None, int | None, int | None, int | None]:
        stats = torch.cuda.memory_stats(self._device)
        return (
            int(stats.get("allocated_bytes.all.current", 0)),
            int(stats.get("reserved_bytes.all.current", 0)),
            int(stats.get("allocated_bytes.all.peak", 0)),
            int(stats.get("reserved_bytes.all.peak", 0)),
        )


class _MpsCounters:
    """MPS has no peak-memory API: the peak is the running max of values sampled at boundaries."""

    peak_sampled = True  # recorded as `peak_*_sampled_bytes`, never as a true peak
    labels: Mapping[str, str] = {
        "allocated": "torch.mps.current_allocated_memory: bytes in live MPS tensors, "
        "sampled at phase boundaries",
        "reserved": "torch.mps.driver_allocated_memory: bytes the Metal driver holds for the "
        "process (allocator pools included), sampled at phase boundaries",
        "peak_allocated": "running max of current_allocated_memory sampled at phase "
        "boundaries (MPS has no peak API; a lower bound; recorded as "
        "peak_allocated_sampled_bytes)",
        "peak_reserved": "running max of driver_allocated_memory sampled at phase "
        "boundaries (MPS has no peak API; a lower bound; recorded as "
        "peak_reserved_sampled_bytes)",
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


_COUNTERS: Mapping[str, Callable[[torch.device], Counters]] = {
    "cpu": _NoCounters,
    "cuda": _CudaCounters,
    "mps": _MpsCounters,
}

RSS_LABEL = "psutil process RSS: resident memory of the whole process (weights, Python, arenas)"


class MemoryMonitor:
    """Labelled memory counters for one device plus the process RSS.

    `reset_peak()` starts a phase; `sample()` reads the counters and the phase's peak so far.
    `counters` replaces the device's torch counters (an MLX cell reads MLX's allocator).
    """

    def __init__(self, device: torch.device, counters: Counters | None = None) -> None:
        if counters is None:
            make = _COUNTERS.get(device.type)
            if make is None:
                raise DeviceError(f"no memory counters for device type {device.type!r}.")
            counters = make(device)
        self._counters = counters
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
            # Counters without the flag (test fakes of CUDA-style allocators) have true peaks.
            peak_sampled=bool(getattr(self._counters, "peak_sampled", False)),
        )


PEAK_FIELDS = (
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "peak_allocated_sampled_bytes",
    "peak_reserved_sampled_bytes",
)


class PeakReading(Protocol):
    """What `peak_fields` reads of a `MemorySample` or a `ResourceSample`."""

    @property
    def peak_allocated_bytes(self) -> int | None: ...

    @property
    def peak_reserved_bytes(self) -> int | None: ...

    @property
    def peak_sampled(self) -> bool: ...


def peak_fields(readings: Iterable[PeakReading]) -> dict[str, int | None]:
    """The largest peaks of `readings` under names that say what they are (`PEAK_FIELDS`).

    A true allocator peak (CUDA) goes to `peak_allocated_bytes` / `peak_reserved_bytes`; a
    maximum of sampled values (MPS, `peak_sampled`) to `peak_*_sampled_bytes`, a lower bound
    that a cross-device comparison must not take for a peak. None where nothing was read.
    """
    values: dict[str, list[int]] = {name: [] for name in PEAK_FIELDS}
    for reading in readings:
        suffix = "_sampled_bytes" if reading.peak_sampled else "_bytes"
        for kind, value in (
            ("allocated", reading.peak_allocated_bytes),
            ("reserved", reading.peak_reserved_bytes),
        ):
            if value is not None:
                values[f"peak_{kind}{suffix}"].append(value)
    return {name: max(found) if found else None for name, found in values.items()}


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


@dataclass(frozen=True)
class ResourceSample:
    """Resources at one phase boundary of a generation; `labels` of the monitor say what each is.

    `cpu_percent` covers the phase that just ended (None for `before_prefill`, which ends none);
    `peak_*` are the phase's peaks (CUDA: allocator peak since the phase began; MPS: running max
    of boundary samples, `peak_sampled`; CPU: None).
    """

    phase: str  # before_prefill | after_prefill | after_decode
    step: int  # 0 for the prefill phases, 1..N-1 for decode steps
    allocated_bytes: int | None
    reserved_bytes: int | None
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    rss_bytes: int
    kv_bytes: int
    cpu_percent: float | None
    peak_sampled: bool = False

    @classmethod
    def from_memory(
        cls, phase: str, step: int, memory: MemorySample, kv_bytes: int, cpu_percent: float | None
    ) -> ResourceSample:
        """Combine one memory reading with the KV bytes and CPU percent of the same boundary."""
        return cls(
            phase=phase,
            step=step,
            allocated_bytes=memory.allocated_bytes,
            reserved_bytes=memory.reserved_bytes,
            peak_allocated_bytes=memory.peak_allocated_bytes,
            peak_reserved_bytes=memory.peak_reserved_bytes,
            rss_bytes=memory.rss_bytes,
            kv_bytes=kv_bytes,
            cpu_percent=cpu_percent,
            peak_sampled=memory.peak_sampled,
        )


class PhaseRecorder:
    """Reads memory, CPU time and (through a callable) KV bytes at every phase boundary.

    `begin()` before the prefill: resets the peak first, so the `before_prefill` sample and the
    prefill's peak start from what is allocated now, never from a peak left by earlier work.
    `start_phase()` before each decode step resets the peak and the CPU meter; `end_phase()`
    reads the CPU meter first (so the KV count is not billed to the phase), then the KV bytes,
    then the memory counters. It costs what it reads, which is why only an untimed pass uses it.
    """

    def __init__(self, device: torch.device, counters: Counters | None = None) -> None:
        self.monitor = MemoryMonitor(device, counters)
        self.meter = CpuMeter()
        self.samples: list[ResourceSample] = []

    def begin(self) -> None:
        """The `before_prefill` sample, after a peak reset; the prefill's CPU interval starts."""
        self.monitor.reset_peak()
        self.samples.append(
            ResourceSample.from_memory("before_prefill", 0, self.monitor.sample(), 0, None)
        )
        self.meter.reset()

    def start_phase(self) -> None:
        """A decode step begins: its own peak and CPU interval."""
        self.monitor.reset_peak()
        self.meter.reset()

    def end_phase(self, phase: str, step: int, kv_bytes: Callable[[], int]) -> None:
        """The phase ended: CPU percent, then `kv_bytes()`, then memory, as one sample."""
        cpu_percent = self.meter.lap()
        kv = kv_bytes()
        self.samples.append(
            ResourceSample.from_memory(phase, step, self.monitor.sample(), kv, cpu_percent)
        )


def release_cached_memory(device: torch.device) -> None:
    """Return the allocator's unused blocks to the device (CUDA, MPS); nothing to do on CPU.

    Garbage is collected first (dropped CUDA graphs and static caches can sit in reference
    cycles). On CUDA `empty_cache` also frees the segments of private pools no graph uses any
    more; without it a dropped pool stays in `reserved` and in the next phase's peaks.
    """
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        with torch.cuda.device(device):
            torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.synchronize()
        torch.mps.empty_cache()


GRAPH_POOL_LABEL = (
    "bytes of the CUDA caching allocator's segments in private memory pools on the device "
    "(torch.cuda.memory_snapshot, segment_pool_id not (0, 0)) after the first calls: the pool "
    "cudagraph trees capture the cell's CUDA graphs into (their intermediates and outputs), "
    "reserved at capture and reused by every replay; in peak_reserved_bytes, not in "
    "peak_allocated_bytes"
)


def cuda_graph_pool_bytes(device: torch.device) -> tuple[int | None, str]:
    """The bytes held in private (CUDA graph) pools on `device`, and a label: what the figure
    is (`GRAPH_POOL_LABEL`), or "n/a (why)" with None.

    Read from the allocator's segments, not as a delta of `reserved` across the first calls:
    that delta would also hold the static cache allocated at the first prefill and any
    workspace compilation left cached. Private pools other than cudagraph trees' are not
    created by phasebench, and an earlier cell's pool is gone after `release_cached_memory`.
    """
    if device.type != "cuda":
        return None, f"n/a (no CUDA graphs on {device.type})"
    # torch 2.13 leaves memory_snapshot untyped: a list of segment dicts, each with `device`,
    # `total_size` and `segment_pool_id` (the owning private pool, (0, 0) for none: torch's
    # `segmentInfoToDict` in torch/csrc/cuda/Module.cpp; cudagraph_trees filters on it too).
    try:
        segments = torch.cuda.memory_snapshot(include_traces=False)  # type: ignore[no-untyped-call]
    except TypeError:  # an older torch without `include_traces` (traces only if recorded)
        segments = torch.cuda.memory_snapshot()  # type: ignore[no-untyped-call]
    index = device.index if device.index is not None else torch.cuda.current_device()
    total = 0
    for segment in segments:
        if segment.get("device") != index:
            continue
        pool = segment.get("segment_pool_id")
        if pool is None:
            return None, "n/a (this torch's memory_snapshot has no segment_pool_id)"
        if tuple(pool) != (0, 0):  # (0, 0): the allocator's default pools
            total += int(segment["total_size"])
    return total, GRAPH_POOL_LABEL
