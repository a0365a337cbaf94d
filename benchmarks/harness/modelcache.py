"""Hold at most one built model for the benchmark suite, and release it when the next starts.

A long matrix names many (model, device, dtype) triples. The suite runs the cells of one triple
together (see `plan.build_order`), so one slot suffices: asking for another triple first
releases the current model (drop the references, `gc.collect()`, and return the allocator's
cached blocks with `torch.cuda.empty_cache()` / `torch.mps.empty_cache()`), then builds the new
one. A build that failed is remembered for its triple, so the remaining cells of that triple
fail at once with the original reason instead of rebuilding (and failing) again.

It deliberately does not time anything but the build, choose cells, or know pytest.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.device.devices import parse_dtype, resolve_device
from benchmarks.harness.engine import Engine
from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import MODELS_DIR, ModelSpec, load_model_spec
from benchmarks.harness.runmode.decide import build_cell_model


class BuildFailedError(PhasebenchError):
    """The model of this cell failed to build earlier in the run; the message says why."""


@dataclass(frozen=True, eq=False)
class Loaded:
    """A built model, its engine, and what the suite records about the build."""

    key: tuple[str, ...]  # Cell.build_key
    spec: ModelSpec
    model: Any
    engine: Engine
    device: torch.device
    dtype: torch.dtype
    build_s: float
    weights_bytes: int

    @property
    def config(self) -> Any:
        """The model's Hugging Face config (KV accounting and roofline read it)."""
        return self.model.config


def weights_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters; a tied parameter (LM head = embedding) counts once."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def release_device_memory(device: torch.device) -> None:
    """Collect garbage and hand the allocator's cached blocks back to the device driver."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


class ModelCache:
    """One slot: the model of the triple in use; `get` swaps it when the triple changes."""

    def __init__(
        self,
        models_dir: Path | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self._models_dir = MODELS_DIR if models_dir is None else models_dir
        self._on_event = on_event or (lambda _line: None)
        self._loaded: Loaded | None = None
        self._failed: dict[tuple[str, ...], str] = {}

    @property
    def current(self) -> Loaded | None:
        """The model held now, if any."""
        return self._loaded

    def get(self, cell: Cell) -> Loaded:
        """The built model for `cell`'s (model, device, dtype), building it if needed."""
        key = cell.build_key
        if key in self._failed:
            raise BuildFailedError(self._failed[key])
        if self._loaded is not None and self._loaded.key == key:
            return self._loaded
        self.release()
        try:
            self._loaded = self._build(cell)
        except Exception as error:
            reason = f"building {cell.model} on {cell.device} in {cell.dtype} failed: {error}"
            self._failed[key] = reason
            self._on_event(reason)
            release_device_memory(resolve_device(cell.device))
            raise
        return self._loaded

    def release(self) -> None:
        """Drop the held model and return its device memory."""
        if self._loaded is None:
            return
        loaded, self._loaded = self._loaded, None
        name, device = loaded.key[0], loaded.device
        del loaded
        release_device_memory(device)
        self._on_event(f"released {name} on {device}")

    def _build(self, cell: Cell) -> Loaded:
        device = resolve_device(cell.device)
        dtype = parse_dtype(cell.dtype)
        spec = load_model_spec(cell.model, self._models_dir)
        self._on_event(f"building {cell.model} on {device} in {cell.dtype} ...")
        started_s = time.perf_counter()
        # The cell's attention kernel and torch.compile mode (DESIGN §9; none: the defaults).
        model = build_cell_model(spec, cell, device, dtype)
        build_s = time.perf_counter() - started_s
        size = weights_bytes(model)
        self._on_event(
            f"built {cell.model} on {device} in {cell.dtype}: {build_s:.1f} s, "
            f"{size / 2**20:.1f} MiB of weights"
        )
        return Loaded(
            key=cell.build_key,
            spec=spec,
            model=model,
            engine=Engine(model, device),
            device=device,
            dtype=dtype,
            build_s=build_s,
            weights_bytes=size,
        )
