"""An MLX cell's built model, as the suite measures it: `modelcache.CellModel` on mlx-lm.

`build_loaded(cell, models_dir)` builds the model (`build.py`), plans its caches (`kvplan`)
and checks that mlx-lm makes exactly the predicted ones (a mismatch fails the build: the KV
prediction would be about another cache), and returns `MlxLoaded`: its `MlxEngine`, its KV
accounting (`account.MlxKV`), MLX's memory counters, its roofline fields, its weight bytes and
the record fields that say the engine (`engine`, `mlx_version`, `mlx_lm_version`,
`mlx_device`) and, for a quantized cell, its method.

It deliberately holds no timer: the suite's test functions time `engine`'s calls.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.device.devices import parse_dtype, resolve_device
from benchmarks.harness.device.memory import MemoryMonitor
from benchmarks.harness.errors import ModelError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.mlx.account import MlxKV
from benchmarks.harness.mlx.available import versions
from benchmarks.harness.mlx.build import BuiltMlx, build, model_classes
from benchmarks.harness.mlx.engine import MlxEngine
from benchmarks.harness.mlx.kvplan import KV_BITS, LayerPlan, plan_layers, window_notes
from benchmarks.harness.mlx.roofline import roofline_fields
from benchmarks.harness.mlx.runtime import (
    SYNC_NAME,
    TIMER_NAME,
    MlxCounters,
    device_name,
    mx_device,
    release_memory,
)
from benchmarks.harness.model.models import ModelSpec, build_meta_model, load_model_spec
from benchmarks.harness.quant.predict import predict_weights
from benchmarks.harness.roofline.peaks import Peaks

ENGINE = "mlx"


@dataclass(frozen=True, eq=False)
class MlxLoaded:
    """A built MLX model and what the suite records about it."""

    key: tuple[str, ...]  # Cell.build_key
    spec: ModelSpec
    built: BuiltMlx
    engine: MlxEngine
    device: torch.device
    dtype: torch.dtype
    hf_config: Any  # the same config as a transformers object (KV widths, FLOPs, vocab)
    own_make_cache: bool  # mlx-lm's class defines make_cache (kvplan)
    torch_dense_bytes: int  # the torch model's analytic dense weights of the same config
    quant: str = "none"
    timer_name: str = TIMER_NAME
    sync_name: str = f"mx.eval (fence) + {SYNC_NAME}"

    @property
    def model(self) -> Any:
        """The mlx-lm model (an `mlx.nn.Module`)."""
        return self.built.model

    @property
    def config(self) -> Any:
        """The transformers config of the same model (the suite reads `vocab_size` from it)."""
        return self.hf_config

    @property
    def build_s(self) -> float:
        """Seconds the build took (quantization included)."""
        return self.built.build_s

    def plans(self, cell: Cell) -> list[LayerPlan]:
        """Each layer's mlx-lm cache for `cell` (its batch and KV quantization)."""
        return plan_layers(
            self.built.config,
            self.hf_config,
            dtype=self.dtype,
            batch=cell.batch,
            own_make_cache=self.own_make_cache,
            kv_quant=cell.kv_quant,
            kv_group_size=cell.kv_group,
        )

    def configure(self, cell: Cell) -> None:
        """This cell's start cache: mlx-lm's own, or a QuantizedKVCache per layer."""
        bits = KV_BITS.get(cell.kv_quant or "")
        self.engine.configure(cell.id, None if bits is None else (bits, cell.kv_group))

    def kv(self, cell: Cell) -> MlxKV:
        """The cell's KV accounting (`cache.point.KVAccount`)."""
        plans = self.plans(cell)
        return MlxKV(cell, plans, window_notes(plans, self.hf_config))

    def memory_monitor(self) -> MemoryMonitor:
        """MLX's allocator counters and the process RSS, labelled."""
        return MemoryMonitor(self.device, MlxCounters())

    def weights_fields(self) -> dict[str, Any]:
        """Stored, dense and predicted weight bytes, and the torch model's dense prediction."""
        return {
            "weights_bytes": self.built.weights_bytes,
            "weights_dense_bytes": self.built.weights_dense_bytes,
            "weights_analytic_bytes": self.built.weights_predicted_bytes,
            "weights_torch_analytic_dense_bytes": self.torch_dense_bytes,
        }

    def weights_mismatch(self) -> str | None:
        """Why stored and predicted weight bytes differ, or the dense MLX model is not the torch
        model's size (another architecture); None when both agree."""
        wrong = []
        if self.built.weights_bytes != self.built.weights_predicted_bytes:
            wrong.append(
                f"weights: {self.built.weights_bytes} bytes stored, "
                f"{self.built.weights_predicted_bytes} predicted for quant {self.quant}"
            )
        if self.built.weights_dense_bytes != self.torch_dense_bytes:
            wrong.append(
                f"the dense MLX model holds {self.built.weights_dense_bytes} bytes, the torch "
                f"model of the same config {self.torch_dense_bytes}: not the same architecture"
            )
        return "; ".join(wrong) or None

    def roofline_fields(
        self,
        cell: Cell,
        peaks: Peaks,
        *,
        prefill_s: float | None = None,
        decode_step_s: float | None = None,
    ) -> dict[str, Any]:
        """The roofline fields at the phase times given (`mlx.roofline`)."""
        account = self.kv(cell)
        return roofline_fields(
            model=self.model,
            config=self.hf_config,
            batch=cell.batch,
            prompt_len=cell.prompt_len,
            peaks=peaks,
            used_kv=lambda positions: account.predict(positions)[1],
            prefill_s=prefill_s,
            decode_step_s=decode_step_s,
        )

    def record_fields(self, cell: Cell) -> dict[str, Any]:
        """The engine and its versions; a quantized cell's method and quantization time."""
        installed = versions()
        fields: dict[str, Any] = {
            "engine": ENGINE,
            "mlx_version": installed.get("mlx"),
            "mlx_lm_version": installed.get("mlx_lm"),
            "mlx_device": device_name(self.device),
        }
        if cell.quantized:
            fields.update(
                quant_method=cell.weight_quant,
                quant_kv_method=cell.kv_quant or "none",
                quantize_s=self.built.quantize_s,
                accuracy_note="not measured on MLX cells (phasebench's accuracy check is torch's)",
            )
        return fields

    def releaser(self) -> Callable[[], None]:
        """What returns this model's memory once it is dropped (holds no reference to it)."""

        def release() -> None:
            gc.collect()
            release_memory()

        return release


