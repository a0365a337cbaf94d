"""One probe point: a kernel's synchronized calls, the median of a few, on the caller's threads.

`time_point(kernel)` prepares the kernel's operands (allocated and filled: no page fault is
timed), runs one untimed call (first-call costs: kernel selection, lazy init), then
`CALLS` calls each bracketed by `device_sync` (a timing without a sync is a wrong number), and
returns the median call's seconds (`time_calls`: every call's). The operands are dropped
afterwards and the device's caching allocator emptied, so a probe leaves nothing in the
benchmarks' memory.

Deliberately not here: which kernels (`kernels`), when to probe and the records (the suite).
"""

from __future__ import annotations

import statistics
import time

from benchmarks.harness.device.devices import device_sync
from benchmarks.harness.device.memory import release_cached_memory
from benchmarks.harness.probe.kernels import ProbeKernel

#: Timed calls per probe point (the median is the point's value).
CALLS = 5


def time_point(kernel: ProbeKernel, calls: int = CALLS) -> float:
    """The median seconds of `calls` synchronized calls of `kernel` after one untimed call."""
    return statistics.median(time_calls(kernel, calls))


def time_calls(kernel: ProbeKernel, calls: int = CALLS) -> list[float]:
    """Each of `calls` synchronized calls' seconds after one untimed call (their spread is the
    point's own measurement noise)."""
    call = kernel.prepare()
    try:
        call()
        device_sync(kernel.device)
        times = []
        for _ in range(calls):
            device_sync(kernel.device)
            start = time.perf_counter()
            call()
            device_sync(kernel.device)
            times.append(time.perf_counter() - start)
    finally:
        del call  # the operands go with it (reference counting frees a CPU buffer at once)
        if kernel.device.type != "cpu":  # the caching allocator keeps blocks until told
            release_cached_memory(kernel.device)
    return times
