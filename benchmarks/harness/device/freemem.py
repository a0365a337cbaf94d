"""How much memory a device has free for a new model, and where the figure comes from.

`free_memory(device)` answers with a `FreeMemory`: the bytes (None when the device cannot say)
and the source, so a skip reason can name it:

* CUDA: `torch.cuda.mem_get_info(device)`'s free bytes: what the driver can still hand out,
  other processes' allocations and this process's CUDA context already taken off.
* MPS: Metal's recommended working-set size (`torch.mps.recommended_max_memory()`, torch >= 2.5)
  minus what this process's Metal driver already holds (`torch.mps.driver_allocated_memory()`:
  live tensors and the allocator's cached blocks, both of which count against the working set).
  Unified memory is shared with the OS; beyond the working set macOS starts to swap, and a
  swapping model is timed as slow, not reported as too big. So the figure is also capped at the
  RAM the OS has available now (other apps hold unified memory too), less a headroom of
  `MPS_HEADROOM_FRACTION` of the working set for what the fit estimate does not count (Metal's
  own buffers, the allocator's rounding, the window server). An older torch has no
  recommended size: the figure is unknown and nothing is skipped for it.
* CPU: `psutil.virtual_memory().available` (RAM the OS can give without swapping).

It deliberately does not decide whether anything fits (`roofline.fit`, `plan`).
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil
import torch

from benchmarks.harness.device.devices import resolve_device

#: Unified memory a Mac's fit check leaves unused: with none, an 8B float16 cell (16.1 GB of
#: weights) "fits" a 24 GB Mac's ~16-18 GB working set and is then timed against swap.
MPS_HEADROOM_FRACTION = 0.10


@dataclass(frozen=True)
class FreeMemory:
    """Free bytes on one device (None: unknown) and the API they were read with."""

    device: str  # `cuda:0`, `mps`, `cpu`: the device named in skip reasons
    free_bytes: int | None
    source: str  # e.g. `mem_get_info`; when unknown, why


def free_memory(device: torch.device | str) -> FreeMemory:
    """What `device` has free for a new model now (see the module docstring per device)."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        index = torch.cuda.current_device() if dev.index is None else dev.index
        try:
            free_bytes, _total = torch.cuda.mem_get_info(index)
        except RuntimeError as error:  # e.g. no room left for this process's CUDA context
            first = str(error).strip().splitlines()[0] if str(error).strip() else "RuntimeError"
            return FreeMemory(f"cuda:{index}", None, f"mem_get_info failed: {first}")
        return FreeMemory(f"cuda:{index}", int(free_bytes), "mem_get_info")
    if dev.type == "mps":
        recommended = getattr(torch.mps, "recommended_max_memory", None)
        if recommended is None:
            return FreeMemory(
                "mps",
                None,
                f"torch {torch.__version__} has no torch.mps.recommended_max_memory (>= 2.5)",
            )
        working_set = int(recommended())
        held = int(torch.mps.driver_allocated_memory())
        available = int(psutil.virtual_memory().available)
        headroom = int(MPS_HEADROOM_FRACTION * working_set)
        return FreeMemory(
            "mps",
            max(0, min(working_set - held, available) - headroom),
            f"min(recommended_max_memory - driver_allocated_memory, available RAM) - "
            f"{MPS_HEADROOM_FRACTION:.0%} of the working set",
        )
    return FreeMemory("cpu", int(psutil.virtual_memory().available), "available RAM")
