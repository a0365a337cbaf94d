"""MLX's `KVAccount` (`cache.point`): mlx-lm's caches predicted exactly and measured.

The prediction replays the engine's forwards (`engine.prefill_updates`: the prompt's chunks,
then one position per decode step) on the arithmetic twin of each layer's cache
(`kvplan.plan_layers` -> `kvrules`), so it holds the step-256 allocation, the trims on growth,
a window's rotation and a quantized cache's packed layout. `analytic_bytes` is the allocated
bytes (what `kv_measured_*` is: what the arrays occupy, as a static cache's allocated bytes);
the used positions' bytes go beside them (`kv_used_analytic_bytes`, `kv_used_measured_bytes`
at a record's point, and checked at every point of a recorded generation), so what the step
rule costs is `kv_measured_* - kv_used_*`.

It deliberately imports no mlx: it reads the measured caches through `measure.py`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from benchmarks.harness.cache.point import KVPoint
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.mlx.engine import prefill_updates
from benchmarks.harness.mlx.kvplan import LayerPlan
from benchmarks.harness.mlx.kvrules import STEP, replay
from benchmarks.harness.mlx.measure import measure


class MlxKV:
    """The KV accounting of one MLX cell: its layers' cache plans and its prompt length."""

    def __init__(self, cell: Cell, plans: list[LayerPlan], notes: list[str]) -> None:
        self._cell, self._plans, self._notes = cell, plans, notes

    @property
    def bytes_per_token(self) -> int:
        """Dense K/V bytes one position adds (the model's dtype, every layer, the batch)."""
        return sum(plan.shape.position_bytes for plan in self._plans)

    def predict(self, positions: int) -> tuple[int, int]:
        """(allocated, used) bytes after the cell's prefill and `positions - P` decode steps."""
        prompt_len = self._cell.prompt_len
        if positions < prompt_len:
            raise ValueError(f"{positions} positions is before the prompt's {prompt_len}")
        updates = [*prefill_updates(prompt_len), *[1] * (positions - prompt_len)]
        return replay([plan.empty() for plan in self._plans], updates)

    def analytic_bytes(self, positions: int) -> int:
        """What the cache's arrays must occupy after `positions` positions."""
        return self.predict(positions)[0]

    def point(self, cache: Any, positions: int) -> KVPoint:
        """The arrays' bytes against the prediction, with the used positions' bytes beside."""
        allocated, used = self.predict(positions)
        found = measure(cache)
        wrong = []
        if found.used_bytes != used:
            wrong.append(
                f"at {positions} positions: used bytes analytic {used}, measured {found.used_bytes}"
            )
        planned = tuple(plan.kind for plan in self._plans)
        if found.kinds != planned:
            wrong.append(f"mlx-lm made caches {found.kinds}, phasebench predicted {planned}")
        return KVPoint(
            positions=positions,
            analytic_bytes=allocated,
            measured_bytes=found.allocated_bytes,
            storage_bytes=found.allocated_bytes,
            fields={
                "kv_used_analytic_bytes": used,
                "kv_used_measured_bytes": found.used_bytes,
                "kv_positions": positions,
            },
            mismatches=tuple(wrong),
        )

    def extra_fields(self, context_len: int | None) -> dict[str, Any]:
        """The cache classes, the growth step, a quantized cache's packed bytes per position,
        and where mlx-lm's cache differs from transformers' (`kvplan.window_notes`)."""
        fields: dict[str, Any] = {
            "kv_mlx_caches": dict(Counter(plan.kind for plan in self._plans)),
            "kv_mlx_step_positions": STEP,
        }
        quantized = [p for p in self._plans if p.bits is not None]
        if quantized:
            fields["kv_quant_bytes_per_token"] = sum(p.empty().position_bytes() for p in quantized)
        if self._notes:
            fields["kv_mlx_note"] = "; ".join(self._notes)
        return fields

    @property
    def probe(self) -> Callable[[Any], Any] | None:
        """None: the engine's pass reads the used bytes itself (`kv_used_bytes`)."""
        return None

    def checks(self, prompt: Any, result: Any) -> list[str]:
        """The used bytes after the prefill and after every decode step of `result`."""
        del prompt
        measured = tuple(getattr(result, "kv_used_bytes", ()))
        prompt_len = self._cell.prompt_len
        wanted = tuple(self.predict(prompt_len + i)[1] for i in range(len(measured)))
        if not measured:
            return ["the recorded generation has no used-bytes readings"]
        return [
            f"after {'prefill' if i == 0 else f'decode step {i}'}: used bytes analytic {w}, "
            f"measured {m}"
            for i, (w, m) in enumerate(zip(wanted, measured, strict=True))
            if w != m
        ]
