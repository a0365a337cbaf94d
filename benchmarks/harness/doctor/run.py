"""`python -m benchmarks.harness doctor [--device D] [--json FILE] [--quick | --full]
[--self-check [--matrix F] [--probe-model M] [--also-transformers V[,V]]]`.

Runs every check that applies to the device, in a fixed order, and prints one line per finding
(`report.py`): identity, the CPU (sysfs, others' load, threads, FTZ/DAZ), the timer, the device
(CUDA: NVML state and a real sync; MPS: the fallback variable; macOS: power and heat), then the
measured peaks against the datasheet. The CPU load is sampled first, before the doctor's own
work; NVML is read before the doctor's kernels, so the idle clock and the process list are the
machine's own. A check that crashes is reported as `bad` (the doctor cannot vouch for what it
could not check) and the rest still run. `--self-check` then runs the first-contact probes
(`selfcheck/`), one process each, printing each probe's lines as it finishes; their `bad`
findings count like the others.

Exit 0: fit; 1: a `bad` finding; 2: bad input (an unknown device, or one this machine lacks),
raised as `DeviceError` before any check runs.
"""

from __future__ import annotations

import argparse
import platform
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.harness.device.devices import (
    device_unavailable_reason,
    dtype_name,
    parse_dtype,
    resolve_device,
)
from benchmarks.harness.device.fingerprint import machine_fingerprint
from benchmarks.harness.doctor import (
    cpu,
    drift,
    gpuchecks,
    load,
    mps,
    peakcheck,
    timing,
)
from benchmarks.harness.doctor.findings import Finding, exit_status, ok
from benchmarks.harness.doctor.gpu import GpuProbe, NvmlProbe, NvmlUnavailableError
from benchmarks.harness.doctor.report import format_finding, summary_line, to_json, write_json
from benchmarks.harness.doctor.selfcheck import run as selfcheck
from benchmarks.harness.errors import DeviceError

ProbeFactory = Callable[[int], GpuProbe]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb's options (cli.py builds the parser)."""
    parser.add_argument(
        "--device",
        default=None,
        help="cpu | cuda | cuda:N | mps (default: cuda, else mps, else cpu)",
    )
    parser.add_argument("--dtype", default=None, help="peak FLOP/s dtype (default: the device's)")
    parser.add_argument("--json", type=Path, default=None, help="also write the findings here")
    length = parser.add_mutually_exclusive_group()
    length.add_argument(
        "--quick", action="store_true", help=f"peaks in ~{peakcheck.QUICK_BUDGET_S:.0f} s (default)"
    )
    length.add_argument("--full", action="store_true", help="peaks with the suite's full budget")
    parser.add_argument(
        "--self-check",
        action="store_true",
        help="then the first-contact probes (~5 min on a GPU; docs/doctor.md, 'Self-check')",
    )
    parser.add_argument(
        "--matrix",
        type=Path,
        default=None,
        help="--self-check: the matrix whose biggest cell is checked (default: the device's)",
    )
    parser.add_argument(
        "--also-transformers",
        default=None,
        metavar="V[,V]",
        help="--self-check: the compiled-step probe again on these transformers versions, each "
        "in an overlay environment made once (selfcheck/versions.py; needs PyPI)",
    )
    parser.add_argument(
        "--probe-model",
        default=None,
        help=f"--self-check: the model the probes build (default {selfcheck.DEFAULT_MODEL})",
    )


def pick_device(name: str | None) -> torch.device:
    """The device to check; `DeviceError` (exit 2) for an unknown name or an absent device."""
    if name is None:
        if torch.cuda.is_available():
            return torch.device("cuda", 0)
        return torch.device("mps" if torch.backends.mps.is_available() else "cpu")
    try:
        device = resolve_device(name)
    except DeviceError:
        raise DeviceError(f"--device {name!r}: use cpu, cuda, cuda:N or mps.") from None
    reason = device_unavailable_reason(device)
    if reason is not None:
        raise DeviceError(
            f"--device {name}: {reason}; run the doctor where that device is, or use --device cpu."
        )
    if device.type != "cuda":
        return device
    # "cuda" alone is torch's current device: name its index, NVML maps GPUs by index.
    index = torch.cuda.current_device() if device.index is None else device.index
    return torch.device("cuda", index)


