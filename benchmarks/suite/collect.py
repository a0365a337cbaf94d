"""Collection of the benchmark suite: matrix cells -> parametrized, skipped, sharded, ordered.

* `pytest_generate_tests` parametrizes every test that takes `cell`, indirectly, with the cell's
  plain dict (objects in params are saved as `UNSERIALIZABLE`), its id as the test id, and the
  synchronizing timer as its benchmark marker; cells this machine cannot run are skipped here,
  with their reason.
* `pytest_collection_modifyitems` drops the cells outside `--shard` (reported as deselected)
  and orders every benchmark module's items so that one (model, device, dtype) runs together:
  each model is built once per run and released before the next is built.

Registered by `benchmarks/conftest.py`, which imports the hooks. Deliberately not here: loading
the matrix (`benchmarks.suite.configure`), building or measuring anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.harness.device.synctimer import synced_perf_counter
from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.matrix.cells import Cell, Matrix
from benchmarks.harness.model import compat
from benchmarks.harness.model.models import MODELS_DIR, load_model_spec
from benchmarks.harness.plan import build_order, skip_reason
from benchmarks.harness.roofline.dtypespeed import slow_dtype_reason
from benchmarks.harness.runmode.decide import measurement_skip_reason
from benchmarks.suite.configure import SHARD_IDS, models_dir_option
from benchmarks.suite.groups import group_ranks
from benchmarks.suite.rounds import MATRIX
from benchmarks.suite.tp.cells import measurement_reason, tp_cell_reason

MODULE_ORDER = {
    "test_prefill": 0,
    "test_decode": 1,
    "test_generate": 2,
    "test_kv_cache": 3,
    "test_overhead": 4,
    "test_interleaved": 5,
}
# Modules whose items run after the last cell of their comparison group (`groups.group_ranks`).
GROUP_MODULES = frozenset({"test_interleaved"})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize `cell` (indirectly, as plain dicts) with every cell of the matrix."""
    if "cell" not in metafunc.fixturenames:
        return
    config = metafunc.config
    matrix = config.stash[MATRIX]
    models_dir = models_dir_option(config)
    # A module may declare `ONE_CELL_PER_BUILD = True` (a diagnostic whose answer does not
    # depend on P, N or B): it then runs on the first cell of each (model, device, dtype) only,
    # and the other cells are skipped with that reason, never silently dropped.
    once = bool(getattr(metafunc.module, "ONE_CELL_PER_BUILD", False))
    # A matrix may leave a measurement out (`measurements:`): its module is skipped with the
    # reason on every cell, so the run says what it did not measure.
    measurement = getattr(metafunc.module, "MEASUREMENT", None)
    left_out = measurement is not None and measurement not in matrix.measurements
    # A module may name its own per-cell reason, `cell_reason(config, cell, reasons)`.
    module_reason = getattr(metafunc.module, "cell_reason", None)
    # A tensor-parallel test (it takes `tp_run`) gets the tp > 1 cells only, and the single-
    # device test of its module (the module names it as `TP_TEST`) the others; a module without
    # one gets every cell, a tp > 1 cell skipped with its reason. `pytest_collection_modifyitems`
    # drops a test left with no cell, so a matrix without tp cells collects what it did.
    tp_test = "tp_run" in metafunc.fixturenames
    cells = list(matrix.cells)
    if tp_test or hasattr(metafunc.module, "TP_TEST"):
        cells = [cell for cell in cells if (cell.tp_size > 1) == tp_test]
    reasons = {cell.id: _skip_reason(config, cell, models_dir) for cell in cells}
    first_of_build: dict[tuple[str, ...], str] = {}
    for cell in cells:
        if reasons[cell.id] is None:
            first_of_build.setdefault(cell.build_key, cell.id)
    params = []
    for cell in cells:
        reason = reasons[cell.id]
        if reason is None and cell.tp_size > 1 and not tp_test:
            reason = measurement_reason(metafunc.module.__name__)
        if reason is None and left_out:
            reason = f"{matrix.path.name} does not list `{measurement}` under measurements"
        if reason is None:  # e.g. HF-generate comparisons of static/compiled cells
            reason = measurement_skip_reason(cell, measurement)
        if reason is None and module_reason is not None:  # e.g. test_interleaved's groups
            reason = module_reason(config, cell, reasons)
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


