"""Can this machine time a benchmark? The clock's resolution and a real device sync.

* `check_timer`: the smallest step `time.perf_counter` is seen to take, and what one read
  costs. A timed region is as short as one decode step (about a millisecond for a small model),
  so a tick or a read above `BAD_TICK_S` (1 % of that) makes single rounds unreadable (`bad`);
  above `WARN_TICK_S` it adds visible noise (`warn`). The Linux clocksource is named (`tsc` is
  the fast one; `hpet` and `acpi_pm` are slow to read).
* `check_sync`: time a queue of device work without and with `device_sync`. Launching returns
  long before the work is done, so the unsynced time must be well under the synced one: if it is
  not, the sync does not wait for the device (or launches block), and every timing would be of
  the wrong thing (`bad`). On CPU nothing is queued, so the check is skipped (it says so).
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.harness.device.devices import device_sync
from benchmarks.harness.doctor.findings import Finding, skip

WARN_TICK_S = 1e-6
BAD_TICK_S = 10e-6
TIMER_READS = 20_000
CLOCKSOURCE = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
SYNC_TARGET_S = 0.05
"""How long the queued work of the sync check lasts: far above launch costs and NVML reads."""
SYNC_MAX_OPS = 1 << 12
SYNC_RATIO = 0.5
"""The unsynced time must be under this share of the synced time."""
SYNC_REPEATS = 3


@dataclass(frozen=True)
class TimerProbe:
    """The clock as seen from Python: smallest nonzero step and mean cost of one read."""

    tick_s: float
    read_s: float


def probe_timer(
    clock: Callable[[], float] = time.perf_counter, reads: int = TIMER_READS
) -> TimerProbe:
    """Read `clock` `reads` times back to back: the smallest positive step and the mean cost."""
    values = [clock() for _ in range(reads)]
    steps = [b - a for a, b in itertools.pairwise(values) if b > a]
    tick_s = min(steps) if steps else float("inf")
    return TimerProbe(tick_s=tick_s, read_s=(values[-1] - values[0]) / max(reads - 1, 1))


def check_timer(probe: TimerProbe | None = None, clocksource: Path = CLOCKSOURCE) -> Finding:
    """`bad` when a perf_counter tick or read exceeds `BAD_TICK_S`, `warn` past `WARN_TICK_S`."""
    found = probe_timer() if probe is None else probe
    try:
        source = clocksource.read_text(encoding="utf-8").strip()
    except OSError:
        source = None
    where = f" (clocksource {source})" if source else ""
    text = (
        f"perf_counter tick {found.tick_s * 1e9:.0f} ns, one read {found.read_s * 1e9:.0f} ns"
        + where
    )
    # A clock that never moved has an infinite tick: JSON has no infinity, so it is null.
    tick_s = found.tick_s if math.isfinite(found.tick_s) else None
    data = {"tick_s": tick_s, "read_s": found.read_s, "clocksource": source}
    worst = max(found.tick_s, found.read_s)
    fix = (
        "use a machine (or VM type) with an invariant TSC clocksource "
        "(`echo tsc | sudo tee /sys/devices/system/clocksource/clocksource0/current_clocksource`)"
    )
    if worst > BAD_TICK_S:
        return Finding("timing.timer", "bad", f"{text}: too coarse for ms-scale rounds", fix, data)
    if worst > WARN_TICK_S:
        return Finding("timing.timer", "warn", f"{text}: adds noise to short rounds", fix, data)
    return Finding("timing.timer", "ok", text, data=data)


@dataclass(frozen=True)
class SyncTiming:
    """One queue of `ops` device operations: launch time (no sync) and completion time."""

    ops: int
    unsynced_s: float
    synced_s: float


def time_sync(
    work: Callable[[], object],
    sync: Callable[[], None],
    *,
    during: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    target_s: float = SYNC_TARGET_S,
) -> SyncTiming:
    """Grow a queue of `work` until it takes `target_s` synced; then time it unsynced and synced.

    `during` runs after the unsynced launches and before the sync: while the device is busy
    (the doctor reads the busy GPU clock there). The medians of `SYNC_REPEATS` runs count.
    """
    work()
    sync()
    ops = 1
    while True:
        sync()
        start = clock()
        for _ in range(ops):
            work()
        sync()
        if clock() - start >= target_s or ops >= SYNC_MAX_OPS:
            break
        ops *= 2
    unsynced, synced = [], []
    for repeat in range(SYNC_REPEATS):
        sync()
        start = clock()
        for _ in range(ops):
            work()
        launched = clock()
        if during is not None and repeat == 0:
            during()
        sync()
        unsynced.append(launched - start)
        synced.append(clock() - start)
    return SyncTiming(ops, statistics.median(unsynced), statistics.median(synced))


def judge_sync(device: torch.device, timing: SyncTiming) -> Finding:
    """`ok` when launching took under `SYNC_RATIO` of the synced time, else `bad`."""
    text = (
        f"{timing.ops} queued ops on {device}: {timing.unsynced_s * 1e3:.2f} ms to launch, "
        f"{timing.synced_s * 1e3:.2f} ms to finish"
    )
    data = {"ops": timing.ops, "unsynced_s": timing.unsynced_s, "synced_s": timing.synced_s}
    if timing.unsynced_s < SYNC_RATIO * timing.synced_s:
        return Finding("timing.sync", "ok", f"{text}: the sync waits for the device", data=data)
    return Finding(
        "timing.sync",
        "bad",
        f"{text}: launching took as long as finishing, so either the sync does not wait or "
        "launches block",
        "check CUDA_LAUNCH_BLOCKING and the torch build; do not benchmark until this is ok",
        data,
    )


def check_sync(device: torch.device, during: Callable[[], None] | None = None) -> Finding:
    """The synced-vs-unsynced check with a real matmul queue on `device`; skipped on CPU."""
    if device.type == "cpu":
        return skip(
            "timing.sync",
            "cpu: ops run on the calling thread and nothing is queued, so "
            "there is no sync to check",
        )
    size = 4096 if device.type == "cuda" else 2048
    a = torch.rand(size, size, device=device)
    b = torch.rand(size, size, device=device)
    out = torch.empty(size, size, device=device)
    with torch.inference_mode():
        timing = time_sync(
            lambda: torch.mm(a, b, out=out), lambda: device_sync(device), during=during
        )
    return judge_sync(device, timing)
