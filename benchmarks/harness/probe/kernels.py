"""The probe kernels: what a host probe runs on each device, sized once per run.

- `memory` (CPU): `dst.copy_(src)` of float32 buffers of `COPY_CACHE_MULTIPLE` times the
  last-level cache each (at least `MIN_COPY_BYTES`, at most an eighth of the free memory):
  every byte comes from and goes to memory, so the copy reads the bandwidth this host lends,
  which moves with its neighbours (docs/suite.md, "Rounds and min_timed_s").
- `compute` (CPU): `F.linear` of a fixed float32 `[GEMM_TOKENS, GEMM_IN] x [GEMM_OUT, GEMM_IN]`
  (a model-like projection, in cache): the core's arithmetic, its clock and its threads.
- `<device>-memory`, `<device>-compute` (CUDA, MPS): the same on the accelerator, bigger
  (`DEVICE_COPY_BYTES`, `DEVICE_GEMM`), with TF32 off so the GEMM is the same work whatever the
  code under test set.

Every operand's dtype is explicit (`DTYPE`, float32): `torch.randn` would otherwise follow a
`torch.set_default_dtype` of the code under test. `cpu_kernels()` are the CPU's two (which the
suite times in a process of their own, `worker`), `device_kernels(device)` the accelerator's.

Buffers are allocated for each probe point and freed after it (`ProbeKernel.prepare` returns the
callable that holds them): a probe must not sit in the benchmarks' memory peaks.

Deliberately not here: timing (`timing`), when to probe and the records (the suite).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psutil
import torch
from torch.nn import functional

from benchmarks.harness.device.cpustate import last_level_cache

#: The CPU copy's buffers are each this many times the last-level cache (out of cache: every
#: byte comes from and goes to memory).
COPY_CACHE_MULTIPLE = 2
#: ... and at least this many bytes (a machine that reports no cache still copies past it).
MIN_COPY_BYTES = 64 << 20
#: The CPU GEMM: 2 x 128 x 1024 x 1024 = 0.27 GFLOP per call, milliseconds on two cores.
GEMM_TOKENS, GEMM_IN, GEMM_OUT = 128, 1024, 1024
#: Every probe operand's dtype, never the process's default.
DTYPE = torch.float32
#: The accelerator's copy (each of source and destination) and square GEMM side.
DEVICE_COPY_BYTES = 512 << 20
DEVICE_GEMM = 4096
#: A device copy or GEMM is repeated this many times per call, so one call lasts milliseconds.
DEVICE_REPEATS = 8


@dataclass(frozen=True)
class ProbeKernel:
    """One probe: its kind (the record's `extra_info.host_probe`), device, what it runs, and
    `prepare()`, which allocates and fills its operands and returns the call to time."""

    kind: str
    device: torch.device
    description: str
    prepare: Callable[[], Callable[[], None]]
    dtype: torch.dtype = DTYPE


def copy_bytes_cpu() -> int:
    """The CPU copy's buffer size (module docstring)."""
    llc = last_level_cache()
    wanted = max(MIN_COPY_BYTES, COPY_CACHE_MULTIPLE * (llc.total_bytes if llc else 0))
    return max(16 << 20, min(wanted, psutil.virtual_memory().available // 8))


def _copy(device: torch.device, nbytes: int, repeats: int) -> Callable[[], Callable[[], None]]:
    def prepare() -> Callable[[], None]:
        src = torch.empty(nbytes // DTYPE.itemsize, dtype=DTYPE, device=device).fill_(1.0)
        dst = torch.empty_like(src).fill_(0.0)  # every page touched before the timed calls

        def call() -> None:
            for _ in range(repeats):
                dst.copy_(src)

        return call

    return prepare


@contextlib.contextmanager
def _no_tf32(device: torch.device) -> Iterator[None]:
    if device.type != "cuda":
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _gemm(
    device: torch.device, shape: tuple[int, int, int], repeats: int
) -> Callable[[], Callable[[], None]]:
    tokens, fan_in, fan_out = shape

    def prepare() -> Callable[[], None]:
        generator = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(tokens, fan_in, generator=generator, dtype=DTYPE).to(device)
        w = torch.randn(fan_out, fan_in, generator=generator, dtype=DTYPE).to(device)

        def call() -> None:
            with _no_tf32(device):
                for _ in range(repeats):
                    functional.linear(x, w)

        return call

    return prepare


def cpu_kernels() -> list[ProbeKernel]:
    """The CPU's two probes (`memory`, `compute`), sized for this machine now."""
    nbytes = copy_bytes_cpu()
    cpu = torch.device("cpu")
    return [
        ProbeKernel("memory", cpu, f"copy {nbytes >> 20} MiB float32", _copy(cpu, nbytes, 1)),
        ProbeKernel(
            "compute",
            cpu,
            f"F.linear float32 [{GEMM_TOKENS}, {GEMM_IN}] x [{GEMM_OUT}, {GEMM_IN}]",
            _gemm(cpu, (GEMM_TOKENS, GEMM_IN, GEMM_OUT), 1),
        ),
    ]


def device_kernels(device: torch.device) -> list[ProbeKernel]:
    """The accelerator's two probes on CUDA/MPS (`<type>-memory`, `<type>-compute`), else none."""
    if device.type not in ("cuda", "mps"):
        return []
    side = DEVICE_GEMM
    return [
        ProbeKernel(
            f"{device.type}-memory",
            device,
            f"copy {DEVICE_COPY_BYTES >> 20} MiB float32 x{DEVICE_REPEATS}",
            _copy(device, DEVICE_COPY_BYTES, DEVICE_REPEATS),
        ),
        ProbeKernel(
            f"{device.type}-compute",
            device,
            f"F.linear float32 {side}^3 x{DEVICE_REPEATS} (TF32 off)",
            _gemm(device, (side, side, side), DEVICE_REPEATS),
        ),
    ]


def kernels(device: torch.device) -> list[ProbeKernel]:
    """The probes of a run on `device`: the CPU's two always, the accelerator's two as well."""
    return [*cpu_kernels(), *device_kernels(device)]
