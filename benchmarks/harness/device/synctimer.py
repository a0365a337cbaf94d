"""A pytest-benchmark timer that synchronizes the device before reading the clock.

pytest-benchmark times a round as `timer()` before the target and `timer()` after it. With
`synced_perf_counter(device)` as that timer (the suite passes it through
`@pytest.mark.benchmark(timer=...)`), both reads happen after `device_sync`: the first drains
work queued by `setup` so it is not billed to the round, the second waits for the round's own
kernels. One function covers both edges of every timed region, for every measurement, and an
unknown device raises instead of timing an unsynchronized region (DESIGN §3).

It deliberately does not time anything itself and adds no device events.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from benchmarks.harness.device.devices import device_sync, resolve_device, sync_name


def synced_perf_counter(device: torch.device | str) -> Callable[[], float]:
    """A zero-argument clock: `device_sync(device)`, then `time.perf_counter()`.

    Its `__name__` (shown by pytest-benchmark as `options.timer`) names the sync, e.g.
    `perf_counter_after_torch.cuda.synchronize`; on CPU, where there is nothing to wait for,
    it is `perf_counter`.
    """
    dev = resolve_device(device)
    sync = sync_name(dev)

    def clock() -> float:
        device_sync(dev)
        return time.perf_counter()

    clock.__name__ = "perf_counter" if dev.type == "cpu" else f"perf_counter_after_{sync}"
    clock.__qualname__ = clock.__name__
    return clock
