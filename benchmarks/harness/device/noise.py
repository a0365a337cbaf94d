"""Noise control: warmup until stable, pinned CPU threads, and the machine's thermal/clock state.

* `warmup_until_stable` runs warmup rounds until the coefficient of variation (stdev / mean) of
  the last `window` round times is under a bound, or a cap is hit. It is pure over the callable
  it is given (the callable does the synchronized timing and returns seconds) and says how many
  rounds ran and the final CV, so the run can record it. It is optional: the matrix's fixed
  `warmup` count stays the default (STYLE: warmup is explicit and counted).
* `pin_cpu_threads` / `cpu_thread_state` set and record intra-op threads, the OMP/MKL
  environment and (where the OS has it) the CPU affinity mask.
* `thermal_state` records what the OS exposes about temperature and clocks: Linux
  `/sys/class/thermal` zones and cpufreq `scaling_cur_freq`/`scaling_governor`, macOS
  `pmset -g therm` (via a subprocess with a timeout), NVIDIA clocks, temperature and throttle
  reasons through `pynvml` (nvidia-ml-py) when it is installed, of the GPU torch's index names
  (mapped by UUID: `gpuid.py`). Readers never raise: a missing
  file, command or library simply contributes nothing.

Values are plain JSON: `*_hz` (clocks), `*_c` (degrees Celsius), strings and ints. This module
does not judge whether a machine is "quiet enough"; the reports decide what noise means.
"""

from __future__ import annotations

import math
import os
import platform
import re
import statistics
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.device.gpuid import torch_cuda_uuid
from benchmarks.harness.device.nvml import NvmlUnavailable, open_gpu

JsonScalar = str | int | float | bool | None


# ---------------------------------------------------------------------------------------------
# Warmup until stable


@dataclass(frozen=True)
class WarmupPolicy:
    """When warmup may stop: CV of the last `window` rounds below `cv_bound`.

    At least `min_rounds` and at most `max_rounds` rounds run (the cap that ends a never-stable
    warmup); `window` must not exceed `max_rounds`.
    """

    cv_bound: float = 0.05
    window: int = 3
    min_rounds: int = 1
    max_rounds: int = 20

    def __post_init__(self) -> None:
        if self.window < 2:
            raise ValueError("WarmupPolicy.window must be >= 2 (a CV needs two rounds).")
        if not 1 <= self.min_rounds <= self.max_rounds:
            raise ValueError("WarmupPolicy needs 1 <= min_rounds <= max_rounds.")
        if self.window > self.max_rounds:
            raise ValueError("WarmupPolicy.window must not exceed max_rounds.")
        if self.cv_bound <= 0:
            raise ValueError("WarmupPolicy.cv_bound must be positive.")


