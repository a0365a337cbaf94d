"""The CPUs this process may run on: their last-level cache instances and other processes' use.

* `last_level_cache()` reads Linux sysfs (`/sys/devices/system/cpu/cpuN/cache/index*/` `level`,
  `type`, `size`, `shared_cpu_list`) for every CPU in the process's affinity mask and sums the
  *distinct* instances of the highest cache level. A multi-CCX EPYC or a multi-socket host has
  several L3s; threads spread over the allowed CPUs use every one of them, so cpu0's instance
  alone would understate the cache a working set can live in (and overstate it for a process
  pinned to a few cores of a large box, whose instances are the only ones counted).
* `CpuUseMeter` measures how much CPU time processes *other than this one* take on the CPUs this
  process may run on, over an interval: system busy time (psutil, per CPU) minus this process's
  own user + system time. The suite's own threads (warmup generations, torch's spinning OpenMP
  workers) never make the machine look busy, which the 1-minute load average cannot tell apart.
  `OthersCpuMeter` is the same over all the machine's CPUs, in percent: what each benchmark
  records as `others_cores` and `other_cpu_pct` for its timed rounds.

It does not read cache sizes on macOS or Windows (None there) and does not decide what a busy
machine means for a measurement (peaks.py does).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

SYSFS_CPU = Path("/sys/devices/system/cpu")


def allowed_cpus() -> list[int]:
    """The logical CPUs this process may run on (its affinity), else all of them."""
    getter = getattr(os, "sched_getaffinity", None)
    if getter is not None:
        try:
            return sorted(getter(0))
        except OSError:
            pass
    return list(range(os.cpu_count() or 1))


def parse_cpu_list(text: str) -> frozenset[int]:
    """A sysfs CPU list (`"0-3,8-11"`, `"5"`) as a set; ValueError when malformed."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first:
            raise ValueError(f"bad CPU range {part!r}")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


@dataclass(frozen=True)
class CacheLevel:
    """The last-level cache the allowed CPUs can use: its level, instance count and total bytes."""

    level: int
    instances: int
    total_bytes: int


def last_level_cache(
    root: Path = SYSFS_CPU, cpus: Iterable[int] | None = None
) -> CacheLevel | None:
    """Sum of the distinct highest-level data/unified caches of `cpus` (default: the affinity).

    An instance is identified by the CPUs that share it (`shared_cpu_list`; a CPU without that
    file is its own instance). None where sysfs says nothing (not Linux, or a container without
    `/sys/devices/system/cpu/*/cache`).
    """
    chosen = sorted(allowed_cpus() if cpus is None else cpus)
    best_level = -1
    instances: dict[tuple[str, frozenset[int]], int] = {}
    for cpu in chosen:
        for index in sorted((root / f"cpu{cpu}" / "cache").glob("index*")):
            found = _read_cache_index(index, cpu)
            if found is None:
                continue
            level, kind, size, shared = found
            if level > best_level:
                best_level, instances = level, {}
            if level == best_level:
                instances[(kind, shared)] = size
    if not instances:
        return None
    return CacheLevel(best_level, len(instances), sum(instances.values()))


def _read_cache_index(index: Path, cpu: int) -> tuple[int, str, int, frozenset[int]] | None:
    try:
        level = int((index / "level").read_text().strip())
        kind = (index / "type").read_text().strip()
        size = parse_size((index / "size").read_text().strip())
    except (OSError, ValueError):
        return None
    if kind == "Instruction" or size is None:
        return None
    try:
        shared = parse_cpu_list((index / "shared_cpu_list").read_text())
    except (OSError, ValueError):
        shared = frozenset({cpu})
    return level, kind, size, shared or frozenset({cpu})


def parse_size(text: str) -> int | None:
    """A sysfs cache size (`"32768K"`, `"1M"`, `"512"`) in bytes, None when unparseable."""
    match = re.fullmatch(r"(\d+)\s*([KMG]?)B?", text, flags=re.IGNORECASE)
    if match is None:
        return None
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2).upper()]
    return int(match.group(1)) * scale


