"""Hold at most one built model for the benchmark suite, and release it when the next starts.

A long matrix names many (model, device, dtype) triples. The suite runs the cells of one triple
together (see `plan.build_order`), so one slot suffices: asking for another triple first
releases the current model (drop the references, `gc.collect()`, and return the allocator's
cached blocks with `torch.cuda.empty_cache()` / `torch.mps.empty_cache()`), then builds the new
one. A build that failed is remembered for its triple, so the remaining cells of that triple
fail at once with the original reason instead of rebuilding (and failing) again.

A cell's engine (DESIGN §14) decides the build: torch's `Loaded` here, or MLX's
`mlx.loaded.MlxLoaded` for `engine: mlx`. Both are a `cellmodel.CellModel`, the protocol the
suite's measurements call (engine, KV accounting, memory counters, roofline, record fields), so
a test function never asks which engine it runs.

It deliberately does not time anything but the build, choose cells, or know pytest.
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.cache.point import KVAccount
from benchmarks.harness.cellmodel import CellModel
from benchmarks.harness.device.devices import parse_dtype, resolve_device, sync_name
from benchmarks.harness.device.memory import MemoryMonitor, release_cached_memory
from benchmarks.harness.device.synctimer import synced_perf_counter
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import (
    MODELS_DIR,
    ModelSpec,
    build_meta_model,
    load_model_spec,
)
from benchmarks.harness.quant.accuracy import Accuracy, Reference, reference_outputs
from benchmarks.harness.quant.predict import WeightPrediction, predict_weights
from benchmarks.harness.quant.stored import stored_weights
from benchmarks.harness.roofline.peaks import Peaks
from benchmarks.harness.roofline.roofline import roofline_extra_info
from benchmarks.harness.runmode.decide import build_cell_model, configure_engine
from benchmarks.harness.runmode.kvaccount import TorchKV
from benchmarks.harness.runmode.kvlayout import analytic_layout
from benchmarks.harness.runmode.quantcheck import (
    left_dense_fields,
    measure_quantized,
    reference_key,
)

#: Generated tokens the accuracy check runs at most (teacher-forced): agreement and KL settle
#: long before, and a 256-token cell would otherwise pay two untimed generations more per build.
ACCURACY_MAX_TOKENS = 64


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
    weights_bytes: int  # stored (`quant.stored`): quantized tensors at their real size
    weights_dense_bytes: int  # the same parameters unquantized, in the cell's dtype
    weights: WeightPrediction  # the analytic side, from the config on the meta device
    quant: str = "none"
    quantize_s: float = 0.0  # the untimed quantization step, part of build_s
    # Per quantized cell id sharing this build: its accuracy against the dense model and its
    # cache's quantization time, measured once right after quantizing (`measure_quantized`).
    accuracy: dict[str, Accuracy] = field(default_factory=dict)
    kv_quantize: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def config(self) -> Any:
        """The model's Hugging Face config (KV accounting and roofline read it)."""
        return self.model.config

    @property
    def timer_name(self) -> str:
        """The benchmark clock's name (`synctimer`)."""
        return synced_perf_counter(self.device).__name__

    @property
    def sync_name(self) -> str:
        """How the clock waits for the device."""
        return sync_name(self.device)

    def configure(self, cell: Cell) -> None:
        """This cell's start cache (static, quantized or the model's own: DESIGN §9)."""
        configure_engine(self.engine, cell)

    def kv(self, cell: Cell) -> KVAccount:
        """The cell's KV accounting (`runmode.kvaccount`)."""
        return TorchKV(cell, self.model, self.dtype)

    def memory_monitor(self) -> MemoryMonitor:
        """The device's allocator counters and the process RSS, labelled."""
        return MemoryMonitor(self.device)

    def roofline_fields(
        self,
        cell: Cell,
        peaks: Peaks,
        *,
        prefill_s: float | None = None,
        decode_step_s: float | None = None,
    ) -> dict[str, Any]:
        """`roofline_extra_info` at the phase time(s) given (a quantized cache's KV at its
        stored bytes, `runmode.kvlayout`)."""
        kv_total = None
        if cell.kv_quantized:

            def kv_total(positions: int) -> int:
                return analytic_layout(
                    cell, self.config, dtype=self.dtype, seq_len=positions
                ).total_bytes

        return roofline_extra_info(
            self.model,
            batch=cell.batch,
            prompt_len=cell.prompt_len,
            peaks=peaks,
            prefill_s=prefill_s,
            decode_step_s=decode_step_s,
            kv_total=kv_total,
        )

    def record_fields(self, cell: Cell) -> dict[str, Any]:
        """A quantized cell's method and accuracy (`quant_fields`); nothing for a dense one."""
        return quant_fields(cell, self)

    def releaser(self) -> Callable[[], None]:
        """What returns the device's cached blocks once the model is dropped."""
        return partial(release_cached_memory, self.device)

    def weights_fields(self) -> dict[str, Any]:
        """`weights_bytes` (stored), `weights_dense_bytes` and `weights_analytic_bytes`."""
        return {
            "weights_bytes": self.weights_bytes,
            "weights_dense_bytes": self.weights_dense_bytes,
            "weights_analytic_bytes": self.weights.total_bytes,
        }

    def weights_mismatch(self) -> str | None:
        """Why stored and analytic weight bytes differ (None: they are equal)."""
        if self.weights_bytes == self.weights.total_bytes:
            return None
        dense = ", ".join(f"{layer.name} ({layer.reason})" for layer in self.weights.left_dense)
        return (
            f"weights: {self.weights_bytes} bytes stored, {self.weights.total_bytes} predicted "
            f"for quant {self.quant} (left dense: {dense or 'none'})"
        )


