"""The timing protocol of a tensor-parallel round: its time on one clock, across every rank.

Every rank runs, per round:

    [device sync]  barrier  device sync  t0  the timed call  device sync  t1
    ... then, outside the timed region: gather every rank's (t0, t1)

* The **barrier** lines the ranks up, so no rank's t0 includes waiting for a late peer: a
  round's collectives (the all-reduces inside the call) then wait only on work of this round.
* The **device sync** after the barrier drains the barrier's own work from the device (NCCL
  runs it as a kernel), so t0 is read on an idle device; the sync after the call makes t1 the
  moment the rank's result exists, not the moment the host queued it.
* With **NCCL** the device is synced *before* the barrier too: the barrier is queued behind
  whatever the device still runs, so a rank with unfinished work would leave the barrier late
  and the others would wait for it inside their timed region.
* The **gather** comes after t1 on every rank: a collective inside the timed region would add
  its own latency to the round.

**The round's time** (`RoundTime.wall_s`) is max(t1) - min(t0) over the ranks: from the first
rank starting to the last rank holding its result. That needs every rank's t0 and t1 on one
clock: `time.perf_counter` is CLOCK_MONOTONIC on Linux (mach_absolute_time on macOS,
QueryPerformanceCounter on Windows), one clock for every process of a host (since boot, in one
time namespace; tests/harness/tp/test_timing.py checks it across two processes). Each rank's
own t1 - t0 is not the round's time: the ranks leave the barrier at slightly different
moments, and a collective inside the call then holds the early ones until the last arrives, so
the max of the ranks' own times measures which rank left the barrier last (barrier-exit skew),
not the step. `clock_domain()` names a process's clock (host, boot, time namespace); ranks on
several hosts (`one_clock=False`) cannot be compared, so there the round's time is the largest
rank's own t1 - t0 and is labelled per-rank (`round_clock`).

A failing call raises on its rank; the others then block in the next barrier or gather until
the launcher's timeout ends the group (`launch`).

The collective, the device sync and the clock are parameters, so the order is tested on fakes.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch

T = TypeVar("T")

#: `round_clock` values: the ranks' t0/t1 on one clock, or each rank's own time only.
ONE_CLOCK = "one_clock"
PER_RANK = "per_rank"
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_TIME_NAMESPACE = Path("/proc/self/ns/time")


class Group(Protocol):
    """The collectives the protocol needs (a fake in tests, `TorchGroup` in a worker)."""

    @property
    def rank(self) -> int: ...

    @property
    def world(self) -> int: ...

    def barrier(self) -> None:
        """Return once every rank has called it."""
        ...

    def gather_times(self, t0: float, t1: float) -> list[tuple[float, float]]:
        """Every rank's (t0, t1), indexed by rank, on every rank."""
        ...


@dataclass(frozen=True)
class RoundTime:
    """One round: every rank's t0 and t1 (clock seconds), indexed by rank; `one_clock` when
    the ranks read the same clock (one host), so their readings compare."""

    t0_s: tuple[float, ...]
    t1_s: tuple[float, ...]
    one_clock: bool = True

    @property
    def rank_s(self) -> tuple[float, ...]:
        """Each rank's own t1 - t0 (a per-rank figure: it includes the rank's barrier exit)."""
        return tuple(t1 - t0 for t0, t1 in zip(self.t0_s, self.t1_s, strict=True))

    @property
    def wall_s(self) -> float:
        """The round's time: max(t1) - min(t0) on one clock; across hosts the largest rank's
        own t1 - t0 (per-rank: module docstring)."""
        if self.one_clock:
            return max(self.t1_s) - min(self.t0_s)
        return max(self.rank_s)

    @property
    def start_skew_s(self) -> float | None:
        """max(t0) - min(t0): how far apart the ranks left the barrier (None across hosts)."""
        return max(self.t0_s) - min(self.t0_s) if self.one_clock else None


def clock_domain() -> str:
    """What names this process's `time.perf_counter` clock: processes with the same domain
    read one clock (the host; on Linux also the boot and the time namespace, whose offsets
    move CLOCK_MONOTONIC)."""
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError):  # not Linux: the host's clock is system-wide
        parts.append(_BOOT_ID.read_text(encoding="ascii").strip())
    with contextlib.suppress(OSError):  # no time namespaces (macOS, older kernels)
        parts.append(str(_TIME_NAMESPACE.readlink()))
    return "/".join(parts)


def round_clock(one_clock: bool) -> str:
    """`ONE_CLOCK` or `PER_RANK`: how a run's round times were taken."""
    return ONE_CLOCK if one_clock else PER_RANK


def threads_per_rank(cores: int, world: int) -> int:
    """CPU threads each of `world` ranks gets on `cores` cores (0: too few cores).

    The ranks of a CPU run share the cores; more threads than this would make them fight,
    and every rank's time would then include the others' preemption.
    """
    return cores // world if world > 0 else 0


def sync_before_barrier(backend: str) -> bool:
    """Whether the device must be drained before the barrier (NCCL; module docstring)."""
    return backend == "nccl"


def timed_round(
    call: Callable[[], T],
    group: Group,
    sync: Callable[[], None],
    *,
    clock: Callable[[], float] = time.perf_counter,
    sync_first: bool = False,
    one_clock: bool = True,
) -> tuple[T, RoundTime]:
    """Run `call` once on this rank under the protocol; its result and every rank's t0, t1.

    `sync` waits for this rank's device; `sync_first` (`sync_before_barrier(backend)`) drains
    it before the barrier too; `one_clock` says whether every rank reads this clock (`same_clock`).
    Every rank must call this the same number of times.
    """
    if sync_first:
        sync()
    group.barrier()
    sync()
    t0 = clock()
    result = call()
    sync()
    t1 = clock()
    times = group.gather_times(t0, t1)
    return result, RoundTime(
        tuple(t for t, _ in times), tuple(t for _, t in times), one_clock=one_clock
    )


def round_walls(rounds: Sequence[RoundTime]) -> list[float]:
    """Each round's time (`RoundTime.wall_s`), in round order."""
    return [r.wall_s for r in rounds]


def same_clock(group: TorchGroup) -> bool:
    """Whether every rank of `group` reads one clock (one `clock_domain()`): a collective, so
    every rank calls it, once, before the rounds."""
    return len(set(group.gather_objects(clock_domain()))) == 1


class TorchGroup:
    """`Group` over the default torch.distributed process group (gloo or NCCL)."""

    def __init__(self) -> None:
        self._rank = torch.distributed.get_rank()
        self._world = torch.distributed.get_world_size()

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world(self) -> int:
        return self._world

    def barrier(self) -> None:
        torch.distributed.barrier()

    def gather_times(self, t0: float, t1: float) -> list[tuple[float, float]]:
        return [(float(a), float(b)) for a, b in self.gather_objects((float(t0), float(t1)))]

    def gather_objects(self, value: Any) -> list[Any]:
        """Every rank's picklable `value`, indexed by rank (`all_gather_object`: CPU and NCCL)."""
        out: list[Any] = [None] * self._world
        torch.distributed.all_gather_object(out, value)
        return out
