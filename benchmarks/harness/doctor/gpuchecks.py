"""Judging one CUDA GPU's NVML readings (`gpu.GpuReadings`): a finding per concern.

`bad` (exit 1) where a result would be untrustworthy: another process computing on the GPU
(it takes SMs and memory bandwidth the benchmark thinks it has), ECC errors pending (a GPU
that needs a reset), hardware or thermal slowdown while idle, `CUDA_LAUNCH_BLOCKING` set
(every launch waits: host-bound numbers no user sees). `warn` where results stay valid but
drift or do not compare: clocks not locked, persistence off, a lowered power limit, MIG on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from benchmarks.harness.doctor.findings import Finding, ok, skip
from benchmarks.harness.doctor.gpu import GpuReadings

HARD_THROTTLE = ("hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")
"""Throttle reasons that slow an idle GPU: it cannot run at the speed it claims."""
LOCK_TOLERANCE_MHZ = 30
"""Idle and busy SM clocks this close count as one locked clock (NVML clock bins are ~15 MHz)."""


def check_processes(readings: GpuReadings, own_pid: int | None = None) -> Finding:
    """No other compute process on the GPU (`bad`); graphics-only contexts are a `warn`."""
    check = "gpu.processes"
    if readings.processes is None:
        return Finding(
            check,
            "warn",
            "NVML does not list the GPU's processes here: another job could share it unseen",
            "check `nvidia-smi` on the host before benchmarking",
        )
    me = os.getpid() if own_pid is None else own_pid
    others = [p for p in readings.processes if p.pid != me]
    compute = [p for p in others if p.kind == "compute"]
    listed = ", ".join(
        f"{p.name} (pid {p.pid}"
        + ("" if p.used_bytes is None else f", {p.used_bytes / 2**30:.1f} GiB")
        + ")"
        for p in (compute or others)
    )
    if compute:
        return Finding(
            check,
            "bad",
            f"{len(compute)} other compute process(es) on GPU {readings.nvml_index}: {listed}",
            "stop them (or benchmark on another GPU: CUDA_VISIBLE_DEVICES)",
            {"other_compute_processes": len(compute)},
        )
    if others:
        return Finding(
            check,
            "warn",
            f"{len(others)} graphics process(es) on GPU {readings.nvml_index}: {listed}",
            "benchmark on a GPU without a display, or stop the desktop session",
            {"other_compute_processes": 0},
        )
    # In a container without the host's PID namespace NVML may list nothing at all.
    return ok(check, "NVML lists no other process on the GPU", other_compute_processes=0)


def check_ecc(readings: GpuReadings) -> Finding:
    """Uncorrected ECC errors since the driver loaded, or page retirement/row remap pending."""
    check = "gpu.ecc"
    problems = []
    if readings.ecc_uncorrected_volatile:
        problems.append(f"{readings.ecc_uncorrected_volatile} uncorrected ECC error(s)")
    if readings.retired_pages_pending:
        problems.append("page retirement pending")
    if readings.remapped_rows_pending:
        problems.append("row remapping pending")
    if problems:
        return Finding(
            check,
            "bad",
            "; ".join(problems) + ": the GPU needs a reset before its results can be trusted",
            "drain the GPU and reset it (`sudo nvidia-smi -r -i "
            f"{readings.nvml_index}`) or reboot; report a repeat to the host's admin",
            {"ecc_uncorrected_volatile": readings.ecc_uncorrected_volatile},
        )
    if readings.ecc_enabled is None:
        return skip(check, "ECC is not supported on this GPU")
    state = "on" if readings.ecc_enabled else "off"
    return ok(check, f"ECC {state}, no uncorrected errors or pending retirements", ecc=state)


def check_mig(readings: GpuReadings) -> Finding:
    """MIG off; on (or a pending change) is a `warn`: a slice is not the datasheet's GPU."""
    check = "gpu.mig"
    if readings.mig_enabled is None:
        return skip(check, "MIG is not supported on this GPU")
    if readings.mig_pending:
        return Finding(
            check,
            "warn",
            "a MIG mode change is pending: the GPU runs in the old mode until it is reset",
            f"reset the GPU (`sudo nvidia-smi -r -i {readings.nvml_index}`) or reboot",
            {"mig": readings.mig_enabled},
        )
    if readings.mig_enabled:
        return Finding(
            check,
            "warn",
            "MIG on: this is a slice of the GPU; peaks and results compare only with the same "
            "slice profile",
            f"benchmark on a whole GPU (`sudo nvidia-smi -i {readings.nvml_index} -mig 0`), or "
            "keep every run on the same profile",
            {"mig": True},
        )
    return ok(check, "MIG off", mig=False)


