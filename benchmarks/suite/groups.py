"""The interleaved comparison groups of a run (`benchmarks/test_interleaved.py`): which cells,
in which order, each group timed once.

* `interleaved_reason(config, cell, reasons)`: why the interleaved module skips a cell at
  collection (a tensor-parallel cell; a cell alone in its comparison group here: nothing to
  interleave it with; a group whose variants do not fit in the device's free memory together),
  given every cell's collection-time reason.
* `group_ranks(cells, rank)`: the sort key of the interleaved items: after the last cell of
  their group, so the one-model modules have released their model first and a group's
  variants are built side by side once.
* `GroupStore` (the session fixture `interleaved`): `timing_for(cell)` times the cell's group
  on first use (`interleave.time_group`: the run's one-model slot released first) and keeps its
  figures for the group's other records; a failed group is kept as failed.

It deliberately does not time (`interleave`) or write records (the test module).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.device.freemem import FreeMemory, free_memory
from benchmarks.harness.matrix.cells import Cell, Matrix
from benchmarks.harness.model.models import MODELS_DIR
from benchmarks.harness.modelcache import ModelCache
from benchmarks.harness.plan import IGNORE_FIT_ENV, fit_estimate
from benchmarks.harness.roofline.fit import FitEstimate, fit_reason
from benchmarks.suite.configure import SHARD_IDS, models_dir_option
from benchmarks.suite.interleave import GroupTiming, comparison_key, time_group
from benchmarks.suite.rounds import MATRIX, Progress


def interleaved_reason(
    config: pytest.Config,
    cell: Cell,
    reasons: Mapping[str, str | None],
    free: Callable[[str], FreeMemory] = free_memory,
) -> str | None:
    """Why the interleaved module skips `cell` (None: it runs), from every cell's reason: a
    tensor-parallel cell, a cell alone in its group here, or a group whose variants, all held at
    once, would not fit in the device's free memory (`group_fit_reason`)."""
    if cell.tp_size > 1:
        return "interleaved groups time single-device cells; a tensor-parallel cell is timed alone"
    matrix: Matrix = config.stash[MATRIX]
    key = comparison_key(cell)
    here = [c for c in matrix.cells if comparison_key(c) == key and reasons.get(c.id) is None]
    if len(here) < 2:
        return (
            "interleaved: no other cell of its comparison group (the same cell but for quant and "
            "kv_quant) runs here, so there is nothing to time it in turn with"
        )
    return group_fit_reason(here, models_dir_option(config) or MODELS_DIR, free)


def group_fit_reason(
    cells: Sequence[Cell], models_dir: Path, free: Callable[[str], FreeMemory] = free_memory
) -> str | None:
    """Why a group's variants cannot be held at once in the device's free memory (their
    weights, once per build, and caches summed, plus the largest activations: the per-cell
    `plan.fit_estimate`), or None (also when unknown, or with `PHASEBENCH_IGNORE_FIT` set)."""
    if os.environ.get(IGNORE_FIT_ENV, "0") not in ("", "0"):
        return None
    try:
        estimates = {c.id: fit_estimate(c, models_dir) for c in cells}
    except Exception:
        return None
    builds = {c.build_key: estimates[c.id].weights_bytes for c in cells}
    total = FitEstimate(
        weights_bytes=sum(builds.values()),
        cache_bytes=sum(e.cache_bytes or 0 for e in estimates.values()),
        cache_positions=max(e.cache_positions for e in estimates.values()),
        batch=max(e.batch for e in estimates.values()),
        activation_bytes=max((e.activation_bytes or 0) for e in estimates.values()),
    )
    found = fit_reason(total, free(cells[0].device), f"{IGNORE_FIT_ENV}=1")
    if found is None:
        return None
    return (
        f"interleaved: the group's {len(cells)} variants are held at once and {found}; the "
        "one-model measurements still run each cell"
    )


def group_ranks(
    cells: Sequence[Cell], rank: Mapping[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """Per cell id, the rank of the last cell of its comparison group (`plan.build_order`
    ranks): sorting the interleaved items by it puts each group after all its cells' other
    measurements, its items together."""
    last: dict[tuple[tuple[str, Any], ...], tuple[int, int]] = {}
    for cell in cells:
        key = comparison_key(cell)
        mine = rank.get(cell.id, (-1, -1))
        last[key] = max(last.get(key, mine), mine)
    return {cell.id: last[comparison_key(cell)] for cell in cells}


class GroupStore:
    """Each comparison group timed once per run (module docstring)."""

    def __init__(self, config: pytest.Config, model_cache: ModelCache, progress: Progress) -> None:
        self._config = config
        self._cache = model_cache
        self._progress = progress
        self._done: dict[tuple[tuple[str, Any], ...], GroupTiming] = {}

    def timing_for(self, cell: Cell, reasons: Mapping[str, str | None]) -> GroupTiming:
        """The interleaved timing of `cell`'s group, timing the group on first use."""
        key = comparison_key(cell)
        if key not in self._done:
            matrix: Matrix = self._config.stash[MATRIX]
            shard = self._config.stash.get(SHARD_IDS, None)
            cells = [
                c
                for c in matrix.cells
                if comparison_key(c) == key
                and reasons.get(c.id) is None
                and (shard is None or c.id in shard)
            ]
            self._cache.release()  # the group's variants are built side by side
            models_dir = models_dir_option(self._config) or MODELS_DIR
            self._progress(f"{cell.id}: timing its comparison group in turn ({len(cells)} cells)")
            try:
                self._done[key] = time_group(
                    cells, models_dir, self._progress, self._cache.measured
                )
            except Exception as error:  # every record of the group fails with it, once
                failure = f"{type(error).__name__}: {error}"
                self._done[key] = GroupTiming({}, [], None, 0, error=failure)
            timing = self._done[key]
            self._progress(
                f"interleaved group done in {timing.wall_s:.1f} s"
                + (f": FAILED: {timing.error}" if timing.error else "")
            )
        return self._done[key]


@pytest.fixture(scope="session")
def interleaved(
    pytestconfig: pytest.Config, model_cache: ModelCache, progress: Progress
) -> GroupStore:
    """The run's interleaved comparison groups (`GroupStore`)."""
    return GroupStore(pytestconfig, model_cache, progress)
