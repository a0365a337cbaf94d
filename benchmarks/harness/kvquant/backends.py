"""Quantized KV caches (transformers' `QuantizedCache`): backends, rules, the start cache.

The `kv_quant` axis picks a backend and a bit width (`KV_QUANT`). After the prefill of P
positions every layer has quantized all P (K and V apart) and its residual window is empty;
each decode step appends its one position to the unquantized residual until the flush, which
dequantizes the quantized prefix, concatenates the residual and the new position and
re-quantizes all of it. After j steps the residual holds `j mod period` positions: the period
is R (`residual`) from transformers 5.20 and max(R, 2) before (its flush test was
`residual.dim() == 4 and len + 1 >= R`, and an emptied residual is 1-D, so R = 1 flushed every
other step). fp8 has no residual: its per-tensor scale is fixed by the prefill and each new
position is appended in fp8.

* `kv_quant_unsupported_reason(kv_quant, config, device_type)`, `kv_quant_shape_reason(...)`:
  why a cell cannot run or be accounted for exactly (collection-time skips).
* `make_quantized_cache(model, kv_quant, group_size=, residual=, batch=)`: the empty cache a
  prefill starts from, for the 4.4x (`QuantizedCacheConfig`) and 4.56+ (`QuantizedCache`) APIs.

The bytes are `kvbytes`; the quanto extension build is `quantobuild`. Measured bytes are
`measure`.
"""

from __future__ import annotations

import importlib.util
import inspect
import shutil
from typing import Any

import torch
import transformers
from packaging.version import Version
from transformers import cache_utils

from benchmarks.harness.cache.kv import analytic_kv, text_config
from benchmarks.harness.errors import KVError

_TRANSFORMERS_VERSION = Version(transformers.__version__)
# `kv_quant` value -> (transformers backend name, bits per element).
KV_QUANT: dict[str, tuple[str, int]] = {
    "fp8": ("fp8", 8),
    "hqq2": ("hqq", 2),
    "hqq4": ("hqq", 4),
    "hqq8": ("hqq", 8),
    "quanto2": ("quanto", 2),
    "quanto4": ("quanto", 4),
}
# Fp8QuantizedLayer appeared in 5.21.0 (absent from the 5.20.0 wheel, present in 5.21.0).
FP8_KV_SINCE = Version("5.21.0")
# Before 4.47 QuantoQuantizedCache calls optimum-quanto >= 0.2.5 without scale and shift and
# raises "shift must be specified" (transformers#34848, fixed by #34750 in 4.47; run on 4.46.3).
QUANTO_KV_FIXED_SINCE = Version("4.47.0")
# The flush test became `len + new >= R` in 5.20.0 (5.19.0 still had the 1-D check above).
RESIDUAL_PERIOD_R_SINCE = Version("5.20.0")
FP8_SCALE_BYTES = 4  # the per-tensor scale is a float32 0-d tensor whatever the model dtype
_PACKAGES = {  # backend -> (module, the install command phasebench verified)
    "quanto": ("optimum.quanto", "pip install optimum-quanto==0.2.7"),
    "hqq": ("hqq", "pip install hqq==0.2.8.post1"),
}


def kv_quant_backend(kv_quant: str) -> tuple[str, int]:
    """(backend, bits) of a `kv_quant` value; KVError for an unknown one."""
    try:
        return KV_QUANT[kv_quant]
    except KeyError:
        raise KVError(f"kv_quant {kv_quant!r} is unknown; use one of {sorted(KV_QUANT)}.") from None


def layered_api() -> bool:
    """Whether this transformers builds `QuantizedCache(backend=, config=, ...)` (4.56+, per
    layer) rather than `QuantoQuantizedCache(QuantizedCacheConfig)` (4.4x)."""
    cls = getattr(transformers, "QuantizedCache", None)
    return cls is not None and "backend" in inspect.signature(cls.__init__).parameters


def flush_period_positions(residual: int) -> int:
    """Decode steps between two flushes of the residual window (see the module docstring)."""
    if _TRANSFORMERS_VERSION >= RESIDUAL_PERIOD_R_SINCE:
        return max(residual, 1)
    return max(residual, 2)


def residual_positions(kv_quant: str, steps: int, residual: int) -> int:
    """Unquantized positions a layer holds after `steps` decode steps (0 right after prefill)."""
    if kv_quant_backend(kv_quant)[0] == "fp8":
        return 0
    return steps % flush_period_positions(residual)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package (`optimum`) is missing
        return False