def build_loaded(cell: Cell, models_dir: Path) -> MlxLoaded:
    """Build `cell`'s model on MLX and check mlx-lm's caches against the plan (module doc)."""
    spec = load_model_spec(cell.model, models_dir)
    device, dtype = resolve_device(cell.device), parse_dtype(cell.dtype)
    built = build(
        spec, dtype=cell.dtype, seed=cell.seed, quant=cell.weight_quant, device=mx_device(device)
    )
    model_class, _ = model_classes(built.config)
    hf_config = spec.hf_config()
    loaded = MlxLoaded(
        key=cell.build_key,
        spec=spec,
        built=built,
        engine=MlxEngine(built.model, device, spec.max_positions()),
        device=device,
        dtype=dtype,
        hf_config=hf_config,
        own_make_cache=hasattr(model_class, "make_cache"),
        torch_dense_bytes=predict_weights(
            build_meta_model(spec, dtype), "none", dtype=dtype, device_type=device.type
        ).total_bytes,
        quant=cell.weight_quant,
    )
    check_plan(loaded)
    return loaded


def check_plan(loaded: MlxLoaded) -> None:
    """ModelError unless mlx-lm's own `make_prompt_cache` is the plan: each layer's class,
    window and kept positions (an mlx-lm whose rule changed must not be measured against it)."""
    from mlx_lm.models.cache import make_prompt_cache  # noqa: PLC0415 - optional dependency

    made = [
        (type(c).__name__, getattr(c, "max_size", None), getattr(c, "keep", 0))
        for c in make_prompt_cache(loaded.model)
    ]
    plans = plan_layers(
        loaded.built.config,
        loaded.hf_config,
        dtype=loaded.dtype,
        batch=1,
        own_make_cache=loaded.own_make_cache,
    )
    planned = [(p.kind, p.max_size, p.keep) for p in plans]
    if made != planned:
        raise ModelError(
            f"mlx-lm's {loaded.built.config.get('model_type')} makes caches {made}, phasebench's "
            f"plan says {planned}: fix benchmarks/harness/mlx/kvplan.py for this mlx-lm"
        )
