"""The benchmark suite's plumbing: matrix -> parametrized cells -> fixtures that build and warm.

* `pytest_configure` loads `--matrix` (a broken matrix is a `pytest.UsageError`: exit 4 before
  anything runs), parses `--shard`, and sets the history defaults: autosave with raw rounds
  unless the user chose where to save, and no history at all under `--profile`.
* `pytest_generate_tests` parametrizes every test that takes `cell`, indirectly, with the cell's
  plain dict (objects in params are saved as `UNSERIALIZABLE`), its id as the test id, and the
  synchronizing timer as its benchmark marker; cells this machine cannot run are skipped here,
  with their reason.
* `pytest_collection_modifyitems` drops the cells outside `--shard` (reported as deselected)
  and orders every benchmark module's items so that one (model, device, dtype) runs together:
  each model is built once per run and released before the next is built.
* Fixtures: `run` (what a measurement needs, bundled: the `cell`, the `loaded` model from the
  session's one-model slot, the seeded `prompt`, the `warmed` record of the cell's warmup, the
  `progress` writer, the timer and sync names) and `peaks` (for roofline percentages).
* Noise control: `--threads` is pinned in `pytest_configure`; `warmed` samples the thermal
  state and runs a fixed or an until-stable warmup; `run` samples the thermal state again when
  the measurement ends.

It deliberately does not measure (the `test_*.py` modules do) or derive metrics
(`benchmarks.harness.records`).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from pytest_benchmark.utils import get_tag

from benchmarks.harness import calibration
from benchmarks.harness.devices import (
    device_sync,
    device_unavailable_reason,
    resolve_device,
    sync_name,
)
from benchmarks.harness.engine import make_prompt
from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.fingerprint import fingerprint_id, machine_fingerprint
from benchmarks.harness.matrix import Cell, Matrix, load_matrix
from benchmarks.harness.modelcache import Loaded, ModelCache, release_device_memory
from benchmarks.harness.noise import (
    WarmupPolicy,
    pin_cpu_threads,
    thermal_state,
    warmup_until_stable,
)
from benchmarks.harness.peaks import PeakRequest, Peaks, resolve_peaks
from benchmarks.harness.plan import build_order, skip_reason
from benchmarks.harness.shard import parse_shard, select_shard
from benchmarks.harness.synctimer import synced_perf_counter
from benchmarks.suite import ACCELERATOR, MATRIX, CellRun, Progress, Warmup

MODULE_ORDER = {
    "test_prefill": 0,
    "test_decode": 1,
    "test_generate": 2,
    "test_kv_cache": 3,
    "test_overhead": 4,
}
SHARD_IDS = pytest.StashKey["frozenset[str] | None"]()
FAILED = pytest.StashKey[bool]()
WARMUPS = pytest.StashKey["dict[str, Warmup]"]()
PEAKS = pytest.StashKey["dict[tuple[str, str], Peaks]"]()
# --warmup-until-stable's policy (min_rounds is set per cell from its warmup); None when off.
STABLE = pytest.StashKey["WarmupPolicy | None"]()


# --- configuration ------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    """Load the matrix and the shard, and default to saving history (before pytest-benchmark)."""
    models_dir = _models_dir(config)
    try:
        matrix = load_matrix(Path(config.getoption("matrix")), models_dir=models_dir)
        shard = config.getoption("shard")
        selected = None
        if shard:
            index, count = parse_shard(shard)
            selected = frozenset(select_shard(matrix.ids, index, count))
    except PhasebenchError as error:
        raise pytest.UsageError(str(error)) from None
    config.stash[MATRIX] = matrix
    config.stash[SHARD_IDS] = selected
    # The fingerprint describes the accelerator this run measures: the first one the matrix
    # names that this machine has (a CUDA cell skipped on a Mac must not be fingerprinted).
    config.stash[ACCELERATOR] = next(
        (
            c.device
            for c in matrix.cells
            if c.device != "cpu" and device_unavailable_reason(c.device) is None
        ),
        None,
    )
    config.stash[PEAKS] = {}
    config.stash[STABLE] = _noise_control(config, matrix)
    _history_defaults(config)


def _noise_control(config: pytest.Config, matrix: Matrix) -> WarmupPolicy | None:
    """Pin `--threads` now, before any model is built; check and return the until-stable policy."""
    threads = config.getoption("threads")
    if threads is not None:
        count = _whole_number(threads, "--threads", 1, "the torch intra-op threads, e.g. 4")
        pin_cpu_threads(count)
    if not config.getoption("warmup_until_stable"):
        return None
    cv_text = config.getoption("stable_cv")
    try:
        cv_bound = float(cv_text)
    except ValueError:
        cv_bound = math.nan
    if not (math.isfinite(cv_bound) and cv_bound > 0):
        raise pytest.UsageError(
            f"--stable-cv {cv_text!r} is not a number above 0; pass the coefficient of "
            "variation the warmup must get under, e.g. --stable-cv 0.02"
        )
    window = _whole_number(
        config.getoption("stable_window"),
        "--stable-window",
        2,
        "a CV needs at least two generations, e.g. 3",
    )
    cap = _whole_number(
        config.getoption("stable_max"),
        "--stable-max",
        window,
        f"the cap must hold one --stable-window of {window} generations",
    )
    most = max(matrix.cells, key=lambda c: c.warmup)
    if most.warmup > cap:
        raise pytest.UsageError(
            f"--stable-max {cap} is below the warmup {most.warmup} of {matrix.path.name} "
            f"(cell {most.id}); raise --stable-max to at least {most.warmup}"
        )
    return WarmupPolicy(cv_bound=cv_bound, window=window, min_rounds=1, max_rounds=cap)


def _whole_number(text: str, option: str, least: int, hint: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = least - 1
    if number < least:
        raise pytest.UsageError(f"{option} {text!r} is not a whole number >= {least}; {hint}")
    return number


def stable_policy_label(policy: WarmupPolicy) -> str:
    """How `extra_info.warmup_policy` names an until-stable warmup."""
    return f"until-stable:cv<{policy.cv_bound:g},k={policy.window},max={policy.max_rounds}"


def _models_dir(config: pytest.Config) -> Path | None:
    value = config.getoption("models_dir")
    return None if value is None else Path(value)


def _history_defaults(config: pytest.Config) -> None:
    # pytest-benchmark reads these options in its own (trylast) pytest_configure, after this one.
    option = config.option
    if config.getoption("profile"):
        # A profiler distorts every timing it observes: such a run must not become history.
        option.benchmark_autosave = False
        option.benchmark_save = None
        return
    if not option.benchmark_save and not option.benchmark_autosave:
        # DESIGN §5: a plain `pytest benchmarks` saves history, named as --benchmark-autosave
        # names it (commit id and time).
        option.benchmark_autosave = get_tag()  # type: ignore[no-untyped-call]
    option.benchmark_save_data = True  # the raw rounds feed the reports' noise model


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say which matrix runs, how much of it, and where its history goes."""
    matrix = config.stash[MATRIX]
    lines = [
        f"phasebench: matrix {matrix.path}: {len(matrix.cells)} cells "
        f"({matrix.excluded} excluded), warmup {matrix.warmup}, rounds {matrix.rounds}"
    ]
    shard = config.getoption("shard")
    selected = config.stash[SHARD_IDS]
    if shard and selected is not None:
        lines.append(f"phasebench: shard {shard}: {len(selected)} of {len(matrix.cells)} cells")
    if config.getoption("threads") is not None:
        pinned = torch.get_num_threads()
        lines.append(f"phasebench: torch intra-op threads pinned to {pinned} (--threads)")
    stable = config.stash[STABLE]
    if stable is not None:
        lines.append(
            f"phasebench: warmup until stable: CV < {stable.cv_bound:g} over the last "
            f"{stable.window} generations, at least each cell's warmup, at most "
            f"{stable.max_rounds}"
        )
    profile = config.getoption("profile")
    if profile:
        lines.append(
            f"phasebench: --profile {profile}: timings are NOT saved to history (a profiler "
            "distorts them); traces go to that directory"
        )
    elif config.option.benchmark_autosave or config.option.benchmark_save:
        storage = config.option.benchmark_storage
        lines.append(f"phasebench: history: {storage} (autosave with raw rounds)")
    return lines