def kv_quant_unsupported_reason(kv_quant: str, config: Any, device_type: str) -> str | None:
    """Why this machine cannot run (or phasebench cannot account for) `kv_quant`, or None.

    One line: a backend this transformers lacks or breaks, a missing package (with the
    install command), a model whose layers the quantized cache does not model exactly, a
    device the backend cannot run on. `none` (or None) is always fine.
    """
    if kv_quant in (None, "none"):
        return None
    backend, _bits = kv_quant_backend(kv_quant)
    return (
        _version_reason(kv_quant, backend)
        or _package_reason(kv_quant, backend)
        or _model_reason(kv_quant, config)
        or _device_reason(kv_quant, backend, device_type)
    )


def _version_reason(kv_quant: str, backend: str) -> str | None:
    have = transformers.__version__
    if backend == "fp8" and getattr(cache_utils, "Fp8QuantizedLayer", None) is None:
        return f"kv_quant {kv_quant}: the fp8 QuantizedCache needs transformers >= {FP8_KV_SINCE}"
    if backend == "quanto" and _TRANSFORMERS_VERSION < QUANTO_KV_FIXED_SINCE:
        return (
            f"kv_quant {kv_quant}: transformers {have} calls optimum-quanto >= 0.2.5 without "
            f"scale and shift and raises; use transformers >= {QUANTO_KV_FIXED_SINCE}"
        )
    return None


def _package_reason(kv_quant: str, backend: str) -> str | None:
    if backend not in _PACKAGES:
        return None
    module, command = _PACKAGES[backend]
    if not _installed(module):
        return f"kv_quant {kv_quant}: {module} is not installed ({command})"
    return None


def _model_reason(kv_quant: str, config: Any) -> str | None:
    text = text_config(config)
    model_type = getattr(text, "model_type", "?")
    if getattr(text, "is_encoder_decoder", False) or model_type == "gpt_bigcode":
        return f"kv_quant {kv_quant}: phasebench does not model a quantized {model_type} cache"
    try:
        layers = analytic_kv(config, dtype=torch.float32, batch=1, seq_len=1).layers
    except KVError as error:
        return f"kv_quant {kv_quant}: {error}"
    # transformers 5.x raises for anything but full attention; 4.4x quantized caches keep
    # every position of a sliding layer, as its dynamic cache does (kv.py), so those count.
    allowed = {"full_attention"} if layered_api() else {"full_attention", "sliding_attention"}
    other = sorted({layer.kind for layer in layers} - allowed)
    if other:
        return (
            f"kv_quant {kv_quant}: transformers {transformers.__version__}'s QuantizedCache "
            f"holds full-attention layers only; {model_type} has {', '.join(other)} layers"
        )
    if not layered_api():
        model_class = transformers.AutoModelForCausalLM._model_mapping.get(type(text), None)
        if model_class is None or not getattr(model_class, "_supports_quantized_cache", False):
            name = getattr(model_class, "__name__", model_type)
            return (
                f"kv_quant {kv_quant}: {name} does not support a quantized cache in "
                f"transformers {transformers.__version__} (`_supports_quantized_cache` is unset)"
            )
    return None


def _device_reason(kv_quant: str, backend: str, device_type: str) -> str | None:
    # Verified on CPU; CUDA and MPS from the backends' sources (not run).
    if backend == "fp8" and device_type == "mps":
        return (
            f"kv_quant {kv_quant} on MPS is not verified by phasebench (float8_e4m3fn "
            "tensors reached torch's MPS backend only recently)"
        )
    if backend != "quanto":
        return None
    if not _ninja_available():
        return f"kv_quant {kv_quant}: quanto builds a C++ extension with ninja (pip install ninja)"
    if device_type == "cuda" and getattr(_cpp_extension(), "CUDA_HOME", None) is None:
        return f"kv_quant {kv_quant} on CUDA builds quanto's CUDA extension: it needs nvcc"
    compilers = ("clang++",) if device_type == "mps" else ("g++", "c++", "clang++")
    if not any(shutil.which(cxx) for cxx in compilers):
        return (
            f"kv_quant {kv_quant}: quanto builds a C++ extension for {device_type}; no "
            f"{' or '.join(compilers)} on PATH"
        )
    return None


def _cpp_extension() -> Any:
    return importlib.import_module("torch.utils.cpp_extension")


def _ninja_available() -> bool:
    return bool(_cpp_extension().is_ninja_available())


