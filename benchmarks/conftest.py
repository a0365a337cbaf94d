"""The benchmark suite's plumbing: matrix -> parametrized cells -> fixtures that build and warm.

pytest finds hooks and fixtures among this module's names, so the parts kept in their own
modules are imported here (and only here), which registers them:

* `benchmarks.suite.configure`: `pytest_configure` (matrix, shard, `--threads`, until-stable
  options, history defaults) and `pytest_report_header`;
* `benchmarks.suite.collect`: `pytest_generate_tests` (cells -> parametrized tests, skips with their
  reason) and `pytest_collection_modifyitems` (shard deselection, build order);
* `benchmarks.suite.warmup`: `warmed` (the cell's untimed warmup, fixed or until stable);
* `benchmarks.suite.groups`: `interleaved` (the run's interleaved comparison groups, each
  timed once: `benchmarks/test_interleaved.py`);
* `benchmarks.suite.hostprobe`: the host probe points before tests and at the end
  (`pytest_runtest_setup`, `pytest_runtestloop`) and the end of the CPU probes' own process
  (`pytest_unconfigure`; `configure` starts it);
* `benchmarks.suite.peaks`: `peaks` and `remeasure_peaks` (roofline percentages), and
  `peaks_before_build`, which `loaded` waits for: a device's peaks are measured before any
  model of that device and dtype is built, so no timed round follows the measurement's burst.

Defined here: the fixtures `run` (what a measurement needs, bundled: the `cell`, the `loaded`
model from the session's one-model slot, the seeded `prompt`, the `warmed` record, the
`progress` writer, the timer and sync names), `model_cache`, `progress`; freeing the device
after a failed test; calibration labels and the partial history of a killed run. `run`
samples the thermal state again when the measurement ends.

It deliberately does not measure (the `test_*.py` modules do) or derive metrics
(`benchmarks.harness.records`).
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterator
from typing import Any

import pytest
import torch

from benchmarks.calibration import slowdown as calibration
from benchmarks.harness.cellmodel import CellModel
from benchmarks.harness.device.cpustate import OthersCpuMeter
from benchmarks.harness.device.devices import device_unavailable_reason, resolve_device
from benchmarks.harness.device.fingerprint import mps_fallback_refusal
from benchmarks.harness.device.fpstate import pin_fp_state
from benchmarks.harness.device.noise import thermal_state
from benchmarks.harness.engine import make_prompt
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.modelcache import ModelCache
from benchmarks.suite import handoff
from benchmarks.suite.collect import (
    kv_test_cell_id,
    pytest_collection_modifyitems,
    pytest_generate_tests,
)
from benchmarks.suite.configure import (
    PARTIAL,
    models_dir_option,
    pytest_configure,
    pytest_report_header,
)
from benchmarks.suite.groups import interleaved
from benchmarks.suite.hostprobe import (
    add_records,
    pytest_runtest_setup,
    pytest_runtestloop,
    pytest_unconfigure,
    session_seconds,
)
from benchmarks.suite.partial import mark_partial
from benchmarks.suite.peaks import peaks, peaks_before_build, remeasure_peaks
from benchmarks.suite.rounds import MATRIX, THREADS, CellRun, Progress, Warmup
from benchmarks.suite.serve.cells import serve_pool
from benchmarks.suite.serve.record import client_overhead
from benchmarks.suite.tp.cells import tp_run
from benchmarks.suite.warmup import warmed

# Hooks and fixtures defined in the modules above: importing them here is what registers them.
__all__ = [
    "client_overhead",
    "interleaved",
    "peaks",
    "peaks_before_build",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_report_header",
    "pytest_runtest_setup",
    "pytest_runtestloop",
    "pytest_unconfigure",
    "remeasure_peaks",
    "serve_pool",
    "tp_run",
    "warmed",
]

FAILED = pytest.StashKey[bool]()
# Other processes' CPU over the whole test (build, warmup, rounds, the asserting pass): a tiny
# model's timed rounds take milliseconds, too short for the CPU counters (`cpustate`), while the
# tests of a run together span most of its wall time, so the reports add these up (issue 33).
TEST_METER = pytest.StashKey[OthersCpuMeter]()


# --- reports and history --------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember a failed call so the `loaded` fixture can free the device after it."""
    report = yield
    if call.when == "call" and report.failed:
        item.stash[FAILED] = True
    return report


