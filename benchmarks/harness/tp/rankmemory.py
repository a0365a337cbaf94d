"""A tensor-parallel rank's peak memory: loading and running apart, each with what it counts.

A rank's run has two peaks a user sizes a machine by: **loading** (transformers reading the
checkpoint and sharding it: on CPU the whole process up to a ready model) and **running** (the
asserting generation and every timed round, the loaded shards included). One figure read at the
end would miss the first on CUDA, where the engine's asserting pass resets the peak per phase
(`memory.PhaseRecorder`), and hide which is which on CPU. So `RankPeaks` reads the peak when
loading ends, resets it, and reads it again around everything after:

* **CUDA**: `torch.cuda.max_memory_allocated` (the caching allocator's tensors, not its
  reserve), reset with `reset_peak_memory_stats`. The run peak is the largest of the reads after
  the load and the asserting pass's own phase peaks (`fold`), since that pass resets the
  counter at each phase.
* **CPU on Linux**: the process's resident high-water mark (`VmHWM`, /proc/self/status), reset
  by writing 5 to /proc/self/clear_refs (Linux 4.0+): the load peak counts the interpreter,
  torch, transformers and the loaded shards; the run peak the process from the end of the load
  on (the resident model included, as it stays resident).
* **CPU elsewhere** (macOS): `getrusage` ru_maxrss (bytes on macOS, KiB on Linux), which no
  call resets: the run peak is then the whole process's, loading included, and labelled so.

It deliberately does not judge the figures (the report shows them) nor sample between reads.
"""

from __future__ import annotations

import re
import resource
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_HWM = re.compile(r"^VmHWM:\s+(\d+)\s+kB", re.MULTILINE)


class PeakCounter(Protocol):
    """A peak-memory counter: `read()` the peak since the last reset (or the process start)."""

    kind: str  # what it counts, for the labels

    def read(self) -> int | None:
        """The peak so far, bytes (None: this device has no counter)."""
        ...

    def reset(self) -> bool:
        """Start a new peak; False when this counter cannot be reset."""
        ...


class CudaPeak:
    """`max_memory_allocated` of one CUDA device."""

    kind = "cuda max_memory_allocated (the caching allocator's tensors, not its reserve)"

    def __init__(self, device: torch.device) -> None:
        self._device = device

    def read(self) -> int | None:
        return int(torch.cuda.max_memory_allocated(self._device))

    def reset(self) -> bool:
        torch.cuda.reset_peak_memory_stats(self._device)
        return True


class LinuxRssPeak:
    """The process's resident high-water mark, VmHWM (reset through clear_refs)."""

    kind = "process peak RSS (VmHWM: the interpreter, torch and transformers included)"

    def __init__(self, status: Path = _STATUS, clear_refs: Path = _CLEAR_REFS) -> None:
        self._status, self._clear_refs = status, clear_refs

    def read(self) -> int | None:
        found = _HWM.search(self._status.read_text(encoding="ascii"))
        return None if found is None else int(found.group(1)) * 1024

    def reset(self) -> bool:
        try:
            self._clear_refs.write_text("5", encoding="ascii")
        except OSError:  # an old kernel or a locked-down /proc: the peak stays the process's
            return False
        return True

    @staticmethod
    def available() -> bool:
        """Whether this process has a VmHWM to read (Linux)."""
        return _STATUS.is_file() and _HWM.search(_STATUS.read_text(encoding="ascii")) is not None


class ProcessRssPeak:
    """`getrusage` ru_maxrss: the process's peak, never reset."""

    kind = (
        "process peak RSS (getrusage ru_maxrss: the interpreter, torch and transformers included)"
    )

    def read(self) -> int | None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) * (1 if sys.platform == "darwin" else 1024)

    def reset(self) -> bool:
        return False


def peak_counter(device: torch.device) -> PeakCounter:
    """The counter for a rank on `device` (module docstring)."""
    if device.type == "cuda":
        return CudaPeak(device)
    return LinuxRssPeak() if LinuxRssPeak.available() else ProcessRssPeak()


@dataclass
class RankPeaks:
    """A rank's load peak and run peak: `loaded()` when the model is ready, `fold()` a phase
    peak read elsewhere, `mark()` after each stretch of the run, `to_json()` at the end."""

    counter: PeakCounter
    load_bytes: int | None = None
    run_bytes: int | None = None
    run_reset: bool = False  # whether the run's peak excludes the load

    @classmethod
    def start(cls, counter: PeakCounter) -> RankPeaks:
        """Begin before loading; the load peak then counts from the process's start (the
        imports' resident memory is part of what a rank needs)."""
        return cls(counter)

    def loaded(self) -> None:
        """Loading is done: its peak is read, the counter reset for the run."""
        self.load_bytes = self.counter.read()
        self.run_reset = self.counter.reset()

    def fold(self, peak_bytes: int | None) -> None:
        """Count a peak of part of the run read by someone else (the engine's phase peaks)."""
        if peak_bytes is not None:
            self.run_bytes = max(self.run_bytes or 0, int(peak_bytes))

    def mark(self) -> None:
        """Count the run's peak so far and start a new stretch (before a part that resets the
        counter itself, and at the end)."""
        self.fold(self.counter.read())
        if self.run_reset:
            self.counter.reset()

    def to_json(self) -> dict[str, Any]:
        """`load_peak_bytes`, `run_peak_bytes` and their labels."""
        kind = self.counter.kind
        run_span = (
            "from the end of loading to the last timed round"
            if self.run_reset
            else "over the whole process (this counter cannot be reset): loading included"
        )
        return {
            "load_peak_bytes": self.load_bytes,
            "load_peak_label": f"{kind}, from the rank's start to the end of loading",
            "run_peak_bytes": self.run_bytes,
            "run_peak_label": f"{kind}, {run_span}",
        }
