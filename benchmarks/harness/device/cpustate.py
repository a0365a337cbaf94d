"""The CPUs this process may run on: their last-level cache instances and other processes' use.

* `last_level_cache()` reads Linux sysfs (`/sys/devices/system/cpu/cpuN/cache/index*/` `level`,
  `type`, `size`, `shared_cpu_list`) for every CPU in the process's affinity mask and sums the
  *distinct* instances of the highest cache level. A multi-CCX EPYC or a multi-socket host has
  several L3s; threads spread over the allowed CPUs use every one of them, so cpu0's instance
  alone would understate the cache a working set can live in (and overstate it for a process
  pinned to a few cores of a large box, whose instances are the only ones counted).
* `CpuUseMeter` measures how much CPU time processes *other than this one* take on the CPUs this
  process may run on, over an interval: the CPUs' capacity minus their idle time (psutil, per
  CPU) minus this process's own CPU clock, with the counters' resolution (a window too short
  to tell is unknown, never busy). The suite's own threads (warmup generations, torch's spinning
  OpenMP workers) never make the machine look busy, which the 1-minute load average cannot tell
  apart. `OthersCpuMeter` is the same over all the machine's CPUs, in percent: what each
  benchmark records as `others_cores` and `other_cpu_pct` for its timed rounds.

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
#
# Resolution (issue 33). `/proc/stat` counts in ticks of 1/USER_HZ (10 ms), and a CPU's user and
# system time are *sampled* at each tick, so "busy minus our own" over a window of milliseconds
# read one 10-ms tick as cores: the smoke run's tiny benchmarks recorded 4.02 cores of others on
# a 2-core VM, quiet. Two changes, measured on the 2-core EPYC VM (quiet, a 2-thread matmul
# loop, 40 windows each): busy time is the window's CPU capacity minus the CPUs' idle time
# (kept from idle entry and exit, not sampled), and our own time is the process's CPU clock
# (nanoseconds). Other processes' cores then read -0.48..+0.37 over 5-ms windows (the old way
# -1.85..+1.83), -0.17..+0.17 over 20 ms, -0.03..+0.03 over 100 ms and 0.00..+0.02 over 300 ms.
# Our own time includes our descendants' (torch.compile's workers and compilers). What is left is
# the counter's tick: each read truncates every CPU's idle time to a tick, so a
# window resolves others' CPU to `cpus x tick / window` cores at worst. Shorter than
# `RESOLVE_TICKS` ticks (0.2 s at 100 Hz: a 5 % of the machine bound, against the reports'
# 25 % busy line) a window's figure is recorded as unknown, never as busy; its raw CPU-seconds
# are still kept, so the reports can integrate many short windows into one that resolves.

#: A window of this many counter ticks or more resolves others' CPU to 1/RESOLVE_TICKS of the
#: machine (5 %) at worst; a shorter one is unknown.
RESOLVE_TICKS = 20


def counter_tick_s() -> float:
    """Seconds per `/proc/stat` tick (1/USER_HZ; 0.01 on Linux), 0.01 where unknown."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
    except (AttributeError, OSError, ValueError):
        return 0.01
    return 1.0 / ticks if ticks > 0 else 0.01


@dataclass(frozen=True)
class CpuUse:
    """CPU time other processes used on this process's CPUs over an interval."""

    others_cores: float  # average number of those CPUs kept busy by other processes
    cpus: int  # how many CPUs this process may run on
    wall_s: float
    #: the counters' worst-case error in cores over this window (`cpus x tick / wall_s`)
    resolution_cores: float = 0.0

    @property
    def others_fraction(self) -> float:
        """`others_cores` as a fraction of the CPUs this process may run on."""
        return self.others_cores / max(self.cpus, 1)

    @property
    def resolved(self) -> bool:
        """Whether the window was long enough for the counters (`RESOLVE_TICKS`)."""
        return self.resolution_cores <= self.cpus / RESOLVE_TICKS

    @property
    def others_cpu_s(self) -> float:
        """Other processes' CPU-seconds over the window (unclamped below the machine)."""
        return self.others_cores * self.wall_s


def _idle_seconds(cpus: list[int]) -> float:
    """Idle (and I/O-wait) CPU seconds since boot, summed over `cpus`. The kernel keeps idle
    time from idle entry and exit, not from tick samples; steal is not idle (it is lost to us)."""
    per_cpu = psutil.cpu_times(percpu=True)
    total = 0.0
    for cpu in cpus:
        if cpu >= len(per_cpu):  # offline CPUs may be missing from the list
            continue
        times = per_cpu[cpu]
        total += float(times.idle) + float(getattr(times, "iowait", 0.0))
    return total


