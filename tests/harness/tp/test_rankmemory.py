"""A tensor-parallel rank's peaks: loading and running apart, on fake counters and this process.

The bug this guards: the engine's asserting pass resets CUDA's peak at every phase, so one read
at the end of a rank's run missed the load (the biggest allocation of a tensor-parallel load is
often the checkpoint's shards arriving) and reported only the last stretch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from benchmarks.harness.tp.rankmemory import (
    CudaPeak,
    LinuxRssPeak,
    ProcessRssPeak,
    RankPeaks,
    peak_counter,
)


class AllocatorCounter:
    """CUDA's counter on a timeline: `use(b)` allocates up to b bytes live; `read` is the peak
    since the last reset, which restarts at what is live (as `reset_peak_memory_stats`)."""

    kind = "fake allocator"

    def __init__(self, resettable: bool = True) -> None:
        self.live = 0
        self.peak = 0
        self.resettable = resettable

    def use(self, peak: int, then: int) -> None:
        self.peak = max(self.peak, peak)
        self.live = then

    def read(self) -> int | None:
        return self.peak

    def reset(self) -> bool:
        if self.resettable:
            self.peak = self.live
        return self.resettable


def _a_rank(counter: AllocatorCounter) -> tuple[RankPeaks, int | None]:
    """Load (peak 1,000: the shards and their staging, 600 stay), then the asserting pass (its
    own phase peaks, 900 at most, with resets of the counter inside), then rounds (800)."""
    peaks = RankPeaks.start(counter)
    counter.use(1_000, then=600)
    peaks.loaded()
    peaks.mark()
    counter.use(900, then=650)
    counter.reset()  # the engine's PhaseRecorder, at each phase
    counter.use(700, then=650)
    peaks.fold(900)  # the pass's own phase peaks (DecodeResult.peak_allocated_bytes)
    peaks.mark()
    counter.use(800, then=650)
    at_the_end = counter.read()  # what one read at the end of the run saw (the old figure)
    peaks.mark()
    return peaks, at_the_end


def test_the_load_peak_and_the_run_peak_are_read_apart() -> None:
    peaks, at_the_end = _a_rank(AllocatorCounter())
    found = peaks.to_json()
    assert (found["load_peak_bytes"], found["run_peak_bytes"]) == (1_000, 900)
    assert at_the_end == 800  # one read at the end, after the engine's resets: neither peak
    assert found["load_peak_label"] == "fake allocator, from the rank's start to the end of loading"
    assert found["run_peak_label"] == (
        "fake allocator, from the end of loading to the last timed round"
    )


def test_a_counter_that_cannot_be_reset_labels_the_run_peak_as_the_whole_process() -> None:
    found = _a_rank(AllocatorCounter(resettable=False))[0].to_json()
    assert (found["load_peak_bytes"], found["run_peak_bytes"]) == (1_000, 1_000)
    assert "loading included" in found["run_peak_label"]


def test_linux_rss_reads_vmhwm_and_resets_it_through_clear_refs(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmPeak:\t  999 kB\nVmHWM:\t  2048 kB\nVmRSS:\t 1024 kB\n")
    clear_refs = tmp_path / "clear_refs"
    counter = LinuxRssPeak(status, clear_refs)
    assert counter.read() == 2048 * 1024
    assert counter.reset() is True
    assert clear_refs.read_text() == "5"  # "reset the peak RSS" (proc(5), Linux 4.0+)
    assert LinuxRssPeak(status, tmp_path / "missing" / "clear_refs").reset() is False


@pytest.mark.skipif(not LinuxRssPeak.available(), reason="no /proc/self/status VmHWM (not Linux)")
def test_this_process_peak_rss_is_reset_and_seen_again() -> None:
    counter = LinuxRssPeak()
    block = bytearray(64 << 20)  # touched: resident
    high = counter.read()
    del block
    assert high is not None
    assert counter.reset() is True
    after = counter.read()
    assert after is not None
    assert after < high  # the 64 MiB block is gone from the new peak


def test_the_counter_follows_the_device() -> None:
    assert isinstance(peak_counter(torch.device("cuda", 1)), CudaPeak)
    cpu = peak_counter(torch.device("cpu"))
    expected = LinuxRssPeak if LinuxRssPeak.available() else ProcessRssPeak
    assert isinstance(cpu, expected)
    rss = ProcessRssPeak().read()
    assert rss is not None
    assert rss > 1 << 20  # bytes on every OS (ru_maxrss is KiB on Linux, bytes on macOS)
    assert ProcessRssPeak().reset() is False
    assert sys.platform in ("darwin", "linux") or rss > 0