# --- collection ---------------------------------------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize `cell` (indirectly, as plain dicts) with every cell of the matrix."""
    if "cell" not in metafunc.fixturenames:
        return
    config = metafunc.config
    matrix = config.stash[MATRIX]
    models_dir = _models_dir(config)
    # A module may declare `ONE_CELL_PER_BUILD = True` (a diagnostic whose answer does not
    # depend on P, N or B): it then runs on the first cell of each (model, device, dtype) only,
    # and the other cells are skipped with that reason, never silently dropped.
    once = bool(getattr(metafunc.module, "ONE_CELL_PER_BUILD", False))
    # A matrix may leave a measurement out (`measurements:`): its module is skipped with the
    # reason on every cell, so the run says what it did not measure.
    measurement = getattr(metafunc.module, "MEASUREMENT", None)
    left_out = measurement is not None and measurement not in matrix.measurements
    reasons = {cell.id: _skip_reason(config, cell, models_dir) for cell in matrix.cells}
    first_of_build: dict[tuple[str, str, str], str] = {}
    for cell in matrix.cells:
        if reasons[cell.id] is None:
            first_of_build.setdefault(cell.build_key, cell.id)
    params = []
    for cell in matrix.cells:
        reason = reasons[cell.id]
        if reason is None and left_out:
            reason = f"{matrix.path.name} does not list `{measurement}` under measurements"
        if reason is None and once and first_of_build[cell.build_key] != cell.id:
            first = first_of_build[cell.build_key]
            reason = f"{metafunc.module.__name__} runs once per model, device and dtype: on {first}"
        marks: list[pytest.MarkDecorator] = []
        if reason is not None:
            marks.append(pytest.mark.skip(reason=f"{cell.id}: {reason}"))
        else:
            marks.append(pytest.mark.benchmark(timer=synced_perf_counter(cell.device)))
        params.append(pytest.param(cell.to_params(), id=cell.id, marks=marks))
    metafunc.parametrize("cell", params, indirect=True)


