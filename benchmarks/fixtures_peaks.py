"""The `peaks` and `remeasure_peaks` fixtures: device peak FLOP/s and bandwidth (`--peaks`).

Resolved once per device and dtype per run (in `config.stash[PEAKS]`); measured peaks are cached
per machine by `benchmarks.harness.roofline.peaks`. Registered by `benchmarks/conftest.py`, which
imports
them. Deliberately not here: measuring the peaks (`benchmarks.harness.roofline.peakmeasure`).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from benchmarks.configure import PEAKS
from benchmarks.harness.device.fingerprint import fingerprint_id, machine_fingerprint
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.modelcache import Loaded
from benchmarks.harness.roofline.peaks import PeakRequest, Peaks, resolve_peaks
from benchmarks.suite import Progress


@pytest.fixture
def peaks(pytestconfig: pytest.Config, cell: Cell, loaded: Loaded, progress: Progress) -> Peaks:
    """The device's peak FLOP/s and bandwidth for roofline percentages (`--peaks`).

    Resolved once per device and dtype per run; "measured" peaks are cached per machine in
    `.phasebench/peaks.json`, so only the first run on a machine pays for measuring them.
    """
    known = pytestconfig.stash[PEAKS]
    key = (cell.device, cell.dtype)
    if key not in known:
        mode = pytestconfig.getoption("peaks")
        if mode in ("measured", "refresh"):
            progress(f"peaks for {cell.device} {cell.dtype}: measured or read from the cache ...")
        fingerprint = machine_fingerprint(loaded.device)
        known[key] = resolve_peaks(
            PeakRequest(
                device=loaded.device,
                dtype=loaded.dtype,
                mode="measured" if mode == "refresh" else mode,
                refresh=mode == "refresh",
                fingerprint_id=fingerprint_id(fingerprint),
                fingerprint=fingerprint,
            )
        )
    peaks: Peaks = known[key]
    return peaks


@pytest.fixture
def remeasure_peaks(
    pytestconfig: pytest.Config, cell: Cell, loaded: Loaded, progress: Progress
) -> Callable[[], Peaks]:
    """Measure this device's peaks again now (the cache keeps the higher of old and new).

    For `roofline_confirmed`: a rate above a *measured* peak first suspects the peak (taken while
    other work held the CPU), and only a second excess, against a fresh measurement, fails.
    """

    def again() -> Peaks:
        progress(f"peaks for {cell.device} {cell.dtype}: re-measuring (a rate exceeded them) ...")
        fingerprint = machine_fingerprint(loaded.device)
        fresh = resolve_peaks(
            PeakRequest(
                device=loaded.device,
                dtype=loaded.dtype,
                mode="measured",
                refresh=True,
                fingerprint_id=fingerprint_id(fingerprint),
                fingerprint=fingerprint,
                # H4: the run's current figure, so that a re-measure can only raise it.
                previous=pytestconfig.stash[PEAKS].get((cell.device, cell.dtype)),
            )
        )
        pytestconfig.stash[PEAKS][(cell.device, cell.dtype)] = fresh
        return fresh

    return again
