"""Devices: names, dtypes, synchronization, skip reasons, memory counters and process CPU time.

Everything the engine needs to time an asynchronous accelerator honestly lives here:

* `device_sync` blocks until queued work on the device has finished (`torch.cuda.synchronize`,
  `torch.mps.synchronize`; CPU kernels run eagerly, so there is nothing to wait for). A device
  type it does not know raises `DeviceError`: it never skips the sync silently.
* `timed(device)` is the one timer: sync -> `perf_counter` -> body -> sync -> `perf_counter`.
* `device_unavailable_reason` / `dtype_unsupported_reason` return the skip reason for a cell the
  machine cannot run (None when it can). bfloat16 on CUDA needs compute capability >= 8.0 (the
  rule of `torch.cuda.is_bf16_supported` without emulation); bfloat16 on MPS needs macOS 14+ and
  a torch with MPS bf16 kernels, which is probed with a tiny matmul. A CPU dtype that runs but
  only emulated (float16 without AVX512-FP16, bfloat16 on AVX2-only x86) is *supported* here;
  `dtypespeed.py` measures how slow it is and gives the suite's skip reason for it.
* `MemoryMonitor` reads each counter under its real name and says what it is: CUDA allocated /
  reserved / peak (the peak is reset per phase); MPS `current_allocated_memory` and
  `driver_allocated_memory` sampled at phase boundaries with a running max (MPS has no peak API,
  so that "peak" is a lower bound); process RSS (psutil) everywhere.
* `CpuMeter` gives process CPU time / wall time per phase, in one-core-equivalents (100 = one
  core busy for the whole phase; threads add up, so 400 means four cores).

It deliberately does not pick a device for the user, move models, or time anything beyond the
`timed` region; device events (a secondary device-time figure) are not implemented.
"""

from __future__ import annotations

import functools
import platform
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from benchmarks.harness.errors import DeviceError

DEVICE_TYPES = ("cpu", "cuda", "mps")
DTYPES: Mapping[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def resolve_device(spec: str | torch.device) -> torch.device:
    """The torch device for `cpu`, `cuda`, `cuda:N` or `mps`; `DeviceError` for anything else."""
    text = str(spec).strip()
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError) as exc:
        raise DeviceError(_unknown_device_message(text)) from exc
    if device.type not in DEVICE_TYPES:
        raise DeviceError(_unknown_device_message(text))
    # cpu and mps are single devices here: "cpu:1" or "mps:1" would name something that does not
    # exist, and an index would make two spellings of one cell.
    if device.type != "cuda" and device.index is not None:
        raise DeviceError(_unknown_device_message(text))
    return device


def _unknown_device_message(text: str) -> str:
    return (
        f"device {text!r} is not supported; use one of cpu, cuda, cuda:N (N = GPU index) or mps "
        "in the matrix's `devices:` list."
    )


def parse_dtype(name: str) -> torch.dtype:
    """The torch dtype for `float32`, `float16` or `bfloat16`; `DeviceError` for anything else."""
    try:
        return DTYPES[name]
    except KeyError:
        raise DeviceError(
            f"dtype {name!r} is not supported; use one of {', '.join(DTYPES)} in the matrix's "
            "`dtypes:` list."
        ) from None


def dtype_name(dtype: torch.dtype) -> str:
    """The matrix name of a dtype (`torch.bfloat16` -> `bfloat16`)."""
    for name, known in DTYPES.items():
        if known == dtype:
            return name
    raise DeviceError(f"dtype {dtype} is not supported; use one of {', '.join(DTYPES)}.")


# --- synchronization -------------------------------------------------------------------------


def _sync_cpu(device: torch.device) -> None:
    """CPU kernels run eagerly on the calling thread: when the op returns, the work is done."""


def _sync_cuda(device: torch.device) -> None:
    torch.cuda.synchronize(device)


def _sync_mps(device: torch.device) -> None:
    # There is one MPS device and one default stream; the call takes no device argument.
    torch.mps.synchronize()


_SYNCS: Mapping[str, Callable[[torch.device], None]] = {
    "cpu": _sync_cpu,
    "cuda": _sync_cuda,
    "mps": _sync_mps,
}

SYNC_NAMES: Mapping[str, str] = {
    "cpu": "none (cpu)",
    "cuda": "torch.cuda.synchronize",
    "mps": "torch.mps.synchronize",
}