_SKIPS = pytest.StashKey["dict[str, str | None]"]()


def _skip_reason(config: pytest.Config, cell: Cell, models_dir: Path | None) -> str | None:
    # Computed once per cell: every benchmark module parametrizes the same cells.
    known = config.stash.setdefault(_SKIPS, {})
    if cell.id not in known:
        try:
            known[cell.id] = skip_reason(cell, models_dir)
        except PhasebenchError as error:
            raise pytest.UsageError(f"{matrix_path(config)}: cell {cell.id}: {error}") from None
    return known[cell.id]


def matrix_path(config: pytest.Config) -> Path:
    """The matrix file this run uses."""
    path: Path = config.stash[MATRIX].path
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect cells outside the shard; run each (model, device, dtype) together."""
    matrix: Matrix = config.stash[MATRIX]
    selected = config.stash[SHARD_IDS]
    if selected is not None:
        keep: list[pytest.Item] = []
        drop: list[pytest.Item] = []
        for item in items:
            cell_id = _cell_id(item)
            (drop if cell_id is not None and cell_id not in selected else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep
    rank = build_order(matrix.cells)
    # Stable sort: one (model, device, dtype) together, then cell by cell, then the measurements
    # in the order a reader expects (prefill, decode, generate, kv).
    items.sort(
        key=lambda item: (
            rank.get(_cell_id(item) or "", (-1, -1)),
            MODULE_ORDER.get(item.path.stem, len(MODULE_ORDER)),
        )
    )


def _cell_id(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or "cell" not in callspec.params:
        return None
    return Cell.from_params(callspec.params["cell"]).id


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
    """Label calibration runs: `calibration_slowdown` in every saved benchmark's extra_info."""
    for bench in output_json["benchmarks"]:
        bench["extra_info"].update(calibration.extra_info())


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def progress(pytestconfig: pytest.Config) -> Progress:
    """Writes `phasebench: ...` progress lines to the terminal."""
    return Progress(pytestconfig)


@pytest.fixture(scope="session")
def model_cache(pytestconfig: pytest.Config, progress: Progress) -> Iterator[ModelCache]:
    """The one-model slot shared by every benchmark module."""
    cache = ModelCache(_models_dir(pytestconfig), on_event=progress)
    yield cache
    cache.release()


@pytest.fixture
def cell(request: pytest.FixtureRequest) -> Cell:
    """The matrix cell of this test, rebuilt from its plain-dict parameter."""
    return Cell.from_params(request.param)


@pytest.fixture
def loaded(request: pytest.FixtureRequest, cell: Cell, model_cache: ModelCache) -> Iterator[Loaded]:
    """The cell's built model (shared with the other cells of its model, device and dtype)."""
    device = resolve_device(cell.device)
    loaded = model_cache.get(cell)
    # A/A calibration only (PHASEBENCH_CALIBRATION_SLOWDOWN, docs/calibration.md); else a no-op.
    calibration.maybe_inject_slowdown(
        loaded.model, device, storage=request.config.option.benchmark_storage
    )
    yield loaded
    if request.node.stash.get(FAILED, False):
        # A failed test keeps its frames (and their tensors) alive through sys.last_traceback;
        # drop them and return the memory so an out-of-memory cell does not sink the next ones.
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                setattr(sys, name, None)
        release_device_memory(device)