def check_persistence(readings: GpuReadings) -> Finding:
    """Persistence mode on: otherwise the driver unloads between runs and clocks reset."""
    check = "gpu.persistence"
    if readings.persistence_mode is None:
        return skip(check, "persistence mode is not reported on this GPU/OS")
    if not readings.persistence_mode:
        return Finding(
            check,
            "warn",
            "persistence mode off: the driver re-initialises the GPU for each process "
            "(slow first calls, clock settings lost)",
            f"sudo nvidia-smi -i {readings.nvml_index} -pm 1",
            {"persistence": False},
        )
    return ok(check, "persistence mode on", persistence=True)


def check_clocks(readings: GpuReadings, busy_sm_clock_mhz: int | None) -> Finding:
    """Locked SM clocks: the clock idle (before the doctor's kernels) equals the clock busy."""
    check = "gpu.clocks"
    idle, busy, top = readings.sm_clock_mhz, busy_sm_clock_mhz, readings.max_sm_clock_mhz
    if idle is None or top is None:
        return skip(check, "NVML does not report the SM clocks of this GPU")
    data = {"idle_sm_clock_mhz": idle, "busy_sm_clock_mhz": busy, "max_sm_clock_mhz": top}
    text = f"SM clock {idle} MHz idle, {busy if busy is not None else '?'} MHz busy, max {top}"
    if busy is None:
        return Finding(
            check,
            "warn",
            f"{text}: whether the clocks are locked is unknown (no busy reading)",
            f"lock them to be sure: sudo nvidia-smi -i {readings.nvml_index} -lgc {top}",
            data,
        )
    if abs(idle - busy) <= LOCK_TOLERANCE_MHZ:
        return ok(check, f"{text}: locked", **data)
    return Finding(
        check,
        "warn",
        f"{text}: not locked, so each run's speed depends on boost, heat and power",
        f"sudo nvidia-smi -i {readings.nvml_index} -lgc {top} (undo: -rgc); a lower fixed "
        "clock is steadier still",
        data,
    )


def check_throttle(readings: GpuReadings) -> Finding:
    """No hardware/thermal slowdown while idle (`bad`); a software power cap is a `warn`."""
    check = "gpu.throttle"
    reasons = readings.throttle_reasons
    if reasons is None:
        return skip(check, "NVML does not report throttle reasons for this GPU")
    hard = [r for r in reasons if r in HARD_THROTTLE]
    listed = ",".join(reasons) or "none"
    if hard:
        return Finding(
            check,
            "bad",
            f"throttled while idle ({listed}): the GPU is slowed by heat or its power supply",
            "check cooling, fans and power cables; let the GPU cool before benchmarking",
            {"throttle_reasons": listed},
        )
    if "sw_power_cap" in reasons:
        return Finding(
            check,
            "warn",
            f"power-capped while idle ({listed})",
            "see gpu.power_limit; check what else draws power on the board",
            {"throttle_reasons": listed},
        )
    return ok(check, f"throttle reasons: {listed}", throttle_reasons=listed)


def check_power_limit(readings: GpuReadings) -> Finding:
    """The enforced power limit is the default one (a lowered limit lowers sustained clocks)."""
    check = "gpu.power_limit"
    limit, default = readings.power_limit_w, readings.default_power_limit_w
    if limit is None or default is None:
        return skip(check, "NVML does not report the power limits of this GPU")
    data = {"power_limit_w": limit, "default_power_limit_w": default}
    if limit < default * 0.99:
        return Finding(
            check,
            "warn",
            f"power limit {limit:.0f} W, below the default {default:.0f} W: sustained clocks "
            "are lower than the datasheet's",
            f"sudo nvidia-smi -i {readings.nvml_index} -pl {default:.0f} (or keep the cap on "
            "every run and say so)",
            data,
        )
    return ok(check, f"power limit {limit:.0f} W (default {default:.0f} W)", **data)


def check_launch_blocking(environ: Mapping[str, str] | None = None) -> Finding:
    """`CUDA_LAUNCH_BLOCKING` unset: set, every kernel launch waits for the previous kernel."""
    env = os.environ if environ is None else environ
    value = env.get("CUDA_LAUNCH_BLOCKING", "")
    if value not in ("", "0"):
        return Finding(
            "cuda.launch_blocking",
            "bad",
            f"CUDA_LAUNCH_BLOCKING={value}: every launch waits, so timings are host-bound",
            "unset CUDA_LAUNCH_BLOCKING (a debugging switch)",
            {"cuda_launch_blocking": value},
        )
    return ok("cuda.launch_blocking", "CUDA_LAUNCH_BLOCKING unset: launches are asynchronous")


def gpu_checks(readings: GpuReadings, busy_sm_clock_mhz: int | None) -> list[Finding]:
    """Every NVML check, in the order they are printed."""
    return [
        check_processes(readings),
        check_ecc(readings),
        check_mig(readings),
        check_persistence(readings),
        check_clocks(readings, busy_sm_clock_mhz),
        check_throttle(readings),
        check_power_limit(readings),
    ]