@dataclass(frozen=True)
class WarmupOutcome:
    """What a warmup did: rounds run, the final window's CV (None before `window` rounds)."""

    rounds: int
    final_cv: float | None
    stable: bool
    round_s: tuple[float, ...]


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample stdev / mean; inf for a non-positive mean (a broken timer is never "stable")."""
    if len(values) < 2:
        raise ValueError("a coefficient of variation needs at least two values")
    mean = statistics.fmean(values)
    if mean <= 0:
        return math.inf
    return statistics.stdev(values) / mean


def warmup_until_stable(run_round: Callable[[], float], policy: WarmupPolicy) -> WarmupOutcome:
    """Call `run_round` (returns one round's seconds) until the last `window` rounds are stable.

    Stops at the first round r >= max(min_rounds, window) whose trailing window has
    CV < cv_bound, or after `max_rounds` rounds (then `stable` is False).
    """
    times: list[float] = []
    cv: float | None = None
    while len(times) < policy.max_rounds:
        times.append(float(run_round()))
        if len(times) >= policy.window:
            cv = coefficient_of_variation(times[-policy.window :])
            if len(times) >= policy.min_rounds and cv < policy.cv_bound:
                return WarmupOutcome(len(times), cv, True, tuple(times))
    return WarmupOutcome(len(times), cv, False, tuple(times))


# ---------------------------------------------------------------------------------------------
# CPU threads

_THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "KMP_AFFINITY",
    # How idle OpenMP workers wait (spin or sleep): decides collapse on a shared CPU.
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "KMP_BLOCKTIME",
)


def pin_cpu_threads(
    num_threads: int | None = None, affinity: Sequence[int] | None = None
) -> dict[str, JsonScalar]:
    """Set torch's intra-op threads and (Linux) the process's CPU affinity; return the state.

    `None` leaves a setting as it is. Affinity is applied only where `os.sched_setaffinity`
    exists; elsewhere the returned `cpu_affinity` says "unsupported".
    """
    if num_threads is not None:
        if num_threads <= 0:
            raise ValueError(f"num_threads is {num_threads}; use a positive count.")
        torch.set_num_threads(num_threads)
    if affinity is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(affinity))
    return cpu_thread_state()


def cpu_thread_state() -> dict[str, JsonScalar]:
    """torch intra/inter-op threads, OMP/MKL env, CPU count and affinity mask, as strings/ints."""
    state: dict[str, JsonScalar] = {
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
    }
    for name in _THREAD_ENV:
        state[f"env_{name}"] = os.environ.get(name)
    if hasattr(os, "sched_getaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        state["cpu_affinity"] = ",".join(str(c) for c in cpus)
    else:
        state["cpu_affinity"] = "unsupported"
    return state


# ---------------------------------------------------------------------------------------------
# Thermal and clock state


def thermal_state(device: torch.device | None = None) -> dict[str, JsonScalar]:
    """Everything this OS and machine expose about temperature and clocks; never raises."""
    state: dict[str, JsonScalar] = {}
    system = platform.system()
    if system == "Linux":
        state.update(linux_thermal_zones())
        state.update(linux_cpufreq())
    elif system == "Darwin":
        state.update(macos_thermal())
    if device is not None and device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        state.update(nvidia_clocks(index))
    return state


def linux_thermal_zones(root: Path = Path("/sys/class/thermal")) -> dict[str, JsonScalar]:
    """`thermal_<zone type>_c` per zone from sysfs (millidegrees -> degrees)."""
    state: dict[str, JsonScalar] = {}
    try:
        zones = sorted(root.glob("thermal_zone*"))
    except OSError:
        return state
    for zone in zones:
        kind = _read(zone / "type") or zone.name
        temp = _read(zone / "temp")
        if temp is None or not temp.lstrip("-").isdigit():
            continue
        key = re.sub(r"[^a-z0-9]+", "_", kind.lower()).strip("_") or zone.name
        state[f"thermal_{key}_c"] = int(temp) / 1000.0
    return state


def linux_cpufreq(root: Path = Path("/sys/devices/system/cpu")) -> dict[str, JsonScalar]:
    """Current/max clock of each CPU (kHz in sysfs -> Hz) and the governor of cpu0."""
    state: dict[str, JsonScalar] = {}
    try:
        cpus = sorted(root.glob("cpu[0-9]*"), key=lambda p: int(p.name[3:]))
    except (OSError, ValueError):
        return state
    for cpu in cpus:
        cur = _read(cpu / "cpufreq" / "scaling_cur_freq")
        if cur is not None and cur.isdigit():
            state[f"{cpu.name}_cur_freq_hz"] = int(cur) * 1000
        top = _read(cpu / "cpufreq" / "cpuinfo_max_freq")
        if top is not None and top.isdigit():
            state[f"{cpu.name}_max_freq_hz"] = int(top) * 1000
    governor = _read(root / "cpu0" / "cpufreq" / "scaling_governor")
    if governor is not None:
        state["cpufreq_governor"] = governor
    return state


def macos_thermal(
    run: Callable[[Sequence[str]], str | None] | None = None,
) -> dict[str, JsonScalar]:
    """`pmset -g therm` levels (CPU speed limit %, thermal warning level) as reported."""
    runner = run or _run_command
    text = runner(["pmset", "-g", "therm"])
    state: dict[str, JsonScalar] = {}
    if text is None:
        return state
    limit = re.search(r"CPU_Speed_Limit\s*=\s*(\d+)", text)
    if limit:
        state["macos_cpu_speed_limit_pct"] = int(limit.group(1))
    warning = re.search(
        r"(No thermal warning level has been recorded|thermal warning level.*)", text
    )
    if warning:
        state["macos_thermal_warning"] = warning.group(1).strip()
    pressure = re.search(r"(?i)thermal pressure.*?:\s*(\w+)", text)
    if pressure:
        state["macos_thermal_pressure"] = pressure.group(1)
    return state


def nvidia_clocks(
    index: int,
    nvml: Any = None,
    *,
    torch_uuid: Callable[[int], str | None] = torch_cuda_uuid,
    environ: Mapping[str, str] | None = None,
) -> dict[str, JsonScalar]:
    """SM/memory clocks, temperature and throttle reasons via pynvml; {} when it is absent.

    `index` is torch's CUDA index; the NVML device is found through its UUID
    (`gpuid.nvml_index`, honouring `CUDA_VISIBLE_DEVICES`), never by the same number, and
    `gpu_nvml_index` records which one was read. No mapping, no readings. `nvml` is the pynvml
    module, `torch_uuid` and `environ` the mapping's inputs (all injected by tests); the handle
    and every reading come from `nvml.open_gpu` (one NVML reader for the library).
    """
    gpu = open_gpu(index, nvml, torch_uuid=torch_uuid, environ=environ)
    if isinstance(gpu, NvmlUnavailable):
        return {}
    try:
        reasons = gpu.throttle_reasons()
        readings: dict[str, JsonScalar | None] = {
            "gpu_nvml_index": gpu.nvml_index,
            "gpu_sm_clock_hz": _hz(gpu.sm_clock_mhz()),
            "gpu_mem_clock_hz": _hz(gpu.mem_clock_mhz()),
            "gpu_max_sm_clock_hz": _hz(gpu.max_sm_clock_mhz()),
            "gpu_temperature_c": gpu.temperature_c(),
            "gpu_throttle_reasons": None if reasons is None else ",".join(reasons) or "none",
        }
    finally:
        gpu.close()
    # One unsupported query must not hide the rest: only what was read is recorded.
    return {key: value for key, value in readings.items() if value is not None}


def _hz(mhz: int | None) -> int | None:
    return None if mhz is None else mhz * 1_000_000


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _run_command(argv: Sequence[str]) -> str | None:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None
