"""Measuring a device's peaks with torch: copy bandwidth and F.linear FLOP/s, in a time budget.

* **Bandwidth**: `dst.copy_(src)` of a buffer sized past the last-level cache and within the
  device's free memory, counted as bytes read + bytes written per second (the STREAM "copy"
  convention; a CPU's write-allocate traffic is not added).
* **FLOP/s**: `torch.nn.functional.linear(x, w)`, the op and the weight layout (`w` is
  `[out, in]`, used transposed) every projection of the model runs, on a few model-like shapes
  `[tokens, in] x [out, in]`, `2 * tokens * in * out` FLOPs per call; the fastest shape counts.
  A square `torch.mm` is *not* used: on a CPU without bf16 units it takes a path that is neither
  what the model runs nor bounded (an AVX2-only EPYC runs a 2,048^2 bf16 `mm` at 0.3 GFLOP/s,
  minutes per peak, against ~10 GFLOP/s for `F.linear` on the same operands).
  A GEMM runs closer to the peak the more rows (tokens) it has, so where the cells it serves
  run more tokens (`for_device(device, tokens=B·P)`: 8 x 4,096 = 32,768 on the CUDA matrix's
  biggest prefill) the same matrices are measured at that many rows too, capped at
  `MAX_PEAK_TOKENS` and by memory: a cell is never judged against a peak of a smaller GEMM.
* Every rate is the best of synchronized blocks (`device_sync` before and after), each block
  repeating the op until it lasts `min_block_s`, after one untimed first call. The whole
  measurement stops within `MeasurePolicy.budget_s`: a tiny sizing call first estimates the
  rate, a shape whose predicted cost (first call + one block) does not fit in the time left is
  skipped, and no block starts past the deadline. So one measurement costs the budget at most,
  on any machine and in any dtype, give or take one shape whose rate was misjudged (its first
  call and one block).
* Afterwards the operands are dropped and the device's caching allocator is emptied, so none of
  the ~2 x `copy_bytes` of buffers stays in `reserved` / `peak_reserved` before timed rounds.

This module does not cache figures, decide when to measure, or judge whether the machine was busy
(`peaks.py` does); `dtypespeed.py` uses `best_rate` for its dtype probe.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil
import torch
from torch.nn import functional

from benchmarks.harness.device import memory
from benchmarks.harness.device.cpustate import allowed_cpus, last_level_cache
from benchmarks.harness.device.devices import device_sync

# What the measurement calls when done (`memory.release_cached_memory`); named here, where the
# doctor imports it and tests replace it.
release_cached_memory = memory.release_cached_memory

Shape = tuple[int, int, int]
"""An F.linear shape `(tokens, in_features, out_features)`."""

LinearOp = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# Model-like shapes, smallest first (the admission rule below relies on the order). CPU: the
# hidden/intermediate sizes of 0.1-1.5 B models at a 512-token prefill; CUDA: 7-8 B models
# (hidden 4096, intermediate 14336) at 8 x 1,024 tokens; MPS in between.
CPU_SHAPES: tuple[Shape, ...] = ((512, 1024, 1024), (512, 1024, 4096), (512, 4096, 1024))
MPS_SHAPES: tuple[Shape, ...] = ((2048, 2048, 2048), (2048, 2048, 8192), (2048, 8192, 2048))
CUDA_SHAPES: tuple[Shape, ...] = ((8192, 4096, 4096), (8192, 4096, 14336), (8192, 14336, 4096))
# Many-core CPUs: small shapes leave cores idle, so a 7-8 B-model-sized one is added (the budget
# skips it wherever a call would not fit).
MANY_CORE_CPUS = 8
CPU_LARGE_SHAPE: Shape = (2048, 4096, 4096)
SIZING_TOKENS = 16  # the sizing call: the first shape with this many tokens
# The most rows a peak shape grows to (8 sequences of 8,192 tokens): past it a GEMM's rate has
# long stopped rising, and one call of the largest CUDA shape is ~8 TFLOP (10-100 ms).
MAX_PEAK_TOKENS = 65536


def linear_flop(shape: Shape) -> int:
    """Matrix-multiply FLOPs of one F.linear call without bias: 2 per multiply-add."""
    tokens, fan_in, fan_out = shape
    return 2 * tokens * fan_in * fan_out


@dataclass(frozen=True)
class MeasurePolicy:
    """How to measure: buffer size, F.linear shapes, and the time budget of the whole thing."""

    copy_bytes: int  # size of each of the source and destination buffers
    linear_shapes: tuple[Shape, ...]  # smallest first
    budget_s: float  # bandwidth + FLOP/s together; no block starts after it
    repeats: int = 5  # blocks per rate; the best one counts
    min_block_s: float = 0.05  # each block repeats the op until it lasts at least this long
    bandwidth_share: float = 0.25  # of the budget, for the copy

    @property
    def planned_tokens(self) -> int:
        """The most rows (tokens) among the F.linear shapes: what a measurement reaches unless
        the time budget skips a shape."""
        return max(tokens for tokens, _, _ in self.linear_shapes)

    @classmethod
    def for_device(cls, device: torch.device, tokens: int | None = None) -> MeasurePolicy:
        """Buffers past the last-level cache and within free memory; model-like shapes, also at
        `tokens` rows (the largest B·P of the cells the peak serves) where that is more."""
        if device.type == "cuda":
            free_bytes, _ = torch.cuda.mem_get_info(device)
            shapes = shapes_reaching(CUDA_SHAPES, tokens, free_bytes // 4)
            return cls(_clamp(1 << 30, free_bytes // 8), shapes, budget_s=15.0)
        available = psutil.virtual_memory().available
        if device.type == "mps":
            return cls(512 << 20, shapes_reaching(MPS_SHAPES, tokens, available // 8), 15.0)
        llc = last_level_cache()
        past_cache = max(256 << 20, 4 * (llc.total_bytes if llc else 0))
        many = len(allowed_cpus()) >= MANY_CORE_CPUS
        shapes = (*CPU_SHAPES, CPU_LARGE_SHAPE) if many else CPU_SHAPES
        shapes = shapes_reaching(shapes, tokens, available // 8)
        return cls(_clamp(past_cache, available // 8), shapes, 10.0)


def shapes_reaching(
    shapes: tuple[Shape, ...], tokens: int | None, most_bytes: int
) -> tuple[Shape, ...]:
    """`shapes`, plus each one's matrices at `tokens` rows where that is more than its own,
    smallest first (the admission rule of `measure_linear` relies on it).

    The rows are capped at `MAX_PEAK_TOKENS` and so that one call's operands and output (x, w,
    out, counted at 4 bytes, the widest dtype measured) fit in `most_bytes`.
    """
    if tokens is None:
        return shapes
    grown: list[Shape] = []
    for rows, fan_in, fan_out in shapes:
        fitting = (most_bytes // 4 - fan_in * fan_out) // (fan_in + fan_out)
        wanted = min(tokens, MAX_PEAK_TOKENS, fitting)
        if wanted > rows:
            grown.append((wanted, fan_in, fan_out))
    return tuple(sorted(dict.fromkeys((*shapes, *grown)), key=linear_flop))


def _clamp(wanted: int, most: int) -> int:
    return max(16 << 20, min(wanted, most))


@dataclass(frozen=True)
class LinearPeak:
    """The best F.linear rate and which shapes were measured or skipped for the budget."""

    flop_per_s: float
    best_shape: Shape
    measured: tuple[Shape, ...]
    skipped: tuple[Shape, ...]


@dataclass(frozen=True)
class MeasuredPeaks:
    """One measurement: both rates, what the FLOP/s rests on, and how long it took."""

    flop_per_s: float
    bandwidth_bytes_per_s: float
    linear: LinearPeak
    seconds: float

    @property
    def flop_tokens(self) -> int:
        """The most rows (tokens) of an F.linear shape the FLOP/s figure measured."""
        return max(tokens for tokens, _, _ in self.linear.measured)


def best_rate(
    op: Callable[[], object],
    work: float,
    device: torch.device,
    policy: MeasurePolicy,
    deadline: float,
) -> float:
    """`work` units per second of `op`: the best of up to `policy.repeats` synchronized blocks.

    One untimed first call, then blocks of `iterations` calls (doubled until a block lasts
    `min_block_s`); no doubling or further block starts when it would end past `deadline`
    (`time.perf_counter` seconds). At least one timed block always runs.
    """
    op()  # first call: allocation, kernel selection, lazy init
    device_sync(device)
    iterations = 1
    while True:
        elapsed = _block(op, iterations, device)
        if elapsed >= policy.min_block_s or iterations >= 1 << 16:
            break
        if time.perf_counter() + 2 * elapsed > deadline:
            break
        iterations *= 2
    best = elapsed
    for _ in range(policy.repeats - 1):
        if time.perf_counter() + elapsed > deadline:
            break
        best = min(best, _block(op, iterations, device))
    return work * iterations / best


def _block(op: Callable[[], object], iterations: int, device: torch.device) -> float:
    device_sync(device)
    start = time.perf_counter()
    for _ in range(iterations):
        op()
    device_sync(device)
    return time.perf_counter() - start


def copy_buffers(nbytes: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Source (ones) and destination of `nbytes` each for a bandwidth copy (doctor's drift too)."""
    src = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=device)
    return src, torch.empty_like(src)