def weights_bytes(model: torch.nn.Module) -> int:
    """Stored bytes of the model's weights (`quant.stored`); a tied parameter counts once."""
    return stored_weights(model).stored_bytes


def trim_host_heap() -> None:
    """Hand the host heap's freed blocks back to the OS (glibc's `malloc_trim`).

    Quantizing replaces every dense weight: glibc keeps the freed memory mapped, so the process
    RSS (the CPU's only peak-memory figure) would carry the dense model into every round of a
    quantized cell (smollm2-135m int4: 990 MiB before, 567 MiB after). A no-op off glibc.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # musl or another libc: nothing to trim with
        return


class ModelCache:
    """One slot: the model of the triple in use; `get` swaps it when the triple changes."""

    def __init__(
        self,
        models_dir: Path | None = None,
        on_event: Callable[[str], None] | None = None,
        cells: Sequence[Cell] = (),
    ) -> None:
        self._models_dir = MODELS_DIR if models_dir is None else models_dir
        # The run's cells: a quantized build computes the dense reference outputs of every
        # quantized cell sharing it before its weights are quantized.
        self._cells = tuple(cells)
        self._on_event = on_event or (lambda _line: None)
        self._loaded: CellModel | None = None
        self._failed: dict[tuple[str, ...], str] = {}
        # Per quantized cell id, its record's quant fields (accuracy included) as measured by
        # the build that held it: a later build of the same cell (an interleaved comparison
        # group) reuses them instead of measuring again.
        self.measured: dict[str, dict[str, Any]] = {}

    @property
    def current(self) -> CellModel | None:
        """The model held now, if any."""
        return self._loaded

    def get(self, cell: Cell) -> CellModel:
        """The built model for `cell`'s (model, device, dtype), building it if needed."""
        key = cell.build_key
        if key in self._failed:
            raise BuildFailedError(self._failed[key])
        if self._loaded is not None and self._loaded.key == key:
            return self._loaded
        self.release()
        try:
            builders: dict[str, Callable[[Cell], CellModel]] = {
                "torch": self._build,
                "mlx": self._build_mlx,
            }
            build = builders[cell.engine_name]
            self._loaded = build(cell)
        except Exception as error:
            reason = f"building {cell.model} on {cell.device} in {cell.dtype} failed: {error}"
            self._failed[key] = reason
            self._on_event(reason)
            release_cached_memory(resolve_device(cell.device))
            raise
        return self._loaded

    def release(self) -> None:
        """Drop the held model and return its device memory."""
        if self._loaded is None:
            return
        loaded, self._loaded = self._loaded, None
        name, device, release = loaded.key[0], loaded.device, loaded.releaser()
        del loaded
        release()
        self._on_event(f"released {name} on {device}")

    def _build_mlx(self, cell: Cell) -> CellModel:
        """An MLX cell's model (`mlx.loaded`; mlx is imported only now)."""
        from benchmarks.harness.mlx.loaded import build_loaded  # noqa: PLC0415 - optional mlx

        self._on_event(f"building {cell.model} on MLX ({cell.device}) in {cell.dtype} ...")
        loaded = build_loaded(cell, self._models_dir)
        self._on_event(
            f"built {cell.model} on MLX ({cell.device}) in {cell.dtype}: {loaded.build_s:.1f} s, "
            f"{loaded.built.weights_bytes / 2**20:.1f} MiB of weights"
        )
        return loaded

    def _build(self, cell: Cell) -> Loaded:
        siblings = [c for c in self._cells if c.build_key == cell.build_key and c.quantized]
        if cell.quantized and cell not in siblings:
            siblings.append(cell)
        loaded = build_loaded(cell, self._models_dir, self._on_event, siblings)
        for sibling in siblings:
            self.measured[sibling.id] = quant_fields(sibling, loaded)
        return loaded