def skip_reasons(config: pytest.Config) -> dict[str, str | None]:
    """Every cell's collection-time reason (None: it runs here), by cell id."""
    return config.stash.setdefault(_SKIPS, {})


def _skip_reason(config: pytest.Config, cell: Cell, models_dir: Path | None) -> str | None:
    # Computed once per cell: every benchmark module parametrizes the same cells.
    known = config.stash.setdefault(_SKIPS, {})
    if cell.id not in known:
        try:
            # A tp cell's own reasons first: on a transformers without TP loading, that is
            # what the user must change, whatever else the cell would need.
            known[cell.id] = (
                tp_cell_reason(cell, models_dir)
                or skip_reason(cell, models_dir)
                or _engine_reason(cell, models_dir)
            )
            # H4: a dtype this CPU only emulates (dtypespeed.py) is skipped with its measured
            # ratio unless --allow-slow-dtypes; probed once per dtype, only for cells that run.
            # A quantization comparison is exempt (`slow_dtype_exempt`).
            if (
                known[cell.id] is None
                and not config.getoption("allow_slow_dtypes")
                and not slow_dtype_exempt(cell)
            ):
                known[cell.id] = slow_dtype_reason(cell.device, cell.dtype)
        except PhasebenchError as error:
            raise pytest.UsageError(f"{matrix_path(config)}: cell {cell.id}: {error}") from None
    return known[cell.id]


def slow_dtype_exempt(cell: Cell) -> bool:
    """Whether a cell runs in a dtype this CPU only emulates anyway: the cells of a matrix that
    names `quant` or `kv_quant`, the dense one (`none`) included.

    Their kernels are not F.linear's: PyTorch's CPU int4 kernel is vectorized for bfloat16 on
    AVX2 as on AVX-512 (and only for bfloat16: `quant.methods.quant_timing_reason`), and the
    ratio to the dense cell needs the dense cell in the same dtype. The machine's slow dtypes
    are still recorded (`machine_info.phasebench.slow_dtypes`) beside the figures.
    """
    return cell.quant is not None or cell.kv_quant is not None


def _engine_reason(cell: Cell, models_dir: Path | None) -> str | None:
    """A model the engine cannot run correctly on this transformers (compat.unsupported_reason)."""
    spec = load_model_spec(cell.model, MODELS_DIR if models_dir is None else models_dir)
    return compat.unsupported_reason(spec.hf_config())


def matrix_path(config: pytest.Config) -> Path:
    """The matrix file this run uses."""
    path: Path = config.stash[MATRIX].path
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect cells outside the shard; run each (model, device, dtype) together."""
    matrix: Matrix = config.stash[MATRIX]
    items[:] = [item for item in items if not _without_cells(item)]
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
    last_of_group = group_ranks(matrix.cells, rank)
    # Stable sort: one (model, device, dtype) together, then cell by cell, then the measurements
    # in the order a reader expects (prefill, decode, generate, kv); an interleaved group's
    # items after its last cell, together.
    items.sort(
        key=lambda item: (
            (last_of_group if item.path.stem in GROUP_MODULES else rank).get(
                _cell_id(item) or "", (-1, -1)
            ),
            MODULE_ORDER.get(item.path.stem, len(MODULE_ORDER)),
        )
    )


def _without_cells(item: pytest.Item) -> bool:
    """A test left with no cell (pytest's empty parameter set): a tensor-parallel test of a
    matrix without tp cells, or a single-device test of a matrix of tp cells only."""
    callspec = getattr(item, "callspec", None)
    fixtures = getattr(item, "fixturenames", ())
    return "cell" in fixtures and (
        callspec is None or not isinstance(callspec.params.get("cell"), dict)
    )


def _cell_id(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or "cell" not in callspec.params:
        return None
    return Cell.from_params(callspec.params["cell"]).id
