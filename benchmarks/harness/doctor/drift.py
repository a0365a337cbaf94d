"""Does this host lend the same memory bandwidth from one second to the next?

On a shared host (a cloud VM, a CI runner) other tenants contend for the same memory, and the
bandwidth this process gets moves on a scale of seconds, where neither steal time nor our own
view of other processes' CPU use sees it. Decode streams every weight once per step, so it moves
with it: short rounds become snapshots of one moment, and two modules timing the same step at
different moments disagree (issue 19; docs/suite.md, "Rounds and min_timed_s").

`check_memory_drift` copies the peak measurement's buffer (`peakmeasure.MeasurePolicy`: at least
256 MB and 4x the last-level cache, within free memory) on one thread, back to back for
`QUICK_S` seconds, takes the median copy time of each `BIN_S` bin and reports the bins' spread:
the slowest bin over the fastest (and each over the median of all copies). `drift_finding` is
the pure verdict.

It speaks only on what it can tell (issue 33): the buffers are copied `WARM_COPIES` times
untimed first (the first copy into a freshly allocated gigabyte faults every page in, and read
as one bin 17-28x the median on a quiet Xeon VM), a bin is long enough for `MIN_PER_BIN`
copies, and a bin with fewer (the run's last, or one a stall filled) is not judged; with
fewer than `MIN_BINS` such bins the drift is unknown, said at level skip.
Measured on the 2-core AVX-512 development VM (2026-12-02, quiet, numpy, no torch): 3-s bins of
a 64 MB copy over a minute read 0.89-1.19, an in-cache matmul 0.98-1.05, steal time ~0.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

from benchmarks.harness.doctor.findings import Finding, ok
from benchmarks.harness.roofline.peakmeasure import MeasurePolicy, copy_buffers

QUICK_S = 6.0
BIN_S = 1.0
WARM_COPIES = 2
MIN_PER_BIN = 5
MIN_BINS = 3
WARN_SPREAD = 0.10
"""The slowest bin's median over the fastest's, minus 1: windows of a second read levels 10 %
apart, the size of a regression the reports are asked to see."""


def drift_finding(
    bin_medians_s: Sequence[float], overall_median_s: float, copy_bytes: int
) -> Finding:
    """The verdict on bins' median copy times (seconds) of `copy_bytes` against the median of
    all copies."""
    check = "cpu.memory_drift"
    if len(bin_medians_s) < MIN_BINS or overall_median_s <= 0:
        return Finding(
            check,
            "skip",
            f"only {len(bin_medians_s)} bin(s) of {MIN_PER_BIN} or more copies were timed, so "
            "the drift is unknown",
            "rerun the doctor on a machine that is not swapping",
        )
    low = min(bin_medians_s) / overall_median_s
    high = max(bin_medians_s) / overall_median_s
    spread = high / low - 1.0  # two windows of a second, a few seconds apart
    text = (
        f"a {copy_bytes // 2**20} MB copy: {len(bin_medians_s)} bins of {MIN_PER_BIN}+ copies "
        f"read {low:.2f}-{high:.2f} of the median"
    )
    data = {"low_ratio": round(low, 4), "high_ratio": round(high, 4), "bins": len(bin_medians_s)}
    if spread > WARN_SPREAD:
        return Finding(
            check,
            "warn",
            f"{text}: the memory bandwidth this host lends moves "
            f"{spread * 100:.0f} % from second to second (other tenants)",
            "keep `min_timed_s: 5` (or more) in the matrix so rounds span seconds, compare "
            "A/B with rounds interleaved, and prefer a dedicated host",
            data,
        )
    return ok(check, f"{text}: steady", **data)


def sample_bins(
    copy: Callable[[], None],
    seconds: float = QUICK_S,
    bin_s: float = BIN_S,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[float], float]:
    """Run `copy` back to back for `seconds` after `WARM_COPIES` untimed ones; each bin's median
    copy time and the median of the copies in the bins kept.

    A bin lasts `bin_s`, or `MIN_PER_BIN` times the last warm copy if that is longer; bins with
    fewer than `MIN_PER_BIN` copies are left out (too few to have a median that is not one
    copy's)."""
    warm_s = 0.0
    for _ in range(WARM_COPIES):
        start = clock()
        copy()
        warm_s = clock() - start
    bin_s = max(bin_s, MIN_PER_BIN * warm_s)
    bins: dict[int, list[float]] = {}
    start = clock()
    while (now := clock()) - start < seconds:
        copy()
        elapsed = clock() - now
        bins.setdefault(int((now - start) // bin_s), []).append(elapsed)
    kept = [times for _, times in sorted(bins.items()) if len(times) >= MIN_PER_BIN]
    every = [t for times in kept for t in times]
    if not every:
        return [], 0.0
    return [statistics.median(t) for t in kept], statistics.median(every)


def check_memory_drift(seconds: float = QUICK_S) -> Finding:
    """Time a beyond-cache copy for `seconds` on one thread and judge how much its level moves.

    One thread: a copy split over every CPU stalls whenever any of them is descheduled, so it
    measured the hypervisor's scheduling (which `cpu.load` judges) as much as the memory. On the
    2-core EPYC VM, quiet, six checks each: two threads read spreads of 4-19 % (two of six over
    the line), one thread 1.6-8 % (none); beside a process streaming memory 1.5 s on, 1.5 s off,
    one thread read 26-30 % (warn, three of three); beside one streaming steadily, 1-4 %: a
    steady neighbour lowers the level without moving it (`cpu.load` names that process).
    """
    cpu = torch.device("cpu")
    copy_bytes = MeasurePolicy.for_device(cpu).copy_bytes
    src, dst = copy_buffers(copy_bytes, cpu)

    def copy() -> None:
        dst.copy_(src)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        bins, overall = sample_bins(copy, seconds)
    finally:
        torch.set_num_threads(threads)
    return drift_finding(bins, overall, copy_bytes)
