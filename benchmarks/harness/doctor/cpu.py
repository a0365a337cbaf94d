"""The CPU's frequency policy from Linux sysfs: governor, turbo, SMT, isolated CPUs.

Each check takes the sysfs CPU root (tests pass a fake tree) and the CPUs this process may run
on (`cpustate.allowed_cpus`); where sysfs has no such file (a VM without cpufreq, macOS, a
container that hides it) the finding is `skip` and says so: the host decides there. Frequency
scaling and turbo make a run's speed depend on temperature and on what ran before it; SMT lets
a sibling thread take this core's units; none of them makes results wrong, so each is a `warn`
with the command that fixes it (pyperf's `system tune` applies the same settings).
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.device.cpustate import SYSFS_CPU, allowed_cpus, parse_cpu_list
from benchmarks.harness.doctor.findings import Finding, ok, skip

PERFORMANCE = "performance"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _not_linux(check: str) -> Finding | None:
    if platform.system() != "Linux":
        return skip(check, f"not read on {platform.system() or 'this OS'} (Linux sysfs only)")
    return None


def check_governor(root: Path = SYSFS_CPU, cpus: Sequence[int] | None = None) -> Finding:
    """`performance` on every allowed CPU, else warn with the `cpupower` command."""
    check = "cpu.governor"
    chosen = allowed_cpus() if cpus is None else list(cpus)
    governors = {
        cpu: found
        for cpu in chosen
        if (found := _read(root / f"cpu{cpu}" / "cpufreq" / "scaling_governor")) is not None
    }
    if not governors:
        return _not_linux(check) or skip(
            check, "no cpufreq governor in sysfs (a VM or container: the host sets the clocks)"
        )
    others = sorted({g for g in governors.values() if g != PERFORMANCE})
    summary = ", ".join(f"{g} on {sum(v == g for v in governors.values())}" for g in others)
    if not others:
        return ok(check, f"{PERFORMANCE} on all {len(governors)} CPUs", governor=PERFORMANCE)
    return Finding(
        check,
        "warn",
        f"governor {summary} of {len(governors)} CPUs (not {PERFORMANCE}): clocks follow load",
        f"sudo cpupower frequency-set -g {PERFORMANCE}",
        {"governor": ",".join(others)},
    )


def check_turbo(root: Path = SYSFS_CPU) -> Finding:
    """Turbo/boost off (intel_pstate `no_turbo` = 1, or cpufreq `boost` = 0), else warn."""
    check = "cpu.turbo"
    # (file, the value that means turbo is off, what the knob is called)
    knobs = (
        ("intel_pstate/no_turbo", "1", "turbo", "intel_pstate no_turbo"),
        ("cpufreq/boost", "0", "boost", "cpufreq boost"),
    )
    for relative, off, name, label in knobs:
        value = _read(root / relative)
        if value not in ("0", "1"):
            continue
        if value == off:
            return ok(check, f"{name} off ({label}={value})", turbo=False)
        return Finding(
            check,
            "warn",
            f"{name} on ({label}={value}): the clock depends on temperature and load",
            f"echo {off} | sudo tee /sys/devices/system/cpu/{relative}",
            {"turbo": True},
        )
    return _not_linux(check) or skip(
        check, "no intel_pstate/no_turbo or cpufreq/boost in sysfs (a VM: the host decides)"
    )


def check_smt(root: Path = SYSFS_CPU) -> Finding:
    """SMT (hyper-threading) off or unavailable; on is a warn with the sysfs switch."""
    check = "cpu.smt"
    active = _read(root / "smt" / "active")
    control = _read(root / "smt" / "control")
    if active is None and control is None:
        return _not_linux(check) or skip(check, "no smt/ in sysfs (kernel without SMT control)")
    if control in ("notsupported", "notimplemented") and active != "1":
        return skip(check, f"no SMT to switch here (smt/control={control})")
    if active == "1" or control == "on":
        return Finding(
            check,
            "warn",
            f"SMT on (smt/control={control}): a sibling thread can share this core's units",
            "echo off | sudo tee /sys/devices/system/cpu/smt/control (or turn SMT off in the "
            "BIOS); or pin the run to one thread per core",
            {"smt": True},
        )
    return ok(check, f"SMT off (smt/control={control})", smt=False)


def check_isolation(root: Path = SYSFS_CPU, cpus: Sequence[int] | None = None) -> Finding:
    """Isolated CPUs (`isolcpus=`): optional; a warn only when some exist and we are not on them."""
    check = "cpu.isolated"
    chosen = sorted(allowed_cpus() if cpus is None else cpus)
    text = _read(root / "isolated")
    if text is None:
        return _not_linux(check) or skip(check, "no isolated list in sysfs")
    try:
        isolated = sorted(parse_cpu_list(text))
    except ValueError:
        return skip(check, f"unreadable isolated CPU list {text!r}")
    listed = _cpu_text(isolated)
    if not isolated:
        return ok(
            check,
            "no isolated CPUs: the scheduler may run other tasks beside the benchmark "
            "(optional: isolcpus= on the kernel command line, then taskset)",
            isolated="",
        )
    outside = [c for c in chosen if c not in isolated]
    if outside:
        return Finding(
            check,
            "warn",
            f"CPUs {listed} are isolated but this process may also run on {_cpu_text(outside)}",
            f"run under `taskset -c {listed}` so the benchmark uses only the isolated CPUs",
            {"isolated": listed},
        )
    return ok(check, f"running on isolated CPUs {listed}", isolated=listed)


def _cpu_text(cpus: Sequence[int]) -> str:
    return ",".join(str(c) for c in cpus)


def sysfs_checks(root: Path = SYSFS_CPU, cpus: Sequence[int] | None = None) -> list[Finding]:
    """Every sysfs check, in the order they are printed."""
    return [
        check_governor(root, cpus),
        check_turbo(root),
        check_smt(root),
        check_isolation(root, cpus),
    ]
