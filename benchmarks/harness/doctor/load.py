"""What else the CPU is doing, and the state a benchmark process starts in: load, threads, FTZ.

* `check_load`: other processes' CPU use on this process's CPUs over a short sample
  (`cpustate.CpuUseMeter`: busy time minus our own, so the doctor's threads never count),
  against `peaks.BUSY_FRACTION`, the share at which the suite already refuses to cache a
  measured peak: at or above it a run's numbers say as much about the neighbours as about the
  model (`bad`); a tenth of it is a `warn`. The busiest other processes are named.
* `check_threads`: torch's intra-op threads against the CPUs it may run on: more threads than
  CPUs time-slice each parallel region (`warn`).
* `check_fp_state`: FTZ/DAZ (`fpstate`). The suite pins both off per cell; state that is on at
  start means something in this environment turns it on (a fast-math library), and state that
  cannot be pinned means the suite's pin cannot work here (`bad`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psutil

from benchmarks.harness.device.cpustate import CpuUse, CpuUseMeter, allowed_cpus
from benchmarks.harness.device.fpstate import FLUSH_DENORMAL, FpState, pin_fp_state, read_fp_state
from benchmarks.harness.device.noise import cpu_thread_state
from benchmarks.harness.doctor.findings import Finding, ok
from benchmarks.harness.roofline.peaks import BUSY_FRACTION

WARN_FRACTION = BUSY_FRACTION / 10
"""Others' share of our CPUs worth a warning: noticeable noise, not yet dominating."""
SAMPLE_S = 1.0
TOP_PROCESSES = 3


@dataclass(frozen=True)
class OtherProcess:
    """A process other than this one and its CPU use over the sample (100 = one core)."""

    pid: int
    name: str
    cpu_pct: float


def sample_others(sample_s: float = SAMPLE_S) -> tuple[CpuUse, list[OtherProcess]]:
    """Others' CPU use over `sample_s` seconds of sleep, and the busiest other processes."""
    me = os.getpid()
    procs = [p for p in psutil.process_iter(["pid", "name"]) if p.pid != me]
    for proc in procs:
        try:
            proc.cpu_percent(None)  # the first call starts each process's interval
        except psutil.Error:
            continue
    meter = CpuUseMeter(cpus=allowed_cpus())
    meter.start()
    time.sleep(sample_s)
    use = meter.stop()
    busiest: list[OtherProcess] = []
    for proc in procs:
        try:
            pct = float(proc.cpu_percent(None))
        except psutil.Error:
            continue
        if pct > 0:
            busiest.append(OtherProcess(proc.pid, str(proc.info.get("name") or "?"), pct))
    busiest.sort(key=lambda p: -p.cpu_pct)
    return use, busiest[:TOP_PROCESSES]


def check_load(
    sampler: Callable[[], tuple[CpuUse, Sequence[OtherProcess]]] = sample_others,
) -> Finding:
    """Others' CPU use on our CPUs: `bad` at `BUSY_FRACTION`, `warn` at `WARN_FRACTION`."""
    use, busiest = sampler()
    pct = 100 * use.others_fraction
    message = (
        f"other processes used {use.others_cores:.2f} of this process's {use.cpus} CPUs "
        f"({pct:.0f} %) over {use.wall_s:.1f} s"
    )
    names = ", ".join(f"{p.name} (pid {p.pid}, {p.cpu_pct:.0f} %)" for p in busiest)
    if names:
        message += f"; busiest: {names}"
    data = {"others_cores": round(use.others_cores, 3), "cpus": use.cpus}
    if use.others_fraction >= BUSY_FRACTION:
        return Finding(
            "cpu.load",
            "bad",
            message,
            "stop the other work (or wait for it) before benchmarking; a shared machine's "
            "numbers measure the neighbours",
            data,
        )
    if use.others_fraction >= WARN_FRACTION:
        return Finding(
            "cpu.load", "warn", message, "stop background work for quieter results", data
        )
    return Finding("cpu.load", "ok", message, data=data)


def check_threads(state: dict[str, object] | None = None) -> Finding:
    """torch intra-op threads <= CPUs in this process's affinity, else warn."""
    found = cpu_thread_state() if state is None else state
    threads = int(str(found["torch_num_threads"]))
    affinity = str(found.get("cpu_affinity") or "")
    cpus = len(affinity.split(",")) if affinity and affinity != "unsupported" else os.cpu_count()
    cpus = cpus or 1
    data = {"torch_num_threads": threads, "cpus": cpus}
    if threads > cpus:
        return Finding(
            "cpu.threads",
            "warn",
            f"torch uses {threads} threads on {cpus} CPUs: parallel regions time-slice",
            f"set OMP_NUM_THREADS={cpus} (or fewer) or widen the CPU affinity",
            data,
        )
    return ok("cpu.threads", f"torch uses {threads} thread(s) on {cpus} allowed CPU(s)", **data)


def check_fp_state(
    read: Callable[[], FpState] = read_fp_state, pin: Callable[[bool], FpState] = pin_fp_state
) -> Finding:
    """FTZ/DAZ off at start (as in a user's process) and pinnable off, or say what is wrong."""
    start = read()
    pinned = pin(FLUSH_DENORMAL)  # off, as the suite pins it: the peaks below run so too
    text = f"FTZ {_on(start.flush_to_zero)}, DAZ {_on(start.denormals_are_zero)} at start"
    data = {"flush_to_zero": start.flush_to_zero, "denormals_are_zero": start.denormals_are_zero}
    if pinned.flush_to_zero or pinned.denormals_are_zero:
        return Finding(
            "cpu.fp_state",
            "bad",
            f"{text}, still on after torch.set_flush_denormal(False): the suite cannot pin it",
            "find what loads fast-math code (LD_PRELOAD, a sitecustomize, a -ffast-math "
            "extension) and remove it",
            data,
        )
    if start.flush_to_zero or start.denormals_are_zero:
        return Finding(
            "cpu.fp_state",
            "warn",
            f"{text}: something in this environment turns it on (the suite pins it off per "
            "cell; other tools will not)",
            "find what loads fast-math code (LD_PRELOAD, a sitecustomize, a -ffast-math extension)",
            data,
        )
    return ok("cpu.fp_state", f"{text} (as in a user's process)", **data)


def _on(flag: bool) -> str:
    return "on" if flag else "off"
