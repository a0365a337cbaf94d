"""MLX's device, dtypes, fence, timer and memory counters: how an MLX cell is timed honestly.

MLX is lazy: an operation builds a graph, and nothing runs until `mx.eval` (or a read of the
values). A timer that stops before evaluation measures graph building. So every timed MLX call
ends with `fence(...)` (`mx.eval` of what it produced, the cache's arrays included), and the
benchmark's clock (`synced_clock`) waits for the device with `mx.synchronize()` before reading
`perf_counter`, as torch's timer synchronizes CUDA or MPS.

Devices: a cell's `mps` runs on MLX's GPU (Metal), `cpu` on MLX's CPU device. Memory:
`MlxCounters` feeds `device.memory.MemoryMonitor` with `mx.get_active_memory` (allocated),
active plus `mx.get_cache_memory` (held by MLX's allocator), and `mx.get_peak_memory` since
`mx.reset_peak_memory` at the phase's start: a true peak, not a sampled maximum.

It deliberately imports mlx only inside its functions (mlx is optional).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from benchmarks.harness.errors import DeviceError

DTYPE_NAMES = ("float32", "float16", "bfloat16")
SYNC_NAME = "mx.synchronize"
TIMER_NAME = f"perf_counter_after_{SYNC_NAME}"


def mx_module() -> Any:
    """`mlx.core`, imported on first use."""
    import mlx.core as mx  # noqa: PLC0415 - optional dependency

    return mx


def mx_device(device: torch.device) -> Any:
    """MLX's device for a cell's device: `mps` -> `mx.gpu` (Metal), `cpu` -> `mx.cpu`."""
    mx = mx_module()
    if device.type == "mps":
        return mx.Device(mx.gpu)
    if device.type == "cpu":
        return mx.Device(mx.cpu)
    raise DeviceError(
        f"engine mlx runs on mps (Metal) or cpu, not {device.type}: list `engine: mlx` cells "
        "under `devices: [mps]` or `[cpu]` in the matrix"
    )


def device_name(device: torch.device) -> str:
    """How a record names the MLX device: `gpu` (Metal) or `cpu`."""
    return "gpu" if device.type == "mps" else "cpu"


def device_reason(device: str) -> str | None:
    """Why MLX cannot run on the cell's `device` here (one line), or None."""
    kind = device.split(":", maxsplit=1)[0]
    if kind == "cpu":
        return None
    if kind != "mps":
        return f"engine mlx runs on mps (Metal) or cpu, not {device}"
    mx = mx_module()
    if not mx.metal.is_available():
        return "engine mlx on mps needs Metal (Apple silicon); this mlx has no Metal device"
    return None


def mx_dtype(name: str) -> Any:
    """mlx's dtype for a matrix dtype name."""
    mx = mx_module()
    return {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}[name]


def fence(*outputs: Any) -> None:
    """Evaluate `outputs` (arrays, or lists / tuples of them) and wait for them: MLX's sync."""
    mx_module().eval(*outputs)


def synced_clock() -> Callable[[], float]:
    """The benchmark timer of an MLX cell: `mx.synchronize()`, then `time.perf_counter()`."""
    mx = mx_module()

    def clock() -> float:
        mx.synchronize()
        return time.perf_counter()

    clock.__name__ = clock.__qualname__ = TIMER_NAME
    return clock


class MlxCounters:
    """MLX's allocator counters, for `MemoryMonitor(device, counters=MlxCounters())`."""

    labels: Mapping[str, str] = {
        "allocated": "mx.get_active_memory: bytes in live MLX arrays",
        "reserved": "mx.get_active_memory + mx.get_cache_memory: bytes MLX's allocator holds "
        "(live arrays and its buffer cache)",
        "peak_allocated": "mx.get_peak_memory since mx.reset_peak_memory at the phase's start: "
        "MLX's own peak of live arrays (Metal buffers on mps, MLX's CPU allocator on cpu)",
        "peak_reserved": "n/a (MLX keeps no peak of its buffer cache)",
    }

    def __init__(self) -> None:
        self._mx = mx_module()

    def reset_peak(self) -> None:
        """A new phase: the peak restarts from what is live now."""
        self._mx.reset_peak_memory()

    def read(self) -> tuple[int | None, int | None, int | None, int | None]:
        """(active, active + cache, peak since the reset, None)."""
        active = int(self._mx.get_active_memory())
        cached = int(self._mx.get_cache_memory())
        return active, active + cached, int(self._mx.get_peak_memory()), None


def release_memory() -> None:
    """Return MLX's buffer cache (after a cell, before the next model is built)."""
    mx_module().clear_cache()
