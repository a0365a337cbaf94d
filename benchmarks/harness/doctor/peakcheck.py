"""Measured peak bandwidth and F.linear FLOP/s against the datasheet (`roofline.peaks`).

The measurement is `peaks.measure_peaks` (a device-to-device copy and the model's F.linear op,
within a time budget); the datasheet row is `peaks.lookup_table` for the accelerator's name.
By default the budget is `QUICK_BUDGET_S` (the doctor should take seconds); `--full` uses the
suite's own budget. A figure under `WARN_RATIO` of the datasheet is a `warn` pointing at the
clock, power and throttle findings: a slow GPU still measures itself, but not as its datasheet
says. Nothing is cached here: the suite's peaks cache is for its own, longer measurement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from benchmarks.harness.device.devices import dtype_name, dtype_unsupported_reason
from benchmarks.harness.doctor.findings import Finding, ok
from benchmarks.harness.roofline.peakmeasure import MeasurePolicy
from benchmarks.harness.roofline.peaks import (
    Peaks,
    accelerator_name,
    apple_gpu_cores,
    lookup_table,
    measure_peaks,
)

QUICK_BUDGET_S = 3.0
QUICK_REPEATS = 3
WARN_RATIO = 0.5

Measure = Callable[[torch.device, torch.dtype, MeasurePolicy], Peaks]
Lookup = Callable[[torch.device, torch.dtype], Peaks | None]


def default_dtype(device: torch.device) -> torch.dtype:
    """The dtype the device's matrices mostly run: bf16 where native on CUDA, fp16 on MPS."""
    if device.type == "cuda":
        native = dtype_unsupported_reason(device, torch.bfloat16) is None
        return torch.bfloat16 if native else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def policy_for(device: torch.device, *, full: bool) -> MeasurePolicy:
    """The suite's policy (`--full`) or the same with a budget of seconds."""
    policy = MeasurePolicy.for_device(device)
    if full:
        return policy
    return dataclasses.replace(
        policy, budget_s=min(policy.budget_s, QUICK_BUDGET_S), repeats=QUICK_REPEATS
    )


def datasheet(device: torch.device, dtype: torch.dtype) -> Peaks | None:
    """The datasheet row for this accelerator (None for CPUs and unknown GPUs)."""
    name = accelerator_name(device)
    if name is None:
        return None
    cores = apple_gpu_cores() if device.type == "mps" else None
    return lookup_table(name, dtype, gpu_cores=cores)


def check_peaks(
    device: torch.device,
    dtype: torch.dtype,
    *,
    full: bool = False,
    measure: Measure = measure_peaks,
    lookup: Lookup = datasheet,
) -> list[Finding]:
    """Two findings: bandwidth and FLOP/s, each measured and (where a row exists) compared."""
    measured = measure(device, dtype, policy_for(device, full=full))
    table = lookup(device, dtype)
    name = dtype_name(dtype)
    return [
        _compare(
            "peaks.bandwidth",
            what="copy bandwidth",
            measured=measured.bandwidth_bytes_per_s,
            sheet=None if table is None else table.bandwidth_bytes_per_s,
            scale=1e9,
            unit="GB/s",
            table=table,
        ),
        _compare(
            "peaks.flops",
            what=f"F.linear {name}",
            measured=measured.flop_per_s,
            sheet=None if table is None else table.flop_per_s,
            scale=1e12 if (measured.flop_per_s or 0) >= 1e12 else 1e9,
            unit="TFLOP/s" if (measured.flop_per_s or 0) >= 1e12 else "GFLOP/s",
            table=table,
        ),
    ]


def _compare(
    check: str,
    *,
    what: str,
    measured: float | None,
    sheet: float | None,
    scale: float,
    unit: str,
    table: Peaks | None,
) -> Finding:
    if measured is None:
        return Finding(check, "warn", f"{what}: not measured", "run the doctor with --full")
    text = f"{what} {measured / scale:,.2f} {unit} measured"
    data = {"measured": measured, "datasheet": sheet}
    if sheet is None:
        source = "no datasheet row" if table is None else f"no {what} figure in {table.source}"
        return ok(check, f"{text} ({source})", **data)
    ratio = measured / sheet
    text += f", {ratio:.0%} of the datasheet's {sheet / scale:,.2f} {unit}"
    if ratio < WARN_RATIO:
        return Finding(
            check,
            "warn",
            f"{text}: far below the datasheet",
            "see the clock, power and throttle findings; rerun with --full for a longer "
            "measurement",
            data,
        )
    return ok(check, text, **data)
