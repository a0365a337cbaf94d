"""torch's `KVAccount` (`cache.point`): transformers' caches as the cell's run mode makes them.

Dynamic caches are `cache.kv`'s analytic layout against `cache.measure`'s logical bytes; a
static cell's layers hold their allocated positions (`kvlayout.analytic_layout`) with its
allocated and used bytes beside (`static_fields`), read at every point of the asserting pass
(`probe`) and checked by `static_check`; a quantized cell's packed bytes (`kv_quant_fields`);
hybrid models' recurrent state (`cache.state`). This is what the test functions computed
inline before MLX (DESIGN §14) made a second engine: the same calls, behind the protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from benchmarks.harness.cache.kv import kv_bytes_per_token
from benchmarks.harness.cache.measure import measure_kv
from benchmarks.harness.cache.point import KVPoint
from benchmarks.harness.cache.state import state_fields, state_mismatch
from benchmarks.harness.cache.static import measure_static_kv
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model import compat
from benchmarks.harness.runmode.kvlayout import (
    analytic_layout,
    kv_quant_fields,
    static_check,
    static_fields,
    static_fields_mismatch,
)


class TorchKV:
    """The KV accounting of one torch cell (its model, config and dtype)."""

    def __init__(self, cell: Cell, model: Any, dtype: torch.dtype) -> None:
        self._cell, self._model, self._dtype = cell, model, dtype
        self._config = model.config

    @property
    def bytes_per_token(self) -> int:
        """`cache.kv.kv_bytes_per_token` of the config."""
        return kv_bytes_per_token(self._config, dtype=self._dtype, batch=self._cell.batch)

    def analytic_bytes(self, positions: int) -> int:
        """The cell's cache layout at `positions` (`kvlayout.analytic_layout`)."""
        return analytic_layout(
            self._cell, self._config, dtype=self._dtype, seq_len=positions
        ).total_bytes

    def point(self, cache: Any, positions: int) -> KVPoint:
        """Logical bytes of every K/V tensor against the layout; state and static fields."""
        cache = compat.adopt_cache(self._model, cache)
        measured = measure_kv(cache)
        cell, config, dtype = self._cell, self._config, self._dtype
        fields = {
            **state_fields(config, dtype, cell.batch, measured.state_bytes),
            **static_fields(cell, config, dtype, cache, positions),
        }
        wrong = [state_mismatch(fields), static_fields_mismatch(fields)]
        return KVPoint(
            positions=positions,
            analytic_bytes=self.analytic_bytes(positions),
            measured_bytes=measured.logical_bytes,
            storage_bytes=measured.storage_bytes,
            fields=fields,
            mismatches=tuple(f"at {positions} positions: {w}" for w in wrong if w is not None),
        )

    def extra_fields(self, context_len: int | None) -> dict[str, Any]:
        """A quantized cache's packed bytes per token (and a decode step's read estimate)."""
        return kv_quant_fields(self._cell, self._config, self._dtype, context_len)

    @property
    def probe(self) -> Callable[[Any], Any] | None:
        """A static cell's cache read at every boundary of the asserting pass (`checks`)."""
        return measure_static_kv if self._cell.cache == "static" else None

    def checks(self, prompt: Any, result: Any) -> list[str]:
        """A static cell's allocated and used bytes at every point (DESIGN §9), from the
        readings `probe` took in `result`'s pass."""
        if self._cell.cache != "static":
            return []
        del prompt  # the cell says its batch and prompt length
        return static_check(self._config, self._cell, self._dtype, result.probed)
