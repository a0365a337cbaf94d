"""The suite's two engines at collection (DESIGN §14): why a cell skips, and its clock.

`side(cell)` is the cell's `EngineSide`: `TorchSide` (transformers on torch: the tensor-parallel
reasons, `plan.skip_reason`, the transformers compatibility check, the slow-dtype probe; the
synchronizing `perf_counter`) or `MlxSide` (mlx-lm: `benchmarks.harness.mlx.skip`; the clock
that waits with `mx.synchronize`). Collection asks the side and never the engine's name, and
the measurements ask the built `CellModel` (`benchmarks.harness.modelcache`).

Deliberately not here: building or timing anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import pytest

from benchmarks.harness.device.synctimer import synced_perf_counter
from benchmarks.harness.matrix.axes import MLX_ONLY_VALUES
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model import compat
from benchmarks.harness.model.models import MODELS_DIR, load_model_spec
from benchmarks.harness.plan import memory_fit_reason, skip_reason
from benchmarks.harness.roofline.dtypespeed import slow_dtype_reason
from benchmarks.harness.runmode.decide import measurement_skip_reason
from benchmarks.suite.tp.cells import tp_cell_reason


class EngineSide(Protocol):
    """What collection needs of an engine."""

    def skip_reason(self, config: pytest.Config, cell: Cell, models_dir: Path) -> str | None:
        """Why this machine cannot run the cell (one line), or None."""
        ...

    def measurement_reason(self, cell: Cell, measurement: str | None) -> str | None:
        """Why a measurement module skips the cell, or None."""
        ...

    def clock(self, cell: Cell) -> Callable[[], float]:
        """The benchmark timer: waits for the device, then reads `perf_counter`."""
        ...


class TorchSide:
    """transformers on torch."""

    def skip_reason(self, config: pytest.Config, cell: Cell, models_dir: Path) -> str | None:
        """A value only MLX runs; the tp cell's own reasons (on a transformers without TP loading
        that is what the user must change); the plan's, the engine's; the slow-dtype probe."""
        reason = (
            _mlx_only_reason(cell)
            or tp_cell_reason(cell, models_dir)
            or skip_reason(cell, models_dir)
            or compat.unsupported_reason(load_model_spec(cell.model, models_dir).hf_config())
        )
        # A dtype this CPU only emulates (dtypespeed.py) is skipped with its measured ratio
        # unless --allow-slow-dtypes; probed once per dtype, only for cells that run. A
        # quantization comparison is exempt (`slow_dtype_exempt`).
        if (
            reason is None
            and not config.getoption("allow_slow_dtypes")
            and not slow_dtype_exempt(cell)
        ):
            reason = slow_dtype_reason(cell.device, cell.dtype)
        return reason

    def measurement_reason(self, cell: Cell, measurement: str | None) -> str | None:
        """HF-generate comparisons of static, quantized or compiled cells (`runmode.decide`)."""
        return measurement_skip_reason(cell, measurement)

    def clock(self, cell: Cell) -> Callable[[], float]:
        """`synced_perf_counter` of the cell's device."""
        return synced_perf_counter(cell.device)


def slow_dtype_exempt(cell: Cell) -> bool:
    """Whether a cell runs in a dtype this CPU only emulates anyway: the cells of a matrix that
    names `quant` or `kv_quant`, the dense one (`none`) included.

    Their kernels are not F.linear's: PyTorch's CPU int4 kernel is vectorized for bfloat16 on
    AVX2 as on AVX-512 (and only for bfloat16: `quant.methods.quant_timing_reason`), and the
    ratio to the dense cell needs the dense cell in the same dtype. The machine's slow dtypes
    are still recorded (`machine_info.phasebench.slow_dtypes`) beside the figures.
    """
    return cell.quant is not None or cell.kv_quant is not None


def _mlx_only_reason(cell: Cell) -> str | None:
    for axis, values in MLX_ONLY_VALUES.items():
        value = getattr(cell, axis)
        if value in values:
            return f"{axis} {value} is mlx's (affine, mlx-lm): it runs on `engine: mlx` cells only"
    return None


class MlxSide:
    """mlx-lm on MLX (imported only when a cell asks)."""

    def skip_reason(self, config: pytest.Config, cell: Cell, models_dir: Path) -> str | None:
        """`benchmarks.harness.mlx.skip`'s reason; a `--profile` run traces torch ops only."""
        if config.getoption("profile"):
            return "--profile traces torch ops with torch.profiler; an MLX cell runs none"
        from benchmarks.harness.mlx.skip import skip_reason as mlx_reason  # noqa: PLC0415

        reason = mlx_reason(cell, models_dir)
        if reason is None and not cell.quantized:
            # The same architecture as torch's: its estimate of weights + KV + the prefill's
            # activations against the device's free memory holds for the MLX cell too.
            reason = memory_fit_reason(replace(cell, engine=None), models_dir)
        return reason

    def measurement_reason(self, cell: Cell, measurement: str | None) -> str | None:
        """The overhead comparison runs HF generate on the torch model."""
        del cell
        if measurement == "overhead":
            return "the overhead comparison runs transformers' generate; MLX cells have none"
        return None

    def clock(self, cell: Cell) -> Callable[[], float]:
        """`mx.synchronize()`, then `perf_counter` (the timed calls end with `mx.eval`)."""
        del cell
        from benchmarks.harness.mlx.runtime import synced_clock  # noqa: PLC0415 - optional mlx

        return synced_clock()


SIDES: Mapping[str, EngineSide] = {"torch": TorchSide(), "mlx": MlxSide()}


def side(cell: Cell) -> EngineSide:
    """The cell's engine side."""
    return SIDES[cell.engine_name]


def models_path(models_dir: Path | None) -> Path:
    """The `--models-dir` option's folder, else `matrix/models/`."""
    return MODELS_DIR if models_dir is None else models_dir
