"""Apple silicon power from `powermetrics` (macOS), integrated over a window.

`powermetrics` is the only documented power reading on a Mac, and it runs as root only. The
suite never elevates itself: without root, `open_powermetrics` returns a `PowermetricsUnavailable`
saying so (run the suite with sudo to get it). With root, a sampler runs
`powermetrics -i 100 --samplers cpu_power,gpu_power` beside the timed rounds and is stopped
after them; each sample block states its own length ("(102.3ms elapsed)") and the power of the
CPU, the GPU, and the three together ("Combined Power (CPU + GPU + ANE)"), in mW.

The energy of a window is the time-weighted mean power of the samples times the window's wall
time: the first and last sample only partly overlap the window, so summing whole samples would
over- or under-count by up to one interval. `combined` is what an MPS run draws (the model runs
on the GPU, Python and the launches on the CPU); a CPU run reads `cpu`. Intel Macs print another
format (package power in W); they get "no samples", not a guess. Not run on a Mac by us: the
parser is tested on powermetrics' documented output.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

INTERVAL_MS = 100
_ELAPSED = re.compile(r"\*\*\* Sampled system activity .*?\(([\d.]+)\s*ms elapsed\)")
_POWER = {
    "cpu": re.compile(r"^CPU Power:\s*([\d.]+)\s*mW", re.MULTILINE),
    "gpu": re.compile(r"^GPU Power:\s*([\d.]+)\s*mW", re.MULTILINE),
    "combined": re.compile(r"^Combined Power \(CPU \+ GPU \+ ANE\):\s*([\d.]+)\s*mW", re.MULTILINE),
}


@dataclass(frozen=True)
class PowermetricsUnavailable:
    """Why powermetrics cannot be read here (one line)."""

    reason: str


def parse_samples(text: str, rail: str) -> list[tuple[float, float]]:
    """(elapsed_ms, power_mw) per sample block of powermetrics' text output, for `rail`."""
    pattern = _POWER[rail]
    blocks = _ELAPSED.split(text)
    # split() with one group: [before, elapsed1, block1, elapsed2, block2, ...]
    samples = []
    for elapsed, block in zip(blocks[1::2], blocks[2::2], strict=True):
        found = pattern.search(block)
        if found is not None:
            samples.append((float(elapsed), float(found.group(1))))
    return samples


def mean_power_w(samples: list[tuple[float, float]]) -> float | None:
    """The time-weighted mean power of the samples in W; None without any."""
    total_ms = sum(ms for ms, _ in samples)
    if total_ms <= 0:
        return None
    return sum(ms * mw for ms, mw in samples) / total_ms / 1000.0


class PowermetricsSampler:
    """`powermetrics` running beside a window: `start()`, then `stop()` -> joules or None."""

    def __init__(
        self,
        rail: str,
        popen: Callable[..., Any] = subprocess.Popen,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.rail = rail
        self.source = f"powermetrics:{rail}"
        self.failure: str | None = None
        # The window's resolution (`energy.short_window_reason`): one sample interval.
        self.update_period_s = INTERVAL_MS / 1000
        self._popen = popen
        self._clock = clock
        self._process: Any = None
        self._started = 0.0

    def start(self) -> None:
        """Start sampling every `INTERVAL_MS`."""
        argv = ["powermetrics", "-i", str(INTERVAL_MS), "--samplers", "cpu_power,gpu_power"]
        self._process = self._popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self._started = self._clock()

    def stop(self) -> float | None:
        """Stop sampling; the window's joules, or None (then `failure` says why)."""
        window_s = self._clock() - self._started
        process, self._process = self._process, None
        if process is None:
            self.failure = "powermetrics was not started"
            return None
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGINT)  # powermetrics flushes its output on SIGINT
        try:
            out, _ = process.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
        power = mean_power_w(parse_samples(out or "", self.rail))
        if power is None:
            self.failure = (
                f"powermetrics gave no {self.rail} power sample over {window_s:.2f} s "
                f"(a window shorter than its {INTERVAL_MS} ms interval, or an Intel Mac)"
            )
            return None
        return power * window_s


def open_powermetrics(
    rail: str,
    *,
    system: str | None = None,
    euid: Callable[[], int] | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> PowermetricsSampler | PowermetricsUnavailable:
    """A sampler of `rail` ("cpu", "gpu", "combined"), or why powermetrics cannot run here."""
    if (system or platform.system()) != "Darwin":
        return PowermetricsUnavailable("powermetrics exists on macOS only")
    if which("powermetrics") is None:
        return PowermetricsUnavailable("powermetrics not found on PATH")
    uid = euid() if euid is not None else getattr(os, "geteuid", lambda: -1)()
    if uid != 0:
        return PowermetricsUnavailable(
            "powermetrics needs root: run the suite with sudo to record energy "
            "(phasebench never elevates itself)"
        )
    return PowermetricsSampler(rail)
