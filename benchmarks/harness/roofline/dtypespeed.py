"""Which 16-bit dtypes this CPU only emulates: a quick F.linear throughput probe against float32.

A CPU with native bf16/fp16 arithmetic (AVX-512 BF16, AMX, AVX512-FP16, Arm BF16/FP16) runs a
16-bit `F.linear` at least as fast as float32: it moves half the bytes per multiply-add. One
without (AVX2-only x86, such as the AMD EPYC 7763 of GitHub's hosted runners) converts and runs
it on float32 units, several times slower than float32 itself: a 2-core AVX2 EPYC ran bfloat16
`F.linear` at 9-13 GFLOP/s against 67 GFLOP/s in float32; an AVX-512 BF16 EPYC with its bf16
kernels disabled (`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`) ran it at ~55 against
~200 (docs/measurement.md, "Slow dtypes"). A whole-model benchmark in such a dtype takes
minutes per cell and measures the emulation, not the model.

`relative_speed(dtype)` is the ratio of the fastest single F.linear calls of float32 and
`dtype` on one model-like shape, alternated on one thread for `PROBE_BUDGET_S`, and remembered
for the process. A ratio under `SLOW_RATIO` marks the dtype slow:
`slow_dtype_reason` gives the skip reason for its CPU cells and `slow_dtypes()` what the run
found, recorded as `machine_info.phasebench.slow_dtypes`.

Only CPUs are probed: CUDA's bf16 rule is its compute capability (`devices.py`), and MPS has no
emulated path to detect this way.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from torch.nn import functional

from benchmarks.harness.device.devices import dtype_name, parse_dtype
from benchmarks.harness.roofline.peakmeasure import Shape, linear_operands

SLOW_RATIO = 0.5
"""Under half the float32 rate: native 16-bit units are never that slow; emulation is 0.13-0.28."""
PROBE_SHAPE: Shape = (64, 1024, 1024)
PROBE_BUDGET_S = 1.0
_MIN_SAMPLES = 3
_CPU = torch.device("cpu")


class DtypeSpeeds:
    """Relative F.linear throughput of 16-bit dtypes against float32 on the CPU, probed once."""

    def __init__(self, probe: Callable[[torch.dtype], float] | None = None) -> None:
        self._probe = probe or probe_ratio
        self._ratios: dict[str, float] = {}

    def relative_speed(self, dtype: torch.dtype) -> float:
        """Best `dtype` F.linear FLOP/s over float32's on the CPU (1.0 for float32 itself)."""
        name = dtype_name(dtype)
        if dtype == torch.float32:
            return 1.0
        if name not in self._ratios:
            self._ratios[name] = self._probe(dtype)
        return self._ratios[name]

    def slow(self) -> dict[str, float]:
        """The probed dtypes under `SLOW_RATIO`, each with its ratio (rounded to 3 digits)."""
        return {
            name: round(ratio, 3)
            for name, ratio in sorted(self._ratios.items())
            if ratio < SLOW_RATIO
        }


def probe_ratio(dtype: torch.dtype, shape: Shape = PROBE_SHAPE) -> float:
    """float32's fastest F.linear call time over `dtype`'s: single calls, alternated, one thread.

    Calls alternate (float32, dtype, float32, ...) until `PROBE_BUDGET_S` has passed and each
    dtype has at least `_MIN_SAMPLES` calls; the fastest call of each counts. One intra-op
    thread: what differs between the dtypes is each core's arithmetic, and on a busy machine a
    multi-threaded call waits for its slowest, descheduled thread (measured here under load: both
    dtypes fell to ~15 GFLOP/s and the ratio to ~1), while a single thread's fastest calls are
    the ones nothing interrupted. The thread count is restored afterwards.
    """
    threads = torch.get_num_threads()
    ops = {each: _linear(*linear_operands(shape, each, _CPU)) for each in (torch.float32, dtype)}
    fastest_s = dict.fromkeys(ops, math.inf)
    samples = 0
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            for op in ops.values():
                op()  # kernel selection and first-call set-up are not a call's time
            deadline = time.perf_counter() + PROBE_BUDGET_S
            while samples < _MIN_SAMPLES or time.perf_counter() < deadline:
                for each, op in ops.items():
                    started = time.perf_counter()
                    op()  # CPU kernels are synchronous: the return is the end of the work
                    fastest_s[each] = min(fastest_s[each], time.perf_counter() - started)
                samples += 1
    finally:
        torch.set_num_threads(threads)
    return fastest_s[torch.float32] / fastest_s[dtype]


SPEEDS = DtypeSpeeds()
"""The process's probes: collection fills it, `slow_dtypes()` reads it for machine_info."""


def _linear(x: torch.Tensor, w: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: functional.linear(x, w)


def slow_dtype_reason(device: str, dtype: str, speeds: DtypeSpeeds | None = None) -> str | None:
    """The skip reason for a cell whose dtype this CPU only emulates, or None.

    Devices other than the CPU, and float32, are never slow here (and never probed). `speeds`
    defaults to the process's `SPEEDS`. Raises `DeviceError` for a dtype name the matrix cannot
    hold.
    """
    torch_dtype = parse_dtype(dtype)
    if device != "cpu" or torch_dtype == torch.float32:
        return None
    ratio = (speeds or SPEEDS).relative_speed(torch_dtype)
    if ratio >= SLOW_RATIO:
        return None
    return (
        f"{dtype} runs F.linear at {ratio:.2f}x the float32 rate on this CPU (no native "
        f"{dtype} arithmetic: emulated), too slow to benchmark a model in it; pass "
        "--allow-slow-dtypes to run these cells anyway"
    )


def slow_dtypes() -> dict[str, float]:
    """What this process found slow so far (`machine_info.phasebench.slow_dtypes`)."""
    return SPEEDS.slow()