def pytest_benchmark_update_json(
    config: pytest.Config, benchmarks: list[object], output_json: dict[str, Any]
) -> None:
    """Label calibration runs (`calibration_slowdown` in every benchmark's extra_info), mark the
    history of an interrupted run partial (it holds only the cells that finished), and add the
    host probes' records."""
    session = config.stash.get(SESSION, None)
    if session is not None and _stopped_early(session):
        mark_partial(output_json)
        # A test stopped after its rounds but before its teardown has stats and an incomplete
        # record; a partial file holds only the tests that finished.
        finished = config.stash.get(FINISHED, set())
        output_json["benchmarks"] = [
            b for b in output_json["benchmarks"] if b.get("fullname") in finished
        ]
    # The host probes' records (benchmarks/suite/hostprobe.py): every point so far, partial or not.
    add_records(config, output_json)
    for bench in output_json["benchmarks"]:
        bench["extra_info"].update(calibration.extra_info())


def _stopped_early(session: pytest.Session) -> bool:
    """Whether tests were left unfinished: an interrupt, or fewer tests ended than were selected.

    The count is what decides: a Ctrl-C that lands between pytest's own steps (a fixture's
    teardown, a hook) does not always leave `exitstatus` INTERRUPTED when this hook runs.
    """
    finished = session.config.stash.get(FINISHED, set())
    interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED
    return interrupted or len(finished) < len(session.items)


# --- partial history: a killed run keeps what it measured ---------------------------------------

SESSION = pytest.StashKey[pytest.Session]()
FINISHED = pytest.StashKey[set[str]]()  # node ids of tests whose protocol (teardown too) ended


def pytest_sessionstart(session: pytest.Session) -> None:
    """Remember the session: its exit status tells an interrupted run's saved file apart.

    An MPS run with torch's CPU fallback on is refused here (exit 4) unless the user opted in.
    """
    session.config.stash[SESSION] = session
    matrix = session.config.stash.get(MATRIX, None)
    uses_mps = matrix is not None and any(c.device == "mps" for c in matrix.cells)
    refusal = mps_fallback_refusal(uses_mps and device_unavailable_reason("mps") is None)
    if refusal is not None:
        raise pytest.UsageError(refusal)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """After each test (teardown included, so its record is final), rewrite the partial file;
    drop a kept asserting pass unless the next test is its cell's KV test (`suite.handoff`)."""
    try:
        result = yield
        item.config.stash.setdefault(FINISHED, set()).add(item.nodeid)
        return result
    finally:
        handoff.release_unless(kv_test_cell_id(nextitem))
        if PARTIAL in item.config.stash:
            item.config.stash[PARTIAL].write()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """pytest-benchmark has saved the run (its hook wraps this one): drop the partial file.

    After a Ctrl-C (SIGINT) too: the file pytest-benchmark saved then is marked partial by
    `pytest_benchmark_update_json`, so the per-test file is no longer needed.
    """
    if PARTIAL in session.config.stash:
        session.config.stash[PARTIAL].discard()


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def progress(pytestconfig: pytest.Config) -> Progress:
    """Writes `phasebench: ...` progress lines to the terminal."""
    return Progress(pytestconfig)


@pytest.fixture(scope="session")
def model_cache(pytestconfig: pytest.Config, progress: Progress) -> Iterator[ModelCache]:
    """The one-model slot shared by every benchmark module."""
    matrix = pytestconfig.stash.get(MATRIX, None)
    # The matrix's cells: a quantized build computes its cells' dense references first.
    cells = matrix.cells if matrix is not None else ()
    cache = ModelCache(models_dir_option(pytestconfig), on_event=progress, cells=cells)
    yield cache
    cache.release()