def guarded(check: str, run: Callable[[], list[Finding]]) -> list[Finding]:
    """Run a group of checks; a crash becomes one `bad` finding and the doctor goes on."""
    try:
        return run()
    except Exception as error:  # a bug or an odd machine: say so, check the rest
        first = str(error).splitlines()[0] if str(error) else ""
        return [
            Finding(
                check,
                "bad",
                f"the check crashed ({type(error).__name__}: {first}), so it vouches for nothing",
                "rerun; if it repeats, report it with this line",
            )
        ]


def identity(device: torch.device) -> list[Finding]:
    """What is being checked: device, driver and runtime, CPU, torch."""
    fp = machine_fingerprint(device)
    text = f"{device}: "
    if device.type != "cpu":
        text += f"{fp['accelerator']} (driver {fp['driver']}, runtime {fp['runtime']}); "
    text += f"CPU {fp['cpu']} x{fp['cpu_count']}; torch {fp['torch']}"
    return [ok("device.identity", text, accelerator=fp["accelerator"], driver=fp["driver"])]


def cuda_checks(device: torch.device, probe_factory: ProbeFactory) -> list[Finding]:
    """NVML state (read before any of the doctor's kernels), then the sync check."""
    found = [gpuchecks.check_launch_blocking()]
    index = device.index if device.index is not None else 0
    try:
        with probe_factory(index) as probe:
            readings = probe.readings()
            busy: list[int | None] = []
            found += guarded(
                "timing.sync",
                lambda: [timing.check_sync(device, lambda: busy.append(probe.sm_clock_mhz()))],
            )
            found += gpuchecks.gpu_checks(readings, busy[0] if busy else None)
    except NvmlUnavailableError as error:
        found.append(
            Finding(
                "gpu.nvml",
                "warn",
                f"{error}: other processes, ECC, MIG, clocks and power are unchecked",
                "pip install nvidia-ml-py (it is in the `bench` dependency group)",
            )
        )
        found += guarded("timing.sync", lambda: [timing.check_sync(device)])
    return found


def run_checks(
    device: torch.device,
    dtype: torch.dtype,
    *,
    full: bool = False,
    probe_factory: ProbeFactory = NvmlProbe,
) -> list[Finding]:
    """Every finding for `device`, in print order."""
    found = guarded("device.identity", lambda: identity(device))
    found += guarded("cpu.sysfs", cpu.sysfs_checks)
    found += guarded("cpu.load", lambda: [load.check_load()])
    found += guarded("cpu.threads", lambda: [load.check_threads()])
    found += guarded("cpu.fp_state", lambda: [load.check_fp_state()])
    found += guarded("cpu.memory_drift", lambda: [drift.check_memory_drift()])
    found += guarded("timing.timer", lambda: [timing.check_timer()])
    if device.type == "cuda":
        found += guarded("gpu", lambda: cuda_checks(device, probe_factory))
    elif device.type == "mps":
        found += guarded("mps.fallback", lambda: [mps.check_mps_fallback()])
        found += guarded("timing.sync", lambda: [timing.check_sync(device)])
    else:
        found += [timing.check_sync(device)]
    if platform.system() == "Darwin":
        found += guarded("macos", mps.macos_checks)
    found += guarded("peaks", lambda: peakcheck.check_peaks(device, dtype, full=full))
    return found


def run_doctor(args: argparse.Namespace) -> int:
    """The verb: checks, lines on stdout, `--json` if asked; returns the exit status."""
    device = pick_device(args.device)
    dtype = parse_dtype(args.dtype) if args.dtype else peakcheck.default_dtype(device)
    request = selfcheck.request_from(device, args)  # bad input: exit 2 before any check
    findings = run_checks(device, dtype, full=args.full)
    for finding in findings:
        print(format_finding(finding), flush=True)
    if request is not None:  # each probe's lines as it finishes: the probes take minutes
        for finding in selfcheck.self_check(request):
            print(format_finding(finding), flush=True)
            findings.append(finding)
    print(summary_line(str(device), findings), flush=True)
    if args.json is not None:
        write_json(args.json, to_json(str(device), dtype_name(dtype), findings))
    return exit_status(findings)
