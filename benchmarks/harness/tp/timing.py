"""The timing protocol of a tensor-parallel round: the round takes as long as its slowest rank.

Every rank runs, per round:

    [device sync]  barrier  device sync  t0  the timed call  device sync  t1
    ... then, outside the timed region: gather every rank's t1 - t0

* The **barrier** lines the ranks up, so no rank's t0 includes waiting for a late peer: a
  round's collectives (the all-reduces inside the call) then wait only on work of this round.
* The **device sync** after the barrier drains the barrier's own work from the device (NCCL
  runs it as a kernel), so t0 is read on an idle device; the sync after the call makes t1 the
  moment the rank's result exists, not the moment the host queued it.
* With **NCCL** the device is synced *before* the barrier too: the barrier is queued behind
  whatever the device still runs, so a rank with unfinished work would leave the barrier late
  and the others would wait for it inside their timed region.
* The **gather** comes after t1 on every rank: a collective inside the timed region would add
  its own latency and make every rank wait for the slowest, hiding which rank was slow.

The round's time is the max over ranks (`RoundTime.max_s`): a TP step is done when every rank's
shard is done. A failing call raises on its rank; the others then block in the next barrier or
gather until the launcher's timeout ends the group (`launch`).

The collective, the device sync and the clock are parameters, so the order is tested on fakes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch

T = TypeVar("T")


class Group(Protocol):
    """The two collectives the protocol needs (a fake in tests, `TorchGroup` in a worker)."""

    @property
    def rank(self) -> int: ...

    @property
    def world(self) -> int: ...

    def barrier(self) -> None:
        """Return once every rank has called it."""
        ...

    def gather_floats(self, value: float) -> list[float]:
        """Every rank's `value`, indexed by rank, on every rank."""
        ...


@dataclass(frozen=True)
class RoundTime:
    """One round: each rank's synchronized call time, in seconds, indexed by rank."""

    rank_s: tuple[float, ...]

    @property
    def max_s(self) -> float:
        """The round's time: its slowest rank's."""
        return max(self.rank_s)

    @property
    def slowest_rank(self) -> int:
        """The rank whose call took longest (the lowest such rank on a tie)."""
        return self.rank_s.index(self.max_s)


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
) -> tuple[T, RoundTime]:
    """Run `call` once on this rank under the protocol; its result and every rank's time.

    `sync` waits for this rank's device; `sync_first` (`sync_before_barrier(backend)`) drains
    it before the barrier too. Every rank must call this the same number of times.
    """
    if sync_first:
        sync()
    group.barrier()
    sync()
    t0 = clock()
    result = call()
    sync()
    t1 = clock()
    return result, RoundTime(tuple(group.gather_floats(t1 - t0)))


def round_max(rounds: Sequence[RoundTime]) -> list[float]:
    """The max over ranks of each round, in round order."""
    return [r.max_s for r in rounds]


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

    def gather_floats(self, value: float) -> list[float]:
        return [float(v) for v in self.gather_objects(float(value))]

    def gather_objects(self, value: Any) -> list[Any]:
        """Every rank's picklable `value`, indexed by rank (`all_gather_object`: CPU and NCCL)."""
        out: list[Any] = [None] * self._world
        torch.distributed.all_gather_object(out, value)
        return out
