"""Tensor-parallel cells in the suite (issue 32): collection-time reasons and the one torchrun.

* `tp_cell_reason(cell)`: why a `tp > 1` cell cannot run here (None for tp-1 cells and for tp
  cells that can), composed in this order: a run mode the tensor-parallel worker does not run
  (compile, a static or quantized cache, weight quantization, an attention kernel other than
  the default `sdpa`); no accelerate (transformers needs it for a TP load);
  `tp.skips.tp_skip_reason` (transformers without TP loading, a model type without a plan, too
  few devices, heads the plan cannot split); `tp.bytes.rank_fit_reason`, one
  rank's weights / tp + KV per rank + activations against one device's free memory (on CPU the
  ranks share the host, so against free / tp); for a `source: config` model not saved yet, the
  host memory and disk that saving its random weights takes (`save_fit_reason`: it builds the
  whole model in RAM). `PHASEBENCH_IGNORE_FIT=1` turns the fit off.
* `tp_run` (fixture): the cell's one `launch.run_tp`, started before any timer and kept per cell
  id for the session, so its prefill and decode records come from the same torchrun and a failed
  run fails both tests with the launcher's reason without a second launch. The random weights
  of a `source: config` model are saved once (`launch.save_random_model`, untimed).

Environment: `PHASEBENCH_TP_TIMEOUT_S` (default 600 s) ends a run that takes longer, the whole
group; `PHASEBENCH_TP_FAIL=RANK:MODE:STAGE` (e.g. `1:kill:generate`) injects the worker's
`--fail-*` failure into every tp run of the session, for testing the failure path end to end.

The records are `benchmarks/suite/tp/record.py`'s. Deliberately not here: timing (the ranks time).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from benchmarks.harness.device.devices import parse_dtype
from benchmarks.harness.device.freemem import FreeMemory, free_memory
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import MODELS_DIR, load_model_spec
from benchmarks.harness.plan import IGNORE_FIT_ENV
from benchmarks.harness.tp.bytes import rank_fit_estimate, rank_fit_reason
from benchmarks.harness.tp.launch import (
    CACHE_ENV,
    MARKER,
    LaunchResult,
    SavedModel,
    WorkerOptions,
    model_cache_root,
    run_tp,
    save_random_model,
    saved_model_key,
)
from benchmarks.harness.tp.skips import device_count, tp_loading, tp_plan_for, tp_skip_reason
from benchmarks.harness.tp.worker import FAIL_MODES, STAGES
from benchmarks.suite.configure import models_dir_option
from benchmarks.suite.rounds import Progress

TIMEOUT_ENV = "PHASEBENCH_TP_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 600.0  # a 70B load from disk takes minutes; a tiny CPU cell ~12 s
FAIL_ENV = "PHASEBENCH_TP_FAIL"


def run_mode_reason(cell: Cell) -> str | None:
    """Why the tensor-parallel worker cannot run the cell's run mode, or None.

    The worker loads with transformers' default kernel and a dynamic cache, eager, dense: any
    other mode would be measured as something it is not, so it is skipped, named.
    """
    modes = {
        "attention": cell.attention not in (None, "sdpa"),
        "cache": cell.cache not in (None, "dynamic"),
        "compile": cell.compile not in (None, "none"),
        "quant": cell.weight_quant != "none",
        "kv_quant": cell.kv_quantized,
    }
    named = [f"{axis}={getattr(cell, axis)}" for axis, other in modes.items() if other]
    if not named:
        return None
    return (
        f"tp {cell.tp_size} runs the default attention (sdpa), a dynamic cache, eager and dense "
        f"only; {', '.join(named)} is not supported tensor-parallel yet: drop it or use tp 1"
    )


def accelerate_reason() -> str | None:
    """Why transformers cannot load tensor-parallel here: it needs accelerate (a device map)."""
    if importlib.util.find_spec("accelerate") is not None:
        return None
    return (
        "transformers loads a model tensor-parallel only with accelerate installed (it refuses "
        "a device map without it): pip install accelerate (nox's bench sessions install it)"
    )


def _rank_free_memory(cell: Cell) -> FreeMemory:
    """One rank's share of free memory: the least free of the tp CUDA devices (one rank each);
    on CPU the ranks share the host, so its free memory / tp."""
    if cell.device.startswith("cuda"):
        frees = [free_memory(f"cuda:{index}") for index in range(cell.tp_size)]
        known = [f for f in frees if f.free_bytes is not None]
        return min(known, key=lambda f: f.free_bytes or 0) if known else frees[0]
    host = free_memory(cell.device)
    if host.free_bytes is None:
        return host
    return FreeMemory(
        device=f"{host.device} / {cell.tp_size} ranks",
        free_bytes=host.free_bytes // cell.tp_size,
        source=f"{host.source}, shared by {cell.tp_size} ranks",
    )


def tp_cell_reason(cell: Cell, models_dir: Path | None = None) -> str | None:
    """Why this machine cannot run tp cell `cell` (module docstring's order), or None."""
    if cell.tp_size == 1:
        return None
    reason = run_mode_reason(cell) or accelerate_reason()
    if reason is not None:
        return reason
    spec = load_model_spec(cell.model, MODELS_DIR if models_dir is None else models_dir)
    config = spec.hf_config()
    device_type = cell.device.split(":")[0]
    reason = tp_skip_reason(
        config,
        tp=cell.tp_size,
        device_type=device_type,
        loading=tp_loading(),
        count=device_count(device_type),
        mps_host=torch.backends.mps.is_available(),
    )
    if reason is not None or os.environ.get(IGNORE_FIT_ENV, "0") not in ("", "0"):
        return reason
    plan = tp_plan_for(config) or {}
    estimate = rank_fit_estimate(
        spec,
        plan,
        tp=cell.tp_size,
        dtype=parse_dtype(cell.dtype),
        batch=cell.batch,
        prompt_len=cell.prompt_len,
        new_tokens=cell.new_tokens,
        device_type=device_type,
    )
    reason = rank_fit_reason(estimate, _rank_free_memory(cell), cell.tp_size)
    if reason is not None or spec.source != "config":
        return reason
    return save_fit_reason(
        cell, key=saved_model_key(spec, parse_dtype(cell.dtype), cell.seed),
        weights_bytes=estimate.weights_bytes * cell.tp_size,
    )  # fmt: skip


# Saving builds the model whole in host memory (`launch.save_random_model`): measured peak RSS
# = the weights + ~0.4 GB (docs/tensor-parallel.md); this margin leaves the rest of the process.
SAVE_MARGIN_BYTES = 2 << 30


def save_fit_reason(
    cell: Cell,
    *,
    key: str,
    weights_bytes: int,
    available_bytes: int | None = None,
    disk_free_bytes: int | None = None,
) -> str | None:
    """Why a `source: config` tp cell's random weights cannot be saved here, or None (saved
    already, or they fit). An out-of-memory kill while saving would end the whole run, not one
    cell, so it is a skip at collection."""
    root = model_cache_root()
    if (root / key / MARKER).is_file():
        return None
    need = weights_bytes + SAVE_MARGIN_BYTES
    if available_bytes is None:
        available_bytes = free_memory("cpu").free_bytes
        if available_bytes is None:  # unknown: the rank fit's own figures are all there is
            return None
    if disk_free_bytes is None:
        probe = root if root.exists() else next((p for p in root.parents if p.exists()), root)
        disk_free_bytes = shutil.disk_usage(probe).free
    where = f"save it once where it fits into {CACHE_ENV} (folder {key}) and copy it here"
    if need > available_bytes:
        return (
            f"tp {cell.tp_size}: saving {cell.model}'s random weights builds the whole model in "
            f"host memory, ~{need / 1e9:.1f} GB with the process, and {available_bytes / 1e9:.1f} "
            f"GB is available: {where}, or give the model a local checkpoint"
        )
    if weights_bytes > disk_free_bytes:
        return (
            f"tp {cell.tp_size}: saving {cell.model}'s random weights needs "
            f"{weights_bytes / 1e9:.1f} GB of disk under {root}, {disk_free_bytes / 1e9:.1f} GB "
            f"is free: set {CACHE_ENV} to a bigger disk"
        )
    return None


def measurement_reason(module: str) -> str:
    """Why a benchmark module other than prefill and decode skips a tp cell."""
    if module.endswith("test_kv_cache"):
        return (
            "a tp cell's KV bytes are asserted on every rank after prefill and every step inside "
            "its torchrun (a mismatch fails its prefill and decode tests)"
        )
    return (
        f"{module.rsplit('.', 1)[-1]} does not run tensor-parallel cells: a tp cell's prefill "
        "and decode are measured from its one torchrun (test_prefill_forward_tp, test_decode_tp)"
    )


@dataclass(frozen=True)
class TPRun:
    """A tp cell's torchrun: what it measured, or why it failed (`reason`)."""

    cell_id: str
    launch: LaunchResult | None  # None: it failed before torchrun started
    saved: SavedModel | None
    reason: str | None  # None: every rank finished, every byte check passed, nothing left
    config: Any = None  # the model's transformers config (the all-reduce estimate reads it)

    @property
    def result(self) -> dict[str, Any]:
        """Rank 0's `result.json` of a run that succeeded."""
        if self.launch is None or self.launch.result is None:
            raise RuntimeError(f"{self.cell_id}: the tp run has no result: {self.reason}")
        return self.launch.result

    def check(self) -> None:
        """Fail the calling test with the launcher's reason when the run failed."""
        if self.reason is not None:
            pytest.fail(f"{self.cell_id}: tensor-parallel run failed: {self.reason}", pytrace=False)


def injected_failure(raw: str | None) -> dict[str, object]:
    """`PHASEBENCH_TP_FAIL=RANK:MODE:STAGE` as `WorkerOptions` fields ({} when unset)."""
    if not raw:
        return {}
    parts = raw.split(":")
    if len(parts) != 3 or not parts[0].isdigit() or parts[1] not in FAIL_MODES:
        raise ValueError(
            f"{FAIL_ENV}={raw!r}: use RANK:MODE:STAGE, MODE one of {', '.join(FAIL_MODES)}, "
            f"STAGE one of {', '.join(STAGES)} (e.g. 1:kill:generate)"
        )
    if parts[2] not in STAGES:
        raise ValueError(f"{FAIL_ENV}={raw!r}: STAGE must be one of {', '.join(STAGES)}")
    return {"fail_rank": int(parts[0]), "fail_mode": parts[1], "fail_at": parts[2]}


def launch_cell(cell: Cell, models_dir: Path | None, out: Path, progress: Progress) -> TPRun:
    """Save (or reuse) the model and run the cell's ranks once; never raises for a failed run."""
    saved: SavedModel | None = None
    config: Any = None
    try:
        spec = load_model_spec(cell.model, MODELS_DIR if models_dir is None else models_dir)
        config = spec.hf_config()
        saved = save_random_model(spec, parse_dtype(cell.dtype), seed=cell.seed)
        options = WorkerOptions(
            prompt_len=cell.prompt_len,
            new_tokens=cell.new_tokens,
            batch=cell.batch,
            rounds=cell.rounds,
            warmup=cell.warmup,
            dtype=cell.dtype,
            device=torch.device(cell.device).type,
            seed=cell.seed,
            **injected_failure(os.environ.get(FAIL_ENV)),  # type: ignore[arg-type]
        )
        timeout_s = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
    except Exception as error:  # a cell's own failure: recorded on it, the next cell runs
        return TPRun(cell.id, None, saved, f"{type(error).__name__}: {error}", config)
    progress(f"{cell.id}: torchrun, {cell.tp_size} ranks, {cell.rounds} round(s) per phase ...")
    try:
        launched = run_tp(saved.path, out, nproc=cell.tp_size, options=options, timeout_s=timeout_s)
    except Exception as error:  # the launcher itself failed (it ended every rank it started)
        return TPRun(cell.id, None, saved, f"launching torchrun: {type(error).__name__}: {error}")
    reason = launched.reason
    if launched.survivors:  # the launcher ends every process it saw; any left is a failure
        left = ", ".join(str(pid) for pid in launched.survivors)
        reason = f"{reason or 'the run passed'}; processes left behind: {left}"
    progress(f"{cell.id}: torchrun ended in {launched.wall_s:.1f} s{'' if reason else ', ok'}")
    return TPRun(cell.id, launched, saved, reason, config)


_RUNS = pytest.StashKey["dict[str, TPRun]"]()


@pytest.fixture
def tp_run(
    request: pytest.FixtureRequest,
    cell: Cell,
    progress: Progress,
    tmp_path_factory: pytest.TempPathFactory,
) -> TPRun:
    """The cell's torchrun, run once per session before any timed region (module docstring)."""
    runs = request.config.stash.setdefault(_RUNS, {})
    if cell.id not in runs:
        out = tmp_path_factory.mktemp(f"tp-{cell.id}", numbered=True)
        runs[cell.id] = launch_cell(cell, models_dir_option(request.config), out, progress)
    return runs[cell.id]