@pytest.fixture
def prompt(cell: Cell, loaded: Loaded) -> torch.Tensor:
    """The cell's seeded synthetic prompt `[B, P]`, on the host (so TTFT includes the H2D copy)."""
    vocab = int(loaded.config.get_text_config().vocab_size)
    return make_prompt(cell.batch, cell.prompt_len, vocab, cell.seed)


@pytest.fixture
def warmed(
    pytestconfig: pytest.Config,
    cell: Cell,
    loaded: Loaded,
    prompt: torch.Tensor,
    progress: Progress,
) -> Warmup:
    """Run the matrix's warmup (whole generations of N tokens) once per cell, untimed.

    A whole generation warms every shape the cell's measurements use: the prefill at [B, P] and
    decode steps at every context length P..P+N-1 (allocator pools, kernel selection, lazy
    initialisation). The first generation is kept: for the first cell of a model it is the
    cold-start cost right after the build. Every measurement of the cell records the same figures.

    With `--warmup-until-stable` the count is not fixed: generations run until the CV of the
    last k generation times (their e2e) is under the bound, at least the cell's `warmup` (and
    one) and at most `--stable-max`. The thermal state is sampled before the warmup either way.
    """
    done = pytestconfig.stash.setdefault(WARMUPS, {})
    if cell.id in done:
        return done[cell.id]
    stable = pytestconfig.stash[STABLE]
    thermal_before = thermal_state(loaded.device)
    if stable is None and cell.warmup == 0:
        done[cell.id] = Warmup(
            generations=0,
            seconds=0.0,
            first_e2e_s=None,
            policy="fixed:0",
            final_cv=None,
            thermal_before=thermal_before,
        )
        return done[cell.id]
    e2e_s: list[float] = []

    def generation() -> float:
        # Keep figures only, never a generation's cache: a long matrix must not hold old caches.
        e2e_s.append(loaded.engine.generate(prompt, cell.new_tokens).e2e_s)
        return e2e_s[-1]

    what = f"generation(s) of {cell.new_tokens} tokens"
    final_cv: float | None = None
    if stable is None:
        policy = f"fixed:{cell.warmup}"
        progress(f"{cell.id}: warmup, {cell.warmup} {what} ...")
    else:
        policy = stable_policy_label(stable)
        stable = replace(stable, min_rounds=max(1, cell.warmup))
        span = f"{stable.min_rounds}-{stable.max_rounds}"
        progress(f"{cell.id}: warmup until stable, {span} {what} ...")
    device_sync(loaded.device)
    started = time.perf_counter()
    summary = ""
    if stable is None:
        for _ in range(cell.warmup):
            generation()
    else:
        outcome = warmup_until_stable(generation, stable)
        # inf (a non-positive mean) is not JSON; None says "no usable CV".
        if outcome.final_cv is not None and math.isfinite(outcome.final_cv):
            final_cv = outcome.final_cv
        verdict = "stable" if outcome.stable else "NOT stable, stopped at --stable-max"
        cv = math.nan if outcome.final_cv is None else outcome.final_cv
        summary = f": {outcome.rounds} generation(s), last CV {cv:.3f}, {verdict}"
    seconds = time.perf_counter() - started
    progress(f"{cell.id}: warmup done in {seconds:.1f} s{summary}")
    done[cell.id] = Warmup(
        generations=len(e2e_s),
        seconds=seconds,
        first_e2e_s=e2e_s[0],
        policy=policy,
        final_cv=final_cv,
        thermal_before=thermal_before,
    )
    return done[cell.id]


@pytest.fixture
def run(
    cell: Cell, loaded: Loaded, prompt: torch.Tensor, warmed: Warmup, progress: Progress
) -> Iterator[CellRun]:
    """The cell, its model, prompt and warmup, and the timer and sync names for extra_info.

    When the test ends (after its timed rounds), every record it started gets `thermal_after`.
    """
    cell_run = CellRun(
        cell=cell,
        loaded=loaded,
        prompt=prompt,
        warmup=warmed,
        progress=progress,
        timer=synced_perf_counter(loaded.device).__name__,
        sync=sync_name(loaded.device),
    )
    yield cell_run
    if cell_run.records:
        # pytest-benchmark keeps a reference to extra_info, so this still reaches the history.
        after = thermal_state(loaded.device)
        for info in cell_run.records:
            info["thermal_after"] = dict(after)


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
            )
        )
        pytestconfig.stash[PEAKS][(cell.device, cell.dtype)] = fresh
        return fresh

    return again
