"""How a cell's model runs (DESIGN §9): what this machine can run, and building for a cell.

* `skip_reason(cell)`: why the cell's attention kernel, cache, compile mode or quantized KV
  cache cannot run here (None when it can), decided at collection from the model's config and
  class, the device and the dtype: flash-attn not installed, a kernel the device or dtype lacks,
  a model type that does not support the kernel or a static cache, `reduce-overhead` without
  CUDA, CUDA graphs (`reduce-overhead`, `max-autotune` on CUDA) without a static cache,
  torch.compile without what inductor builds with on the device (`inductor_reason`: a C++
  compiler on CPU; Triton, a C compiler and Python's headers on CUDA), a `kv_quant` backend
  this transformers or machine lacks or a group size that cannot divide the cached tensors
  (`kvquant.backends`).
* `build_cell_model(spec, cell, device, dtype)`: the model built with the cell's
  `attn_implementation`, wrapped by `torch.compile` in the cell's mode (`compiled`).
* `configure_engine(engine, cell)`: the engine's start cache for this cell (one early-allocated
  `StaticCache` of `cell.cache_positions` positions, reset before each prefill, a fresh empty
  `QuantizedCache` per prefill for a `kv_quant` cell, or the model's own dynamic cache).
* `measurement_skip_reason(cell, measurement)`: the harness-overhead module compares with HF
  `generate`, which picks its own cache and compile, so run-mode cells skip it.

It deliberately does not time anything (`compiled` measures compile cost) and does not
count KV bytes (`static`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch._inductor.config
import transformers
from packaging.version import Version

from benchmarks.harness.cache import static as kv_static
from benchmarks.harness.kvquant.backends import (
    KV_QUANT,
    kv_quant_shape_reason,
    kv_quant_unsupported_reason,
    make_quantized_cache,
)
from benchmarks.harness.kvquant.quantobuild import ensure_quanto_built
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import MODELS_DIR, ModelSpec, build_model, load_model_spec
from benchmarks.harness.quant.methods import apply_quant
from benchmarks.harness.runmode.compiled import compile_model, uses_cuda_graphs

_TORCH_VERSION = Version(torch.__version__.split("+")[0])
FLEX_ATTENTION_SINCE = Version("2.5.0")
_HALF = ("float16", "bfloat16")
# The class flag transformers checks before it builds each kernel (4.46 / 5.x spellings).
_KERNEL_FLAGS = {
    "sdpa": ("_supports_sdpa",),
    "flex_attention": ("_supports_flex_attn",),
    "flash_attention_2": ("_supports_flash_attn", "_supports_flash_attn_2"),
}


@functools.cache
def _model_facts(model: str, models_dir: Path) -> tuple[Any, type | None]:
    """(config, causal-LM class) of a model file, read once per run (offline)."""
    config = load_model_spec(model, models_dir).hf_config()
    return config, causal_lm_class(config)


def causal_lm_class(config: Any) -> type | None:
    """The `AutoModelForCausalLM` class of `config` (None: it has none), without building it."""
    auto: Any = transformers.AutoModelForCausalLM
    try:
        model_class: type = auto._model_mapping[type(config)]
    except KeyError:
        return None
    return model_class


def skip_reason(cell: Cell, models_dir: Path | None = None) -> str | None:
    """Why this machine cannot run the cell's run mode (a one-line reason), or None."""
    if (
        cell.attention is None
        and cell.cache is None
        and cell.compile is None
        and not cell.kv_quantized
    ):
        return None
    config, model_class = _model_facts(cell.model, MODELS_DIR if models_dir is None else models_dir)
    device_type = cell.device.split(":")[0]
    return (
        attention_reason(cell.attention, device_type, cell.dtype, model_class)
        or cache_reason(cell.cache, config, model_class)
        or attention_cache_reason(cell.attention, cell.cache)
        or compile_reason(cell.compile, device_type, cell.cache)
        or kv_quant_reason(cell, config, device_type)
    )


def attention_reason(
    attention: str | None, device_type: str, dtype: str, model_class: type | None
) -> str | None:
    """Why `attn_implementation=attention` cannot run here, or None."""
    if attention is None or attention == "eager":
        return None
    reason = _kernel_reason(attention, device_type, dtype)
    if reason is not None:
        return reason
    name = "?" if model_class is None else model_class.__name__
    flags = _KERNEL_FLAGS[attention]
    if model_class is None or not any(getattr(model_class, flag, False) for flag in flags):
        return (
            f"{name} does not support attn_implementation={attention!r} in transformers "
            f"{transformers.__version__} (`{flags[0]}` is not set)"
        )
    return None