@pytest.fixture
def cell(request: pytest.FixtureRequest) -> Cell:
    """The matrix cell of this test, rebuilt from its plain-dict parameter."""
    return Cell.from_params(request.param)


@pytest.fixture
def loaded(
    request: pytest.FixtureRequest, cell: Cell, peaks_before_build: None, model_cache: ModelCache
) -> Iterator[CellModel]:
    """The cell's built model (shared with the other cells of its model, device and dtype).

    After `peaks_before_build`: the device's peaks are known before its first model is built.
    """
    del peaks_before_build  # a dependency for its order only
    meter = request.node.stash[TEST_METER] = OthersCpuMeter()
    meter.start()
    device = resolve_device(cell.device)
    # Every cell starts in the same process state whatever ran before it: the pinned FP state
    # (FTZ/DAZ off, `fpstate`) and the run's intra-op threads, from the build through the
    # warmup; the FP state is pinned again when the cell ends, so nothing leaks onwards.
    pin_fp_state()
    torch.set_num_threads(request.config.stash[THREADS])
    loaded = model_cache.get(cell)
    loaded.configure(cell)  # this cell's start cache (static: DESIGN §9; MLX's: §14)
    # A/A calibration only (PHASEBENCH_CALIBRATION_SLOWDOWN, docs/calibration.md); else a no-op.
    calibration.maybe_inject_slowdown(
        loaded.model, device, storage=request.config.option.benchmark_storage
    )
    yield loaded
    pin_fp_state()
    if request.node.stash.get(FAILED, False):
        # A failed test keeps its frames (and their tensors) alive through sys.last_traceback;
        # drop them and return the memory so an out-of-memory cell does not sink the next ones.
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                setattr(sys, name, None)
        loaded.releaser()()  # the engine's own: the torch allocator's cached blocks, or MLX's


@pytest.fixture
def prompt(cell: Cell, loaded: CellModel) -> torch.Tensor:
    """The cell's seeded synthetic prompt `[B, P]`, on the host (so TTFT includes the H2D copy)."""
    vocab = int(loaded.config.get_text_config().vocab_size)
    return make_prompt(cell.batch, cell.prompt_len, vocab, cell.seed)


@pytest.fixture
def run(
    request: pytest.FixtureRequest,
    *,
    cell: Cell,
    loaded: CellModel,
    prompt: torch.Tensor,
    warmed: Warmup,
    progress: Progress,
) -> Iterator[CellRun]:
    """The cell, its model, prompt and warmup, and the timer and sync names for extra_info.

    When the test ends (after its timed rounds), every record it started gets `thermal_after`,
    the whole test's other-process CPU (`others_test_cpu_s`, `others_test_window_s`) and, in a
    run that probes the host, `session_window_s`: when the test's measurement began and ended
    on the probes' clock (the reports put each figure beside the probe points around it).
    """
    window_start = session_seconds(request.config)
    cell_run = CellRun(
        cell=cell,
        loaded=loaded,
        prompt=prompt,
        warmup=warmed,
        progress=progress,
        timer=loaded.timer_name,
        sync=loaded.sync_name,
    )
    yield cell_run
    if cell_run.records:
        # pytest-benchmark keeps a reference to extra_info, so this still reaches the history.
        after = thermal_state(loaded.device)
        whole = request.node.stash[TEST_METER].stop_extra_info()
        window_end = session_seconds(request.config)
        for info in cell_run.records:
            info["thermal_after"] = dict(after)
            info["others_test_cpu_s"] = whole["others_cpu_s"]
            info["others_test_window_s"] = whole["others_window_s"]
            if window_start is not None and window_end is not None:
                info["session_window_s"] = [window_start, window_end]