def device_sync(device: torch.device | str) -> None:
    """Block until all queued work on `device` is done; raise `DeviceError` for unknown devices."""
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    sync = _SYNCS.get(dev.type)
    if sync is None:
        raise DeviceError(
            f"cannot synchronize device type {dev.type!r}: phasebench knows how to wait for "
            f"{', '.join(_SYNCS)}; a timing without a sync would be wrong, so run on one of them."
        )
    sync(dev)


def sync_name(device: torch.device) -> str:
    """How `device_sync` waits on this device, for `extra_info["sync"]`."""
    try:
        return SYNC_NAMES[device.type]
    except KeyError:
        raise DeviceError(f"device type {device.type!r} has no synchronization.") from None


@dataclass
class Stopwatch:
    """The result of one `timed` region; `elapsed_s` is set when the region exits normally."""

    elapsed_s: float = float("nan")


@contextmanager
def timed(device: torch.device | str) -> Iterator[Stopwatch]:
    """Time the body on `device`: sync, perf_counter, body, sync, perf_counter.

    The first sync drains earlier work so it is not billed to the body; the second waits for the
    body's own work. If the body raises, the exception propagates and no time is recorded.
    """
    watch = Stopwatch()
    device_sync(device)
    started_s = time.perf_counter()
    yield watch
    device_sync(device)
    watch.elapsed_s = time.perf_counter() - started_s


# --- availability and dtype support ----------------------------------------------------------


def device_unavailable_reason(device: torch.device | str) -> str | None:
    """None when `device` can run here; otherwise the skip reason (an unknown name raises)."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            built = torch.version.cuda or torch.version.hip or "no CUDA"
            return f"{dev} unavailable: torch {torch.__version__} ({built}) sees no CUDA device"
        count = torch.cuda.device_count()
        index = 0 if dev.index is None else dev.index
        if index >= count:
            return f"{dev} unavailable: this machine has {count} CUDA device(s)"
    elif dev.type == "mps":
        if not torch.backends.mps.is_built():
            return f"mps unavailable: torch {torch.__version__} was built without MPS"
        if not torch.backends.mps.is_available():
            return "mps unavailable: needs macOS 12.3+ on Apple silicon"
    return None


def dtype_unsupported_reason(device: torch.device | str, dtype: torch.dtype) -> str | None:
    """None when `device` runs `dtype` here; otherwise the skip reason.

    An unavailable device answers with its unavailability. CUDA bfloat16 needs native support
    (compute capability >= 8.0; emulation is not counted); CPU and MPS dtypes are probed once with
    a tiny matmul, so a torch or OS without the kernels gives a reason instead of a crash.
    """
    dev = resolve_device(device)
    unavailable = device_unavailable_reason(dev)
    if unavailable is not None:
        return unavailable
    dtype_name(dtype)  # refuses dtypes the matrix cannot name
    if dev.type == "cuda":
        # No probe needed: float16/float32 run on every CUDA GPU; bf16's rule is known exactly.
        return _cuda_bf16_reason(dev) if dtype == torch.bfloat16 else None
    return _probe_reason(str(dev), dtype)


def _cuda_bf16_reason(dev: torch.device) -> str | None:
    # The rule of `torch.cuda.is_bf16_supported(including_emulation=False)`, asked of this device
    # rather than the current one: native bf16 needs compute capability 8.0 (Ampere) or newer.
    # ROCm builds support bf16 on every GPU they run on.
    if torch.version.hip:
        return None
    major, minor = torch.cuda.get_device_capability(dev)
    if (major, minor) >= (8, 0):
        return None
    return (
        f"bfloat16 unsupported on {dev} ({torch.cuda.get_device_name(dev)}, compute capability "
        f"{major}.{minor}): needs 8.0 or newer"
    )


@functools.cache
def _probe_reason(device: str, dtype: torch.dtype) -> str | None:
    try:
        a = torch.ones((4, 4), dtype=dtype, device=device)
        (a @ a).sum().item()
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        where = device
        if device == "mps":
            where = f"mps (macOS {platform.mac_ver()[0] or '?'}, torch {torch.__version__})"
        hint = "; bfloat16 on MPS needs macOS 14+" if device == "mps" else ""
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"{dtype_name(dtype)} unsupported on {where}: {first_line}{hint}"
    return None
