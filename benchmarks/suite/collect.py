"""Collection of the benchmark suite: matrix cells -> parametrized, skipped, sharded, ordered.

* `pytest_generate_tests` parametrizes every test that takes `cell`, indirectly, with the cell's
  plain dict (objects in params are saved as `UNSERIALIZABLE`), its id as the test id, and the
  synchronizing timer as its benchmark marker; cells this machine cannot run are skipped here,
  with their reason.
* `pytest_collection_modifyitems` drops the cells outside `--shard` (reported as deselected)
  and orders every benchmark module's items so that one (model, device, dtype) runs together:
  each model is built once per run and released before the next is built.

What an engine decides (skip reasons, the clock) is its side's (`benchmarks.suite.engines`).
Registered by `benchmarks/conftest.py`, which imports the hooks. Deliberately not here: loading
the matrix (`benchmarks.suite.configure`), building or measuring anything.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.matrix.cells import Cell, Matrix
from benchmarks.harness.plan import build_order
from benchmarks.suite.configure import SHARD_IDS, models_dir_option
from benchmarks.suite.engines import models_path, side
from benchmarks.suite.groups import group_ranks
from benchmarks.suite.rounds import MATRIX
from benchmarks.suite.serve.cells import serve_cell_reason
from benchmarks.suite.tp.cells import measurement_reason

MODULE_ORDER = {
    "test_prefill": 0,
    "test_decode": 1,
    "test_generate": 2,
    "test_kv_cache": 3,
    "test_overhead": 4,
    "test_serve": 5,
    "test_interleaved": 6,
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
    # Serving cells (a `serve` axis) are test_serve's (`SERVE_TEST`) and only its: the other
    # modules time the model in this process, which a serving cell does not build.
    serve_test = bool(getattr(metafunc.module, "SERVE_TEST", False))
    cells = [cell for cell in cells if (cell.serve is not None) == serve_test]
    reasons = {cell.id: _skip_reason(config, cell, models_dir) for cell in cells}
    first_of_build: dict[tuple[str, ...], str] = {}
    for cell in cells:
        if reasons[cell.id] is None:
            first_of_build.setdefault(cell.build_key, cell.id)
    params = []
    for cell in cells:
        reason = reasons[cell.id] or _module_reason(metafunc, cell, left_out, tp_test)
        if reason is None and module_reason is not None:  # e.g. test_interleaved's groups
            reason = module_reason(config, cell, reasons)
        if reason is None and once and first_of_build[cell.build_key] != cell.id:
            first = first_of_build[cell.build_key]
            reason = f"{metafunc.module.__name__} runs once per model, device and dtype: on {first}"
        marks: list[pytest.MarkDecorator] = []
        if reason is not None:
            marks.append(pytest.mark.skip(reason=f"{cell.id}: {reason}"))
        elif serve_test:  # the server's device is not this process's: no device sync here
            marks.append(pytest.mark.benchmark(timer=time.perf_counter))
        else:
            marks.append(pytest.mark.benchmark(timer=side(cell).clock(cell)))
        params.append(pytest.param(cell.to_params(), id=cell.id, marks=marks))
    metafunc.parametrize("cell", params, indirect=True)


def _module_reason(
    metafunc: pytest.Metafunc, cell: Cell, left_out: bool, tp_test: bool
) -> str | None:
    """Why this module skips a cell that runs here: a tp cell outside the tp test, a
    measurement the matrix leaves out, or one the cell's engine has no comparison for."""
    measurement = getattr(metafunc.module, "MEASUREMENT", None)
    if cell.tp_size > 1 and not tp_test:
        return measurement_reason(metafunc.module.__name__)
    if left_out:
        matrix = metafunc.config.stash[MATRIX]
        return f"{matrix.path.name} does not list `{measurement}` under measurements"
    # e.g. HF-generate comparisons of static/compiled or MLX cells
    return side(cell).measurement_reason(cell, measurement)


_SKIPS = pytest.StashKey["dict[str, str | None]"]()


def skip_reasons(config: pytest.Config) -> dict[str, str | None]:
    """Every cell's collection-time reason (None: it runs here), by cell id."""
    return config.stash.setdefault(_SKIPS, {})


def _skip_reason(config: pytest.Config, cell: Cell, models_dir: Path | None) -> str | None:
    # Computed once per cell: every benchmark module parametrizes the same cells.
    known = config.stash.setdefault(_SKIPS, {})
    if cell.id not in known:
        try:
            # A serving cell's own reasons first (no server to start, no --serve-url), then
            # the cell's engine (`engines`: torch's plan, tp and dtype reasons, or mlx-lm's).
            known[cell.id] = serve_cell_reason(cell, config.getoption("serve_url")) or side(
                cell
            ).skip_reason(config, cell, models_path(models_dir))
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


def kv_test_cell_id(item: pytest.Item | None) -> str | None:
    """The cell of `item` when it is a KV-cache test (`suite.handoff`), else None."""
    if item is None or item.path.stem != "test_kv_cache":
        return None
    return _cell_id(item)


def _cell_id(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or "cell" not in callspec.params:
        return None
    return Cell.from_params(callspec.params["cell"]).id