# ---------------------------------------------------------------------------------------------
# Other processes' CPU use


@dataclass(frozen=True)
class CpuUse:
    """CPU time other processes used on this process's CPUs over an interval."""

    others_cores: float  # average number of those CPUs kept busy by other processes
    cpus: int  # how many CPUs this process may run on
    wall_s: float

    @property
    def others_fraction(self) -> float:
        """`others_cores` as a fraction of the CPUs this process may run on."""
        return self.others_cores / max(self.cpus, 1)


def _busy_seconds(cpus: list[int]) -> float:
    """Non-idle CPU seconds since boot, summed over `cpus` (steal counts: it is lost to us)."""
    per_cpu = psutil.cpu_times(percpu=True)
    total = 0.0
    for cpu in cpus:
        if cpu >= len(per_cpu):  # offline CPUs may be missing from the list
            continue
        times = per_cpu[cpu]
        total += sum(
            float(getattr(times, name, 0.0))
            for name in ("user", "nice", "system", "irq", "softirq", "steal")
        )
    return total


def _own_seconds() -> float:
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


class CpuUseMeter:
    """`start()` then `stop()`: other processes' CPU use on our CPUs in between.

    The readers are injectable so that tests can drive it with known figures.
    """

    def __init__(
        self,
        *,
        cpus: list[int] | None = None,
        busy_s: Callable[[list[int]], float] = _busy_seconds,
        own_s: Callable[[], float] = _own_seconds,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._cpus = allowed_cpus() if cpus is None else cpus
        self._busy_s, self._own_s, self._clock = busy_s, own_s, clock
        self._start: tuple[float, float, float] | None = None

    def start(self) -> None:
        """Begin the interval."""
        self._start = (self._busy_s(self._cpus), self._own_s(), self._clock())

    def stop(self) -> CpuUse:
        """End the interval; RuntimeError if it was never started."""
        if self._start is None:
            raise RuntimeError("CpuUseMeter.stop() before start()")
        busy0, own0, wall0 = self._start
        busy1, own1, wall1 = self._busy_s(self._cpus), self._own_s(), self._clock()
        wall_s = max(wall1 - wall0, 1e-9)
        others_s = max((busy1 - busy0) - (own1 - own0), 0.0)
        return CpuUse(others_cores=others_s / wall_s, cpus=len(self._cpus), wall_s=wall_s)


def machine_cpus() -> list[int]:
    """Every logical CPU of the machine (not only this process's affinity)."""
    return list(range(psutil.cpu_count(logical=True) or os.cpu_count() or 1))


class OthersCpuMeter:
    """Other processes' CPU use over an interval, in percent of the whole machine (0-100).

    The figure a benchmark records as `extra_info.other_cpu_pct`: the mean share of the
    machine's CPU capacity that processes other than this one used between `start()` and
    `stop_extra_info()`. Each call reads two counters (`/proc/stat` through psutil and this
    process's times, ~0.1 ms), so it brackets a benchmark's rounds without touching any round.
    """

    def __init__(self, meter: CpuUseMeter | None = None) -> None:
        self._meter = CpuUseMeter(cpus=machine_cpus()) if meter is None else meter

    def start(self) -> None:
        """Begin the interval."""
        self._meter.start()

    def stop_extra_info(self) -> dict[str, float]:
        """End the interval: `others_cores` (DESIGN §3: CPUs the others kept busy, one-core
        equivalents) and `other_cpu_pct` (the same as a share of the machine, 0-100, which the
        reports' busy rule reads)."""
        use = self._meter.stop()
        return {
            "others_cores": max(use.others_cores, 0.0),
            "other_cpu_pct": min(max(100.0 * use.others_fraction, 0.0), 100.0),
        }