def _own_seconds() -> float:
    """CPU seconds of this process and of its descendants: torch.compile's worker pool and the
    compilers it runs are the suite's own work, not a neighbour's (a fresh inductor cache made
    a quiet CI smoke run read 33 % busy before they were counted)."""
    # CLOCK_PROCESS_CPUTIME_ID: every thread of this process, in nanoseconds (psutil's
    # Process.cpu_times is tick-sampled like /proc/stat).
    own = time.process_time()
    reaped = os.times()  # children this process has waited for
    own += reaped.children_user + reaped.children_system
    try:
        live = psutil.Process().children(recursive=True)
    except psutil.Error:
        return own
    for child in live:
        try:
            times = child.cpu_times()
        except psutil.Error:  # it ended between the listing and the read
            continue
        # Its own time, and that of the children it has waited for (a compiler run by a worker).
        own += times.user + times.system + times.children_user + times.children_system
    return own


class CpuUseMeter:
    """`start()` then `stop()`: other processes' CPU use on our CPUs in between.

    Others = the window's CPU capacity - the CPUs' idle time - this process's CPU time, within
    0 and the CPU count. The readers are injectable so that tests can drive it with known figures.
    """

    def __init__(
        self,
        *,
        cpus: list[int] | None = None,
        idle_s: Callable[[list[int]], float] = _idle_seconds,
        own_s: Callable[[], float] = _own_seconds,
        clock: Callable[[], float] = time.perf_counter,
        tick_s: float | None = None,
    ) -> None:
        self._cpus = allowed_cpus() if cpus is None else cpus
        self._idle_s, self._own_s, self._clock = idle_s, own_s, clock
        self._tick_s = counter_tick_s() if tick_s is None else tick_s
        self._start: tuple[float, float, float] | None = None

    def start(self) -> None:
        """Begin the interval."""
        self._start = (self._idle_s(self._cpus), self._own_s(), self._clock())

    def stop(self) -> CpuUse:
        """End the interval; RuntimeError if it was never started."""
        if self._start is None:
            raise RuntimeError("CpuUseMeter.stop() before start()")
        idle0, own0, wall0 = self._start
        idle1, own1, wall1 = self._idle_s(self._cpus), self._own_s(), self._clock()
        cpus = len(self._cpus)
        wall_s = max(wall1 - wall0, 1e-9)
        busy_s = cpus * wall_s - (idle1 - idle0)
        others_s = min(max(busy_s - (own1 - own0), 0.0), cpus * wall_s)
        return CpuUse(
            others_cores=others_s / wall_s,
            cpus=cpus,
            wall_s=wall_s,
            resolution_cores=cpus * self._tick_s / wall_s,
        )


def machine_cpus() -> list[int]:
    """Every logical CPU of the machine (not only this process's affinity)."""
    return list(range(psutil.cpu_count(logical=True) or os.cpu_count() or 1))


class OthersCpuMeter:
    """Other processes' CPU use over an interval, in percent of the whole machine (0-100).

    The figure a benchmark records as `extra_info.other_cpu_pct`: the mean share of the
    machine's CPU capacity that processes other than this one used between `start()` and
    `stop_extra_info()`. Each call reads two counters (`/proc/stat` through psutil and this
    process's CPU clock, ~0.1 ms), so it brackets a benchmark's rounds without touching any
    round. A window too short for the counters (`CpuUse.resolved`) records `others_cores` and
    `other_cpu_pct` as None with `other_cpu_note` saying why; `others_cpu_s`, `others_window_s`
    and `others_cpus` are always kept, so a reader can add short windows up into one that
    resolves (`reports.analysis.flags.run_busy_pct`).
    """

    def __init__(self, meter: CpuUseMeter | None = None) -> None:
        self._meter = CpuUseMeter(cpus=machine_cpus()) if meter is None else meter

    def start(self) -> None:
        """Begin the interval."""
        self._meter.start()

    def stop_extra_info(self) -> dict[str, float | int | str | None]:
        """End the interval: `others_cores` (DESIGN §3: CPUs the others kept busy, one-core
        equivalents) and `other_cpu_pct` (the same as a share of the machine, 0-100, which the
        reports' busy rule reads), None when the window does not resolve them."""
        use = self._meter.stop()
        info: dict[str, float | int | str | None] = {
            "others_cpu_s": use.others_cpu_s,
            "others_window_s": use.wall_s,
            "others_cpus": use.cpus,
        }
        if use.resolved:
            info["others_cores"] = use.others_cores
            info["other_cpu_pct"] = 100.0 * use.others_fraction
        else:
            info["others_cores"] = info["other_cpu_pct"] = None
            info["other_cpu_note"] = (
                f"unknown: the rounds took {use.wall_s * 1e3:.1f} ms, and the CPU counters "
                f"resolve others' use to {use.resolution_cores:.2f} of {use.cpus} cores over "
                f"so short a window (a window of {RESOLVE_TICKS} ticks or more resolves it)"
            )
        return info
