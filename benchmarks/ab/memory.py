"""Can both sides hold their models at once? Weights bytes against the device's free memory.

A/B interleaves rounds only while both pytest processes hold a model: each process keeps one
model at a time (the suite's one-model slot), so the peak need is about twice the largest
model's weights plus working memory. `fits_both` estimates the weights from the architecture on
the meta device (no memory, no values), adds a margin for activations and caches, and compares
with what the device has free. When it does not fit, `run` falls back to process-level
interleaving (the two sides run one after the other) and says so.

`python -m benchmarks.ab.memory MATRIX BASE_MODELS HEAD_MODELS` prints the check as
JSON: `run` calls it in a subprocess, so that the A/B command itself never holds a CUDA context
(and its memory) while the two sides run.

It deliberately does not measure anything; a wrong estimate shows up as an out-of-memory cell.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
import torch

from benchmarks.harness.device.devices import resolve_device
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.matrix.parse import load_matrix
from benchmarks.harness.model.models import build_model, load_model_spec

# Activations, KV caches, allocator slack and the interpreter itself, on top of the weights.
MARGIN = 1.5


@dataclass(frozen=True)
class MemoryCheck:
    """The verdict of `fits_both`, with the figures behind it."""

    fits: bool
    need_bytes: int
    free_bytes: int | None
    device: str
    note: str


def weights_bytes(model: str, dtype: str, models_dir: Path) -> int:
    """Bytes of `model`'s parameters in `dtype`, from its architecture (built on meta)."""
    spec = load_model_spec(model, models_dir)
    built = build_model(spec, torch.device("meta"), getattr(torch, dtype))
    return sum(p.numel() * p.element_size() for p in built.parameters())


def free_bytes(device: str) -> int | None:
    """Memory free for new allocations on `device` (None when the device cannot say)."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        return int(free)
    if dev.type == "mps":
        return int(torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory())
    return int(psutil.virtual_memory().available)


def fits_both(cells: Iterable[Cell], models_dirs: tuple[Path, Path]) -> MemoryCheck:
    """Whether two processes, each holding its largest model of `cells`, fit in memory."""
    largest: dict[str, int] = {}
    for cell in {(c.model, c.dtype, c.device) for c in cells}:
        model, dtype, device = cell
        each = max(weights_bytes(model, dtype, d) for d in models_dirs)
        kind = resolve_device(device).type
        largest[kind] = max(largest.get(kind, 0), each)
    for kind, each in sorted(largest.items()):
        need = int(2 * each * MARGIN)
        free = free_bytes(kind)
        if free is not None and need > free:
            note = (
                f"both sides' models need about {need / 2**30:.1f} GiB on {kind} (2 x "
                f"{each / 2**30:.1f} GiB weights x {MARGIN}), {free / 2**30:.1f} GiB is free"
            )
            return MemoryCheck(False, need, free, kind, note)
    kind, each = max(largest.items(), key=lambda kv: kv[1], default=("cpu", 0))
    need = int(2 * each * MARGIN)
    return MemoryCheck(True, need, free_bytes(kind), kind, "both sides' models fit in memory")


def main(argv: Sequence[str] | None = None) -> int:
    """Print `fits_both` for a matrix and the two sides' model folders as one JSON object."""
    matrix, base_models, head_models = (Path(a) for a in (sys.argv[1:] if argv is None else argv))
    cells = load_matrix(matrix, models_dir=base_models).cells
    print(json.dumps(asdict(fits_both(cells, (base_models, head_models)))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