def _kernel_reason(attention: str, device_type: str, dtype: str) -> str | None:
    """What the kernel itself needs (package, device, dtype, torch), whatever the model."""
    if attention == "flash_attention_2":
        if importlib.util.find_spec("flash_attn") is None:
            return "flash_attention_2: flash-attn is not installed (pip install flash-attn)"
        if device_type != "cuda":
            return f"flash_attention_2 runs on CUDA only, not on {device_type}"
        if dtype not in _HALF:
            return f"flash_attention_2 runs float16/bfloat16 only, not {dtype}"
    if attention == "flex_attention":
        if _TORCH_VERSION < FLEX_ATTENTION_SINCE:
            return (
                f"flex_attention needs torch >= {FLEX_ATTENTION_SINCE} (have {torch.__version__})"
            )
        if device_type == "mps":
            return "flex_attention on MPS is not verified by phasebench"
    return None


def cache_reason(cache: str | None, config: Any, model_class: type | None) -> str | None:
    """Why the cell's cache implementation cannot be modelled exactly here, or None."""
    if cache != "static":
        return None
    reason = kv_static.unsupported_reason(config, model_class)
    return None if reason is None else f"static cache: {reason}"


def attention_cache_reason(attention: str | None, cache: str | None) -> str | None:
    """Why the kernel cannot run on the cell's cache as the engine calls it, or None.

    FlashAttention-2 on a static cache: transformers 4.46's `LlamaFlashAttention2` raises for a
    `StaticCache`; later versions, called without an attention mask (the engine passes none),
    hand flash-attn all `max_cache_len` slots, the unwritten zeros included: other attention
    than `generate`'s, while every KV byte check still passes. A skip, not a guess at a mask.
    """
    if attention == "flash_attention_2" and cache == "static":
        return (
            "flash_attention_2 with a static cache attends over every preallocated slot (the "
            "unwritten ones too) when called without an attention mask, and transformers 4.46 "
            "refuses it; measure flash_attention_2 with the dynamic cache, or sdpa with a "
            "static one"
        )
    return None


#: torch.compile on MPS (inductor's Metal backend) is a prototype, verified by phasebench on no
#: torch version yet: its cells are skipped unless this variable is `1`.
MPS_COMPILE_ENV = "PHASEBENCH_MPS_COMPILE"


def compile_reason(compile_mode: str | None, device_type: str, cache: str | None) -> str | None:
    """Why torch.compile in `compile_mode` cannot run on this device type, or None."""
    if compile_mode is None or compile_mode == "none":
        return None
    if compile_mode == "reduce-overhead" and device_type != "cuda":
        return f"compile reduce-overhead uses CUDA graphs: it needs CUDA, not {device_type}"
    # max-autotune captures CUDA graphs too (inductor's `triton.cudagraphs`), on CUDA only.
    if uses_cuda_graphs(compile_mode, device_type) and cache != "static":
        return (
            f"compile {compile_mode} on CUDA captures CUDA graphs, which need a static cache "
            "(a dynamic cache's growing tensors are graph outputs the next replay overwrites); "
            "add `cache: static`"
        )
    needs = inductor_reason(device_type)
    if needs is not None:
        return needs
    return _mps_compile_reason(compile_mode) if device_type == "mps" else None


def inductor_reason(device_type: str) -> str | None:
    """What inductor (torch.compile's backend) lacks here to compile for `device_type`, or None.

    * cpu: the C++ compiler inductor calls for its kernels: `torch._inductor.config.cpp.cxx`
      ($CXX, else g++; clang++ on macOS), not any compiler on PATH.
    * cuda: Triton, which writes inductor's GPU kernels (torch's Linux CUDA wheels depend on
      it; other builds may lack it); the C compiler Triton builds its launcher with ($CC, else
      gcc, else clang: triton/runtime/build.py); and Python's headers, which that launcher
      includes (Python.h: a python3-dev package on Debian).
    A missing piece would otherwise fail the cell at its first compiled call, not skip it.
    """
    if device_type == "cpu":
        wanted = [c for c in torch._inductor.config.cpp.cxx if c]
        if any(shutil.which(c) for c in wanted):
            return None
        return (
            f"torch.compile on CPU needs the C++ compiler inductor calls ({', '.join(wanted)} "
            "not on PATH): install it, or point CXX at one"
        )
    return _cuda_inductor_reason() if device_type == "cuda" else None


def _cuda_inductor_reason() -> str | None:
    if not _triton_installed():
        return "torch.compile on CUDA needs Triton for inductor's kernels: pip install triton"
    cc = os.environ.get("CC")
    if not (shutil.which(cc) if cc else shutil.which("gcc") or shutil.which("clang")):
        return (
            "torch.compile on CUDA needs a C compiler for Triton's launcher (CC, else gcc or "
            "clang): install gcc, or point CC at one"
        )
    headers = python_headers()
    if not headers.is_file():
        return (
            f"torch.compile on CUDA needs Python's headers for Triton's launcher ({headers} "
            "is missing): install python3-dev (Debian) or your Python's headers"
        )
    return None


