"""Which CPUs both A/B sides are pinned to (`--cpus`), so that other work hits both alike.

Left alone, the scheduler keeps each process on the core it last ran on; other work on one core
then slows one side for as long as it stays there, and a whole benchmark's pairs shift together
(A/A ratios of 0.78-1.26 under load on the development machine). Pinned to the same cores,
whatever else runs there hits both sides; only one side times at a time, so sharing costs the
timed rounds nothing. Linux only (`os.sched_setaffinity`).

`default_threads()` is the torch thread count each side gets when `--threads` is not given:
one core fewer than this process may use (at least 1). With torch's default (every core) the
two sides' OpenMP pools share every core, so the side that waits steals from the side that
times: at the defaults on the 2-core development machine an A/A run's median 95 % half-width
was 8.2 % and 22 of 49 timings were unstable; with one thread per side, pinned, 0.9 % (docs/ab.md).

It deliberately does not pin anything itself (`run` does, right after starting each side).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from benchmarks.ab.sides import ABError


def parse_cpus(text: str) -> frozenset[int]:
    """'1' or '0-3,6' -> {0, 1, 2, 3, 6}; ABError unless every CPU is one this process may use."""
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            low, _, high = part.strip().partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    except ValueError:
        cpus.clear()
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if not cpus or not cpus <= allowed:
        raise ABError(
            f"--cpus {text!r}: name CPUs this machine lets the command use ({sorted(allowed)}), "
            "e.g. --cpus 1 or --cpus 0-1 (Linux only)"
        )
    return frozenset(cpus)


def usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity on Linux, else the CPU count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_threads() -> int:
    """Torch threads per side without `--threads`: one core left for the waiting side, the
    coordinator and the operating system (see the module docstring)."""
    return max(1, usable_cpus() - 1)


def given_threads(pytest_args: Sequence[str]) -> bool:
    """Whether the pytest arguments name `--threads` (then the user chose the count)."""
    return any(arg == "--threads" or arg.startswith("--threads=") for arg in pytest_args)


def choose_cpus(text: str, pytest_args: Sequence[str]) -> frozenset[int] | None:
    """The CPUs both sides are pinned to: `--cpus LIST`, none, or auto (see `_parser`)."""
    if text == "none":
        return None
    if text != "auto":
        return parse_cpus(text)
    threads = threads_in(pytest_args)
    if threads is None or not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    return frozenset(allowed[-threads:]) if 0 < threads <= len(allowed) else None


def threads_in(pytest_args: Sequence[str]) -> int | None:
    """The count `--threads N` names (None: absent or not a whole number)."""
    for i, arg in enumerate(pytest_args):
        value = arg.partition("=")[2] if arg.startswith("--threads=") else None
        if arg == "--threads" and i + 1 < len(pytest_args):
            value = pytest_args[i + 1]
        if value is not None:
            return int(value) if value.isdigit() else None
    return None