def linear_operands(
    shape: Shape, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random `x [tokens, in]` and `w [out, in]` made on the device (no host round trip).

    Random, not zeros: zero operands draw less power and can clock higher than a model's do.
    """
    tokens, fan_in, fan_out = shape
    x = torch.empty(tokens, fan_in, dtype=dtype, device=device).uniform_(-1.0, 1.0)
    w = torch.empty(fan_out, fan_in, dtype=dtype, device=device).uniform_(-1.0, 1.0)
    return x, w


def measure_bandwidth(device: torch.device, policy: MeasurePolicy, deadline: float) -> float:
    """Bytes read + written per second by a device-to-device copy of `policy.copy_bytes`."""
    src, dst = copy_buffers(policy.copy_bytes, device)
    nbytes = src.numel() * src.element_size()
    # The buffers die with this frame; `measure` then empties the allocator's cache.
    return best_rate(lambda: dst.copy_(src), 2.0 * nbytes, device, policy, deadline)


def measure_linear(
    device: torch.device,
    dtype: torch.dtype,
    policy: MeasurePolicy,
    deadline: float,
    linear: LinearOp = functional.linear,
) -> LinearPeak:
    """The best F.linear FLOP/s over `policy.linear_shapes` that fit before `deadline`.

    A sizing call (the first shape at `SIZING_TOKENS` tokens) estimates the rate; each shape
    runs only if its first call plus one block is predicted to end before the deadline. When
    none fits (a dtype the device only emulates, very slowly), the sizing shape's rate is the
    figure and every shape is reported skipped. `linear` is injectable for tests.
    """
    first = policy.linear_shapes[0]
    sizing: Shape = (min(SIZING_TOKENS, first[0]), first[1], first[2])
    x, w = linear_operands(sizing, dtype, device)
    linear(x, w)
    device_sync(device)
    started = time.perf_counter()
    linear(x, w)
    device_sync(device)
    estimate = linear_flop(sizing) / max(time.perf_counter() - started, 1e-9)
    del x, w
    best: tuple[float, Shape] | None = None
    measured: list[Shape] = []
    skipped: list[Shape] = []
    for shape in policy.linear_shapes:
        predicted_s = 2 * linear_flop(shape) / max(estimate, best[0] if best else 0.0)
        if time.perf_counter() + predicted_s > deadline:
            skipped.append(shape)
            continue
        # A function per shape: its operands die before the next shape's are made.
        rate = _shape_rate(shape, dtype, device, policy, deadline=deadline, linear=linear)
        measured.append(shape)
        if best is None or rate > best[0]:
            best = (rate, shape)
    if best is None:
        return LinearPeak(estimate, sizing, (sizing,), tuple(skipped))
    return LinearPeak(best[0], best[1], tuple(measured), tuple(skipped))


def _shape_rate(
    shape: Shape,
    dtype: torch.dtype,
    device: torch.device,
    policy: MeasurePolicy,
    *,
    deadline: float,
    linear: LinearOp,
) -> float:
    x, w = linear_operands(shape, dtype, device)
    return best_rate(lambda: linear(x, w), linear_flop(shape), device, policy, deadline)


def measure(
    device: torch.device,
    dtype: torch.dtype,
    policy: MeasurePolicy | None = None,
    linear: LinearOp = functional.linear,
) -> MeasuredPeaks:
    """Bandwidth, then F.linear FLOP/s, within the policy's budget; frees what it allocated."""
    chosen = policy or MeasurePolicy.for_device(device)
    started = time.perf_counter()
    deadline = started + chosen.budget_s
    try:
        with torch.inference_mode():
            bandwidth = measure_bandwidth(
                device, chosen, started + chosen.budget_s * chosen.bandwidth_share
            )
            flops = measure_linear(device, dtype, chosen, deadline, linear)
    finally:
        release_cached_memory(device)
    return MeasuredPeaks(flops.flop_per_s, bandwidth, flops, time.perf_counter() - started)
