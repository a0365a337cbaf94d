"""What a measurement asks of a cell's KV cache, whichever engine made it (DESIGN §4, §14).

`KVAccount` is the small protocol the suite's test functions call: torch's implementation
(`benchmarks/harness/runmode/kvaccount.py`: transformers' caches, static and quantized ones) and
MLX's (`benchmarks/harness/mlx/account.py`: mlx-lm's step-256 caches) give the same answers in
the same record fields, so `test_prefill_forward`, `test_decode`, `test_generate` and
`test_kv_cache` have no branch on the engine.

* `analytic_bytes(positions)`: what the cache must measure after the cell's prefill and
  `positions - P` decode steps (the prediction `measured_bytes` is asserted equal to).
* `point(cache, positions)`: a `KVPoint`: analytic and measured bytes of that cache, its storage
  bytes, the engine's own extra fields (torch: recurrent state, static cache; MLX: used bytes,
  cache classes) and what among them does not match.
* `extra_fields(context_len)`: per-cell fields (a quantized cache's bytes per token ...).
* `probe`: what the asserting pass (`Engine.generate(..., probe=...)`) must also read of the
  cache at every boundary for `checks` (torch: a static cache's used bytes), or None.
* `checks(prompt, result)`: further mismatches of a recorded generation (torch: a static cache
  at every point, from `result.probed`; MLX: the used bytes at every point).

It deliberately holds no accounting itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class KVPoint:
    """A cache after `positions` positions: predicted and measured bytes, and the engine's own
    extra fields with the mismatches among them (empty: all agree)."""

    positions: int
    analytic_bytes: int
    measured_bytes: int
    storage_bytes: int | None
    fields: Mapping[str, Any] = field(default_factory=dict)
    mismatches: tuple[str, ...] = ()


class KVAccount(Protocol):
    """A cell's KV accounting (module docstring)."""

    @property
    def bytes_per_token(self) -> int:
        """Dense K/V bytes one position adds while no window is full (`kv_bytes_per_token`)."""
        ...

    def analytic_bytes(self, positions: int) -> int:
        """The bytes the cache must measure after `positions` positions."""
        ...

    def point(self, cache: Any, positions: int) -> KVPoint:
        """The measured cache against its prediction at `positions`."""
        ...

    def extra_fields(self, context_len: int | None) -> dict[str, Any]:
        """Per-cell fields; `context_len` for a decode step's (None: a prefill or generation)."""
        ...

    @property
    def probe(self) -> Callable[[Any], Any] | None:
        """What the asserting pass reads of the cache at every boundary for `checks` (None)."""
        ...

    def checks(self, prompt: Any, result: Any) -> list[str]:
        """Mismatches of a recorded generation (`Engine.generate`'s result) beyond the totals."""
        ...
