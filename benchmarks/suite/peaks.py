"""The `peaks`, `peaks_before_build` and `remeasure_peaks` fixtures: device peaks (`--peaks`).

Resolved once per device and dtype per run (in `config.stash[PEAKS]`), the FLOP/s peak measured
at as many rows as the matrix's largest prefill of that device and dtype
(`largest_prefill_tokens`, B·P); measured peaks are cached per machine by
`benchmarks.harness.roofline.peaks`. **Before any model of that device and dtype is built**:
`loaded` depends on `peaks_before_build`, so a measurement (seconds of full-power copies and
GEMMs, after which the caching allocator is emptied) is followed by the build and the cell's
warmup generations, never directly by a timed round. A held model of another device or dtype is
released first, so the measurement has the memory to itself. Runs in which no test asks for
`peaks` measure nothing. Registered by `benchmarks/conftest.py`, which imports them.
Deliberately not here: measuring the peaks (`benchmarks.harness.roofline.peakmeasure`).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from benchmarks.harness.cellmodel import CellModel
from benchmarks.harness.device.devices import parse_dtype, resolve_device
from benchmarks.harness.device.fingerprint import fingerprint_id, machine_fingerprint
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.modelcache import ModelCache
from benchmarks.harness.roofline.peaks import PeakMode, PeakRequest, Peaks, resolve_peaks
from benchmarks.suite.configure import PEAKS
from benchmarks.suite.rounds import MATRIX, Progress

_WANTED = pytest.StashKey[bool]()


def peaks_wanted(session: pytest.Session) -> bool:
    """Whether a test this run will run asks for `peaks` (decided once per session)."""
    config = session.config
    if _WANTED not in config.stash:
        config.stash[_WANTED] = any(
            "peaks" in getattr(item, "fixturenames", ()) and item.get_closest_marker("skip") is None
            for item in session.items
        )
    return config.stash[_WANTED]


def device_peaks(
    config: pytest.Config, cell: Cell, progress: Progress, model_cache: ModelCache
) -> Peaks:
    """The peaks of `cell`'s device and dtype: known this run, or resolved now (see module)."""
    known = config.stash[PEAKS]
    key = (cell.device, cell.dtype)
    if key in known:
        return known[key]
    mode = config.getoption("peaks")
    device, dtype = resolve_device(cell.device), parse_dtype(cell.dtype)
    if mode in ("measured", "refresh"):
        held = model_cache.current
        if held is not None and (held.device, held.dtype) != (device, dtype):
            model_cache.release()  # the next build would release it anyway: do it first
        progress(f"peaks for {cell.device} {cell.dtype}: measured or read from the cache ...")
    tokens = largest_prefill_tokens(config, cell)
    if mode == "refresh":
        known[key] = _resolve(device, dtype, "measured", refresh=True, flop_tokens=tokens)
    else:
        known[key] = _resolve(device, dtype, mode, refresh=False, flop_tokens=tokens)
    return known[key]


def largest_prefill_tokens(config: pytest.Config, cell: Cell) -> int:
    """The most tokens one prefill GEMM of the matrix runs on `cell`'s device and dtype (B·P).

    The FLOP/s peak is measured at that many rows too (`PeakRequest.flop_tokens`): a GEMM of
    32,768 rows (8 x 4,096) runs nearer the hardware than one of 8,192, so a peak taken at the
    smaller one put the biggest prefills near or past 100 % (`RooflineError`). The whole matrix,
    not this shard's or selection's cells: every shard then measures the same shapes.
    """
    matrix = config.stash.get(MATRIX, None)
    cells = matrix.cells if matrix is not None else ()
    same = (c for c in cells if (c.device, c.dtype) == (cell.device, cell.dtype))
    return max([cell.batch * cell.prompt_len, *(c.batch * c.prompt_len for c in same)])


def _resolve(
    device: torch.device,
    dtype: torch.dtype,
    mode: PeakMode,
    *,
    refresh: bool,
    flop_tokens: int,
    previous: Peaks | None = None,
) -> Peaks:
    fingerprint = machine_fingerprint(device)
    return resolve_peaks(
        PeakRequest(
            device=device,
            dtype=dtype,
            mode=mode,
            refresh=refresh,
            fingerprint_id=fingerprint_id(fingerprint),
            fingerprint=fingerprint,
            previous=previous,
            flop_tokens=flop_tokens,
        )
    )


@pytest.fixture
def peaks_before_build(
    request: pytest.FixtureRequest,
    pytestconfig: pytest.Config,
    cell: Cell,
    progress: Progress,
    model_cache: ModelCache,
) -> None:
    """Resolve the cell's device peaks before `loaded` builds its model (module docstring)."""
    if peaks_wanted(request.session):
        device_peaks(pytestconfig, cell, progress, model_cache)


@pytest.fixture
def peaks(
    pytestconfig: pytest.Config, cell: Cell, progress: Progress, model_cache: ModelCache
) -> Peaks:
    """The device's peak FLOP/s and bandwidth for roofline percentages (`--peaks`).

    Resolved once per device and dtype per run, before the first build (`peaks_before_build`);
    "measured" peaks are cached per machine in `.phasebench/peaks.json`, so only the first run
    on a machine pays for measuring them.
    """
    return device_peaks(pytestconfig, cell, progress, model_cache)


@pytest.fixture
def remeasure_peaks(
    pytestconfig: pytest.Config,
    cell: Cell,
    loaded: CellModel,
    prompt: torch.Tensor,
    progress: Progress,
) -> Callable[[], Peaks]:
    """Measure this device's peaks again now (the cache keeps the higher of old and new).

    For `roofline_confirmed`: a rate above a *measured* peak first suspects the peak (taken while
    other work held the CPU), and only a second excess, against a fresh measurement, fails.
    The model is held meanwhile, so one untimed generation follows the measurement: the cell's
    next measurement does not time its first rounds on an emptied allocator after the burst.
    """

    def again() -> Peaks:
        progress(f"peaks for {cell.device} {cell.dtype}: re-measuring (a rate exceeded them) ...")
        key = (cell.device, cell.dtype)
        # H4: the run's current figure, so that a re-measure can only raise it.
        previous = pytestconfig.stash[PEAKS].get(key)
        fresh = _resolve(
            loaded.device,
            loaded.dtype,
            "measured",
            refresh=True,
            flop_tokens=largest_prefill_tokens(pytestconfig, cell),
            previous=previous,
        )
        pytestconfig.stash[PEAKS][key] = fresh
        loaded.engine.generate(prompt, cell.new_tokens)  # re-warm (see the docstring)
        return fresh

    return again
