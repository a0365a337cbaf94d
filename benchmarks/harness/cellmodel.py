"""`CellModel`: a built cell as the suite's measurements see it, whichever engine runs it.

torch's `modelcache.Loaded` and MLX's `mlx.loaded.MlxLoaded` both are one (DESIGN §14): the
engine (the torch `Engine`'s methods and results: `to_device`, `start_cache_for`,
`prefill_forward`, `prefill`, `decode_step`, `snapshot`, `restore`, `client_generate`,
`generate`), the KV accounting (`cache.point.KVAccount`), the memory counters, the weights'
bytes, the roofline fields, the fields a record says about the engine, and the clock's names.
The test functions call only these, so they have no branch on the engine.

It deliberately holds no implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from benchmarks.harness.cache.point import KVAccount
from benchmarks.harness.device.memory import MemoryMonitor
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import ModelSpec
from benchmarks.harness.roofline.peaks import Peaks


class CellModel(Protocol):
    """A built cell as the suite measures it, whichever engine runs it (torch `Loaded`, MLX's
    `MlxLoaded`): the engine's methods (`prefill_forward`, `decode_step`, `snapshot`, ...) and
    results are the torch `Engine`'s."""

    @property
    def key(self) -> tuple[str, ...]: ...

    @property
    def spec(self) -> ModelSpec: ...

    @property
    def engine(self) -> Any: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def timer_name(self) -> str:
        """The benchmark clock's name, for extra_info."""
        ...

    @property
    def sync_name(self) -> str:
        """How that clock waits for the device."""
        ...

    @property
    def model(self) -> Any: ...

    @property
    def config(self) -> Any: ...

    @property
    def build_s(self) -> float: ...

    def configure(self, cell: Cell) -> None: ...

    def kv(self, cell: Cell) -> KVAccount: ...

    def memory_monitor(self) -> MemoryMonitor: ...

    def weights_fields(self) -> dict[str, Any]: ...

    def weights_mismatch(self) -> str | None: ...

    def roofline_fields(
        self,
        cell: Cell,
        peaks: Peaks,
        *,
        prefill_s: float | None = None,
        decode_step_s: float | None = None,
    ) -> dict[str, Any]: ...

    def record_fields(self, cell: Cell) -> dict[str, Any]: ...

    def releaser(self) -> Callable[[], None]: ...