def build_loaded(
    cell: Cell,
    models_dir: Path,
    on_event: Callable[[str], None],
    checked: Sequence[Cell] = (),
) -> Loaded:
    """Build `cell`'s model (its attention kernel, weight quantization, compile mode) and count
    its weights; for each quantized cell of `checked` sharing the build, measure its accuracy
    against the dense model once, untimed (`measure_quantized`)."""
    device = resolve_device(cell.device)
    dtype = parse_dtype(cell.dtype)
    spec = load_model_spec(cell.model, models_dir)
    on_event(f"building {cell.model} on {device} in {cell.dtype} ...")
    started_s = time.perf_counter()
    quant = cell.weight_quant
    references: dict[tuple[int, int, int, int], Reference] = {}
    accuracy: dict[str, Accuracy] = {}
    kv_quantize: dict[str, dict[str, Any]] = {}
    quant_started_s = started_s
    quant_ended_s = started_s

    def before_quant(model: Any) -> None:
        nonlocal quant_started_s
        # Untimed: the dense model's outputs for the accuracy check (`quant.accuracy`).
        for sibling in checked:
            key = reference_key(sibling)
            if key not in references:
                batch, prompt_len, new_tokens, seed = key
                new_tokens = min(new_tokens, ACCURACY_MAX_TOKENS)
                vocab = int(model.config.get_text_config().vocab_size)
                prompt = make_prompt(batch, prompt_len, vocab, seed)  # the cell's prompt
                references[key] = reference_outputs(model, device, prompt, new_tokens)
        quant_started_s = time.perf_counter()

    def after_quant(model: Any) -> None:
        nonlocal quant_ended_s
        quant_ended_s = time.perf_counter()
        if quant != "none":
            trim_host_heap()  # the dense weights just replaced, freed but still in the heap
        for sibling in checked:  # eager, before torch.compile wraps the model
            reference = references[reference_key(sibling)]
            found, timing = measure_quantized(model, device, sibling, reference)
            accuracy[sibling.id] = found
            if timing:
                kv_quantize[sibling.id] = timing
        references.clear()  # the captured activations are not needed past this point

    # The cell's attention kernel, weight quantization and torch.compile mode (DESIGN §9).
    model = build_cell_model(
        spec, cell, device, dtype, before_quant=before_quant, after_quant=after_quant
    )
    build_s = time.perf_counter() - started_s
    quantize_s = quant_ended_s - quant_started_s if quant != "none" else 0.0
    stored = stored_weights(model, dtype)
    prediction = predict_weights(
        build_meta_model(spec, dtype), quant, dtype=dtype, device_type=device.type
    )
    size = stored.stored_bytes
    on_event(
        f"built {cell.model} on {device} in {cell.dtype}: {build_s:.1f} s, "
        f"{size / 2**20:.1f} MiB of weights"
        + (f" ({quant}, {stored.dense_bytes / 2**20:.1f} MiB dense)" if quant != "none" else "")
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
        weights_dense_bytes=stored.dense_bytes,
        weights=prediction,
        quant=quant,
        quantize_s=quantize_s,
        accuracy=accuracy,
        kv_quantize=kv_quantize,
    )


def quant_fields(cell: Cell, loaded: Loaded) -> dict[str, Any]:
    """A quantized cell's record fields: the method, the untimed quantization time, the Linears
    left dense (`left_dense_fields`), its accuracy against the dense model and its cache's
    quantization time, as measured once when the model was built (`build_loaded`). A dense
    cell gets none."""
    if not cell.quantized:
        return {}
    accuracy = loaded.accuracy.get(cell.id)
    if accuracy is None:  # a bug: the build measures every quantized cell sharing it
        raise PhasebenchError(
            f"{cell.id}: no accuracy was measured when its model was built; build it through "
            "ModelCache with the run's cells"
        )
    return {
        "quant_method": cell.weight_quant,
        "quant_kv_method": cell.kv_quant or "none",
        "quantize_s": loaded.quantize_s,
        **left_dense_fields(loaded.weights),
        **accuracy.fields(),
        **loaded.kv_quantize.get(cell.id, {}),
    }
