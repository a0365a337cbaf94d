"""One asserting pass for a cell's generate and KV measurements, not two.

`test_generate` ends with the engine's untimed asserting pass (`Engine.generate(prompt, N)`);
`test_kv_cache`, the cell's next test, asserts bytes on exactly such a pass. Generating twice
cost a whole N-token generation per cell (a 256-token cell: ~11 s here), so `test_generate`
keeps its pass (`keep`) and the KV test takes it (`take`). A pass and its final cache must never
outlive that handover: a kept cache would sit in the next cell's memory peaks. So the suite's
protocol hook (`benchmarks/conftest.py`) calls `release_unless(nextitem_cell_id)` after every
test: the pass stays only when the next test is the same cell's KV test, which takes it.

Where the KV test needs readings the generate pass does not take (a static cell's `probe`,
which allocates and would sit in that pass's memory peaks), it runs its own pass.
"""

from __future__ import annotations

from typing import Any

_KEPT: dict[str, Any] = {}


def keep(cell_id: str, result: Any) -> None:
    """Hold `result` (an asserting pass of `cell_id`) for the KV test that follows."""
    _KEPT.clear()
    _KEPT[cell_id] = result


def take(cell_id: str) -> Any | None:
    """The kept pass of `cell_id` (None: none kept); nothing stays kept after this."""
    result = _KEPT.pop(cell_id, None)
    _KEPT.clear()
    return result


def release_unless(cell_id: str | None) -> None:
    """Drop any kept pass unless it is `cell_id`'s (the next test is that cell's KV test)."""
    if cell_id is None or cell_id not in _KEPT:
        _KEPT.clear()