def kv_shapes(config: Any) -> list[tuple[int, int, int, int]]:
    """(K heads, K dim, V heads, V dim) per layer, from the dense accounting (`kv.py`)."""
    layers = analytic_kv(config, dtype=torch.float32, batch=1, seq_len=1).layers
    if any(not lay.k_shape or not lay.v_shape for lay in layers):
        raise KVError(
            f"config ({getattr(config, 'model_type', '?')}) has layers without K/V; a "
            "quantized cache holds full-attention layers only."
        )
    return [(lay.k_shape[1], lay.k_shape[3], lay.v_shape[1], lay.v_shape[3]) for lay in layers]


def quantization_positions(
    kv_quant: str, *, prompt_len: int, last_positions: int, residual: int
) -> list[int]:
    """The lengths T the backend quantizes while the cache grows from P to `last_positions`:
    P at the prefill, then P + j at every flush step j (fp8 quantizes each new position
    with the prefill's scale, so only P)."""
    if kv_quant_backend(kv_quant)[0] == "fp8":
        return [prompt_len]
    period = flush_period_positions(residual)
    return [prompt_len, *range(prompt_len + period, last_positions + 1, period)]


def kv_quant_shape_reason(
    kv_quant: str,
    config: Any,
    *,
    batch: int,
    prompt_len: int,
    last_positions: int,
    group_size: int,
    residual: int,
) -> str | None:
    """Why the group size cannot quantize some tensor this cell quantizes, or None.

    HQQ groups the flattened tensor (G | B*H*T*D) and packs 8/b rows of G per byte (8/b | G);
    quanto groups each batch row (G | H*T*D). Every quantization point up to
    `last_positions` cached positions is checked (`quantization_positions`).
    """
    backend, bits = kv_quant_backend(kv_quant)
    if backend == "fp8":
        return None
    if backend == "hqq" and group_size % (8 // bits):
        return (
            f"kv_quant {kv_quant}: group size {group_size} is not a multiple of {8 // bits}, "
            "so HQQ's bit packing breaks; use a multiple of 8"
        )
    points = quantization_positions(
        kv_quant, prompt_len=prompt_len, last_positions=last_positions, residual=residual
    )
    for heads, dim in {(k_h, k_d) for k_h, k_d, _, _ in kv_shapes(config)} | {
        (v_h, v_d) for _, _, v_h, v_d in kv_shapes(config)
    }:
        for positions in points:
            numel = heads * positions * dim * (batch if backend == "hqq" else 1)
            if numel % group_size:
                what = "B*H*T*D" if backend == "hqq" else "H*T*D"
                return (
                    f"kv_quant {kv_quant}: group size {group_size} does not divide {what} = "
                    f"{numel} at T = {positions} positions; use a group size dividing "
                    f"{heads * dim} (H*D)"
                )
    return None


def make_quantized_cache(
    model: Any, kv_quant: str, *, group_size: int, residual: int, batch: int
) -> Any:
    """The empty quantized cache a prefill of `batch` rows starts from.

    transformers 4.56+: `QuantizedCache(backend, config, nbits, axis 0, q_group_size,
    residual_length)` (fp8 takes none of them: per-tensor scale, no residual). 4.4x:
    `HQQQuantizedCache` / `QuantoQuantizedCache` of a `QuantizedCacheConfig` whose
    `compute_dtype` and `device` are the model's (its defaults, float16 on the CPU, would
    give float16 scales and dequantized K/V under a float32 or bfloat16 model). Nothing is
    allocated until the prefill, so `batch` only has to match it (the shapes come from it).
    """
    del batch  # every backend allocates lazily from the prefill's K/V
    backend, bits = kv_quant_backend(kv_quant)
    if layered_api():
        if backend == "fp8":
            return transformers.QuantizedCache(backend="fp8", config=model.config)
        return transformers.QuantizedCache(
            backend=backend,
            config=model.config,
            nbits=bits,
            axis_key=0,
            axis_value=0,
            q_group_size=group_size,
            residual_length=residual,
        )
    if backend == "fp8":
        raise KVError(f"kv_quant fp8 needs transformers >= {FP8_KV_SINCE}; use hqq or quanto.")
    legacy: Any = cache_utils  # the 4.4x classes, absent from the 5.x module mypy reads
    config = legacy.QuantizedCacheConfig(
        backend="HQQ" if backend == "hqq" else "quanto",
        nbits=bits,
        axis_key=0,
        axis_value=0,
        q_group_size=group_size,
        residual_length=residual,
        compute_dtype=model.dtype,
        device=str(model.device),
    )
    if backend == "hqq":
        return legacy.HQQQuantizedCache(config)
    return legacy.QuantoQuantizedCache(config)
