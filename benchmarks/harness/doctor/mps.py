"""Apple machines: the MPS CPU-fallback variable, low-power mode, power source, thermal limit.

* `check_mps_fallback`: with `PYTORCH_ENABLE_MPS_FALLBACK=1` an op without an MPS kernel runs
  on the CPU instead of failing, inside the timed region, and its time is reported as MPS time:
  a wrong number with a green check (`bad`).
* `check_low_power`, `check_power_source` (`pmset -g`, `pmset -g batt`): low-power mode or
  battery power lower the clocks of both the CPU and the GPU (`warn`).
* `check_thermal` (`noise.macos_thermal`, `pmset -g therm`): a CPU speed limit below 100 %
  means the machine is throttled now (`bad`).

The commands run through an injectable runner (tests pass canned output); a command that does
not run (not macOS, or no `pmset`) makes the finding `skip`.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence

from benchmarks.harness.device.noise import macos_thermal
from benchmarks.harness.doctor.findings import Finding, ok, skip

Runner = Callable[[Sequence[str]], str | None]
FALLBACK_VAR = "PYTORCH_ENABLE_MPS_FALLBACK"


def run_command(argv: Sequence[str]) -> str | None:
    """stdout of a short command, None when it cannot run or fails."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def check_mps_fallback(environ: Mapping[str, str] | None = None) -> Finding:
    """`PYTORCH_ENABLE_MPS_FALLBACK` unset (or 0): set, CPU time is reported as MPS time."""
    env = os.environ if environ is None else environ
    value = env.get(FALLBACK_VAR, "")
    if value not in ("", "0"):
        return Finding(
            "mps.fallback",
            "bad",
            f"{FALLBACK_VAR}={value}: ops without an MPS kernel run on the CPU, timed as MPS",
            f"unset {FALLBACK_VAR} (a missing kernel should fail the cell, not run elsewhere)",
            {"mps_fallback": value},
        )
    return ok("mps.fallback", f"{FALLBACK_VAR} unset: every op runs on the GPU or fails")


def check_low_power(run: Runner = run_command) -> Finding:
    """macOS low-power mode off (`pmset -g`: `lowpowermode 0`)."""
    text = run(["pmset", "-g"])
    match = re.search(r"lowpowermode\s+(\d)", text or "")
    if match is None:
        return skip("macos.low_power", "pmset reports no low-power mode here")
    if match.group(1) == "1":
        return Finding(
            "macos.low_power",
            "warn",
            "low-power mode on: CPU and GPU clocks are reduced",
            "sudo pmset -a lowpowermode 0 (or turn it off in System Settings > Battery)",
            {"low_power": True},
        )
    return ok("macos.low_power", "low-power mode off", low_power=False)


def check_power_source(run: Runner = run_command) -> Finding:
    """On AC power (`pmset -g batt`): on battery, macOS lowers sustained clocks."""
    text = run(["pmset", "-g", "batt"])
    match = re.search(r"drawing from '([^']+)'", text or "")
    if match is None:
        return skip("macos.power_source", "pmset reports no power source here")
    source = match.group(1)
    if "AC" not in source:
        return Finding(
            "macos.power_source",
            "warn",
            f"running on {source}: sustained clocks are lower than on AC power",
            "plug the machine in",
            {"power_source": source},
        )
    return ok("macos.power_source", f"on {source}", power_source=source)


def check_thermal(run: Runner = run_command) -> Finding:
    """No CPU speed limit below 100 % (`pmset -g therm`): a limit means throttling now."""
    state = macos_thermal(run)
    limit = state.get("macos_cpu_speed_limit_pct")
    if not isinstance(limit, int):
        return skip("macos.thermal", "pmset reports no CPU speed limit here")
    if limit < 100:
        return Finding(
            "macos.thermal",
            "bad",
            f"CPU speed limited to {limit} % by the thermal manager: the machine is throttled",
            "let it cool (lid open, airflow, nothing else running) and run the doctor again",
            {"cpu_speed_limit_pct": limit},
        )
    return ok("macos.thermal", "no thermal speed limit (100 %)", cpu_speed_limit_pct=limit)


def macos_checks(run: Runner = run_command) -> list[Finding]:
    """The macOS power and thermal checks, in the order they are printed."""
    return [check_low_power(run), check_power_source(run), check_thermal(run)]