def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def python_headers() -> Path:
    """Python.h where Triton's launcher build looks for it (its `posix_local` rule included)."""
    scheme = sysconfig.get_default_scheme()
    scheme = "posix_prefix" if scheme == "posix_local" else scheme
    return Path(sysconfig.get_paths(scheme=scheme)["include"]) / "Python.h"


def _mps_compile_reason(compile_mode: str) -> str | None:
    if compile_mode == "max-autotune":
        return "compile max-autotune tunes Triton/C++ GEMM kernels; MPS has neither"
    if os.environ.get(MPS_COMPILE_ENV) != "1":
        return (
            f"torch.compile on MPS (inductor's Metal backend) is a prototype in torch "
            f"{torch.__version__} that phasebench has not verified (its graphs may fall back or "
            f"crash mid-matrix); {MPS_COMPILE_ENV}=1 runs it anyway"
        )
    return None


def kv_quant_reason(cell: Cell, config: Any, device_type: str) -> str | None:
    """Why the cell's quantized KV cache cannot run here or be accounted for exactly, or None."""
    if not cell.kv_quantized:
        return None
    if cell.cache == "static":
        return (
            f"kv_quant {cell.kv_quant} is its own cache (a QuantizedCache that re-quantizes "
            "its whole prefix as it grows), so it cannot be a static cache; remove "
            "`cache: static` from these cells"
        )
    return kv_quant_unsupported_reason(
        str(cell.kv_quant), config, device_type
    ) or kv_quant_shape_reason(
        str(cell.kv_quant),
        config,
        batch=cell.batch,
        prompt_len=cell.prompt_len,
        # The decode measurement steps once from P even when N = 1.
        last_positions=max(cell.final_positions, cell.prompt_len + 1),
        group_size=cell.kv_group,
        residual=cell.kv_residual_len,
    )


def measurement_skip_reason(cell: Cell, measurement: str | None) -> str | None:
    """Why a measurement module skips this cell's run mode, or None."""
    runs_differently = (
        cell.cache == "static" or cell.compile not in (None, "none") or cell.kv_quantized
    )
    if measurement == "overhead" and runs_differently:
        return (
            "the overhead comparison runs HF generate, which picks its own cache and compile; "
            "it is measured on cells without a static or quantized cache or torch.compile"
        )
    return None


def build_cell_model(
    spec: ModelSpec,
    cell: Cell,
    device: torch.device,
    dtype: torch.dtype,
    *,
    before_quant: Callable[[Any], None] | None = None,
    after_quant: Callable[[Any], None] | None = None,
) -> Any:
    """The model of `spec` built with the cell's attention kernel, its weight quantization
    (`quant.methods`; `before_quant` sees the dense model first, `after_quant` the quantized one,
    still eager) and its compile mode."""
    model = build_model(spec, device, dtype, seed=cell.seed, attention=cell.attention)
    if before_quant is not None:
        before_quant(model)
    apply_quant(model, cell.weight_quant, device)
    if after_quant is not None:
        after_quant(model)
    compile_model(model, cell.compile)
    return model


def configure_engine(engine: Any, cell: Cell) -> None:
    """Point the engine's prefill at this cell's start cache (None: the model's own).

    A static cell gets one cache for all its prefills, in all its modules
    (`static.StaticCacheSlot`), allocated ahead of the first forward and reset before each:
    compiled graphs and CUDA graphs keep its buffers' addresses. A quantized-KV cell gets a
    new empty `QuantizedCache` per prefill (`make_quantized_cache`); for quanto, its C++
    extension is built here, before any timed round (`quantobuild`: its first dequantization
    would compile it inside a decode step).
    """
    if engine.start_cache is not None and engine.start_cache_cell == cell.id:
        # The cell's next module (the suite runs a cell's measurements one after another): its
        # cache stays, so compiled graphs and CUDA graphs keep their addresses.
        return
    engine.start_cache_cell = cell.id
    positions = cell.cache_positions
    engine.start_cache = None  # the previous cell's cache goes before this cell allocates its own
    if positions is not None:
        engine.start_cache = kv_static.StaticCacheSlot(engine.model, positions)
    if cell.kv_quantized:
        kv_quant = str(cell.kv_quant)
        if KV_QUANT[kv_quant][0] == "quanto":
            ensure_quanto_built(engine.device.type)
        model, group_size, residual = engine.model, cell.kv_group, cell.kv_residual_len

        def quantized_start_cache(batch: int) -> Any:
            return make_quantized_cache(
                model, kv_quant, group_size=group_size, residual=residual, batch=batch
            )

        engine.start_cache = quantized_start_cache
