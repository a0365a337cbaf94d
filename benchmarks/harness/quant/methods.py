"""Weight quantization methods of the `quant` axis: what each needs, and applying it.

| value | library | stored per quantized Linear [N, K] |
| --- | --- | --- |
| `int8wo` | torchao `Int8WeightOnlyConfig` | int8 [N, K] + fp32 scale [N, 1] + int8 zero [N, 1] |
| `int8dq` | torchao `Int8DynamicActivationInt8WeightConfig` | as int8wo (activations at run time) |
| `int4wo-gG` | torchao int4 in groups of G (CPU: opaque; CUDA: tinygemm tiles) | `predict` |
| `fp8wo` | torchao `Float8WeightOnlyConfig` | e4m3 [N, K] + fp32 row scale [N, 1] |
| `fp8dq` | torchao `Float8DynamicActivationFloat8WeightConfig` (CUDA sm89+) | as fp8wo |
| `nf4` | bitsandbytes `Linear4bit` (NF4, block 64, no double quantization) | see `predict` |
| `bnb8` | bitsandbytes `Linear8bitLt` (LLM.int8, threshold 6) | int8 [N, K] + fp32 SCB [N] |
| `gemlite4-gG` | torchao's prototype `UIntxWeightOnlyConfig` (gemlite, CUDA) | see `predict` |
| `gemlite8` | the same, 8 bits per channel | int8 [K, N] + a scale per row (model dtype) |

The int4 configs: CPU `torchao.prototype.quantization.int4.PrototypeInt4WeightOnlyConfig`, CUDA
`Int4WeightOnlyConfig(int4_packing_format="tile_packed_to_4d")` (gpt-fast's tinygemm path).
torchao 0.18 offers no Marlin layout (its sparse Marlin path is gone); gemlite is its other CUDA
low-bit path (`gemlite`, an optional package of its own: triton).

Every `nn.Linear` of the decoder is quantized except the LM head; embeddings stay in the cell's
dtype (as torchao's and transformers' defaults do). The CPU int4 kernel needs N % 16 == 0: such a
Linear is left dense (named by `predict`); torchao itself leaves a Linear dense when K % G != 0.

bitsandbytes layers are put in the model's mode (eval: its `Linear4bit`/`Linear8bitLt` replace
an `nn.Linear`, and a new module starts in training mode, where bitsandbytes runs its training
path: NF4 decode 95 ms there against 36 ms in eval on the development CPU). On a CPU with
AVX-512 BF16 an eval-mode `Linear4bit` repacks its weight at its first forward (blocks of 32
output rows, absmax in bfloat16: fewer stored bytes, and N % 32 must hold, so such Linears stay
dense); `apply_quant` runs that first forward itself (one zero row per layer, untimed), so the
bytes counted after it and every timed round see the packed layout (`nf4_cpu_packed`).

`apply_quant(model, method, device)` quantizes a built model in place with the library's own API
(random weights work: `from_config` never quantizes, so the suite quantizes after its init).
torchao is always called with `set_inductor_config=False`, so no global inductor setting leaks
into later cells. `quant_skip_reason(method, device, dtype)` is the reason a method cannot run
here at all (a missing package names the command that installs it); `quant_timing_reason` adds
why a cell that runs would time a fallback rather than the method (CPU int4 outside bfloat16),
for the suite's collection; the `kv` CLI's byte checks still run those.

It deliberately does not count bytes (`stored`, `predict`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from benchmarks.harness.quant.names import METHODS

# The pinned versions of the optional `quant` dependency group (pyproject.toml).
INSTALL = {
    "torchao": "pip install torchao==0.18.0",
    "bitsandbytes": "pip install bitsandbytes==0.50.2",
    # gemlite pulls triton; the `quant-cuda` group (nox -s bench-cuda-quant installs it).
    "gemlite": "pip install gemlite==0.6.0.post2",
}
CPU_INT4_N_MULTIPLE = 16  # `_convert_weight_to_int4pack_cpu`: "expect N to be dividable by 16"
# bitsandbytes' CPU repack of an eval-mode 4-bit weight (`_convert_weight_packed_for_cpu`):
# "N must be divisible by block_n" with block_n = 32.
CPU_NF4_PACK_N_MULTIPLE = 32
NF4_BLOCK = 64  # transformers' BitsAndBytesConfig default block size, used by `_bitsandbytes`
FP8_MIN_CAPABILITY = (8, 9)  # Ada / Hopper: float8 tensor cores
# torchao's CPU kernels for float8 and int8-activation int4 (Float8OpaqueTensor,
# Int4OpaqueTensor's da8w4): C++ ops registered by torchao's own `_C` extension.
CPU_FLOAT8_OP = "float8_linear_cpu"


@dataclass(frozen=True)
class Method:
    """One `quant` value: the library it needs and, for int4, the group size."""

    name: str
    library: str  # torchao | bitsandbytes | gemlite (through torchao) | none
    group_size: int | None = None


def method(name: str) -> Method:
    """The method of a `quant` value (ValueError for an unknown one: a bug, the matrix checks)."""
    if name not in METHODS:
        raise ValueError(f"unknown quant method {name!r}; use one of {', '.join(METHODS)}")
    if name == "none":
        return Method(name, "none")
    if name.startswith("int4wo-g"):
        return Method(name, "torchao", int(name.removeprefix("int4wo-g")))
    if name.startswith("gemlite4-g"):
        return Method(name, "gemlite", int(name.removeprefix("gemlite4-g")))
    if name == "gemlite8":
        return Method(name, "gemlite")
    return Method(name, "bitsandbytes" if name in ("nf4", "bnb8") else "torchao")


def quant_skip_reason(name: str, device: torch.device | str, dtype: torch.dtype) -> str | None:
    """Why method `name` cannot run on `device` in `dtype` here (one line), or None."""
    m = method(name)
    if m.library == "none":
        return None
    needed = ("torchao", "gemlite") if m.library == "gemlite" else (m.library,)
    for library in needed:
        if importlib.util.find_spec(library) is None:
            group = "quant-cuda" if library == "gemlite" else "quant"
            return (
                f"quant {name}: {library} is not installed ({INSTALL[library]}, or "
                f"`pip install --group {group}` from pyproject.toml)"
            )
    return _device_reason(name, m, torch.device(device), dtype)


def quant_timing_reason(name: str, device: torch.device | str, dtype: torch.dtype) -> str | None:
    """Why a cell of method `name` that can run here would time a fallback path instead of the
    method (one line, for the suite's collection), or None.

    CPU int4: PyTorch's CPU int4 kernel (`_weight_int4pack_mm_for_cpu`, int4mm_kernel.cpp) is
    vectorized (AVX-512 / AVX2) for bfloat16 activations only; in float32 or float16 it runs a
    scalar loop (smollm2-135m float32 on an AVX-512 Zen 4 core: prefill 0.02x, decode 0.3x of
    dense float32, where bfloat16 decodes 1.5-1.7x faster than dense bfloat16).
    """
    reason = quant_skip_reason(name, device, dtype)
    if reason is not None:
        return reason
    if name.startswith("int4wo") and torch.device(device).type == "cpu" and dtype != torch.bfloat16:
        return (
            f"quant {name} on CPU in {str(dtype).removeprefix('torch.')}: PyTorch's CPU int4 "
            "kernel is vectorized for bfloat16 activations only (a scalar loop otherwise, "
            "0.02x prefill, 0.3x decode of the dense cell), so this cell would time the "
            "fallback, not the method; run CPU int4 cells in bfloat16"
        )
    return None


def _device_reason(name: str, m: Method, device: torch.device, dtype: torch.dtype) -> str | None:
    """What the method's kernels need of the device (MPS, gemlite, fp8 and int4 on CUDA)."""
    if device.type == "mps":
        return f"quant {name}: {m.library} on MPS is not verified by phasebench"
    if m.library == "gemlite":
        return _gemlite_reason(name, device, dtype)
    if name == "fp8dq" and device.type != "cuda":
        return _cpu_fp8dq_reason()
    if device.type != "cuda" or not (name == "fp8dq" or name.startswith("int4wo")):
        return None
    return _cuda_capability_reason(name, torch.cuda.get_device_capability(device), dtype)


def _cuda_capability_reason(
    name: str, capability: tuple[int, int], dtype: torch.dtype
) -> str | None:
    """fp8dq needs sm89+ (float8 tensor cores); CUDA int4 (tinygemm) bfloat16 and sm80+."""
    if name == "fp8dq":
        low = capability < FP8_MIN_CAPABILITY
        return (
            f"quant fp8dq: needs compute capability 8.9+, this GPU is {capability}" if low else None
        )
    if dtype != torch.bfloat16:
        return f"quant {name}: CUDA int4 (tinygemm tile packing) is bfloat16 only"
    return f"quant {name}: CUDA int4 needs compute capability 8.0+" if capability[0] < 8 else None


def _gemlite_reason(name: str, device: torch.device, dtype: torch.dtype) -> str | None:
    if device.type != "cuda":
        return f"quant {name}: gemlite's Triton kernels run on CUDA GPUs only"
    if dtype not in (torch.float16, torch.bfloat16):
        return f"quant {name}: gemlite runs float16 or bfloat16 activations only"
    return None


def _cpu_fp8dq_reason() -> str:
    why = (
        f"torchao's torchao::{CPU_FLOAT8_OP} path is not verified by phasebench"
        if cpu_float8_kernel()
        else f"torchao's CPU float8 kernel (torchao::{CPU_FLOAT8_OP}) is not in this torchao "
        "build (the PyPI wheel ships no CPU kernels), and its reference fallback would be timed "
        "instead of the method"
    )
    return f"quant fp8dq: float8 dynamic activation needs a CUDA GPU with sm89+; on a CPU, {why}"


def cpu_float8_kernel() -> bool:
    """Whether this torchao build registers its CPU float8 linear kernel."""
    try:
        ops: Any = torch.ops.torchao
        return hasattr(ops, CPU_FLOAT8_OP)
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def nf4_cpu_packed() -> bool:
    """Whether bitsandbytes repacks an eval-mode 4-bit weight for its CPU kernel here (it does
    where its library reports AVX-512 BF16: `functional.has_avx512bf16`); False without it."""
    if importlib.util.find_spec("bitsandbytes") is None:
        return False
    functional: Any = importlib.import_module("bitsandbytes.functional")
    return bool(functional.has_avx512bf16())


def output_linear(model: nn.Module) -> nn.Module | None:
    """The LM head (kept dense)."""
    getter = getattr(model, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    return head if isinstance(head, nn.Module) else None


def quantizable(model: nn.Module, name: str, device_type: str) -> Callable[[nn.Module, str], bool]:
    """The Linear filter of method `name`: every Linear but the LM head (and, for CPU int4,
    those whose N is a multiple of 16)."""
    head = output_linear(model)

    def keep(module: nn.Module, _fqn: str) -> bool:
        if not isinstance(module, nn.Linear) or module is head:
            return False
        return left_dense_reason(name, module.out_features, module.in_features, device_type) is None

    return keep


def left_dense_reason(name: str, n: int, k: int, device_type: str) -> str | None:
    """Why phasebench leaves a Linear [N, K] dense for method `name` on this device type (a
    kernel's layout refuses it), or None. torchao's own rule (K % G) is `predict`'s."""
    if name.startswith("int4wo") and device_type == "cpu" and n % CPU_INT4_N_MULTIPLE:
        return f"N={n} is not a multiple of {CPU_INT4_N_MULTIPLE} (CPU int4 packing)"
    group = method(name).group_size
    if name.startswith("gemlite4") and group is not None and k % group:
        return f"K={k} is not a multiple of the group size {group} (gemlite's group packing)"
    if name == "nf4" and device_type == "cpu" and nf4_cpu_packed():
        # The repack views the absmax as [N, K / 64] and tiles N by 32.
        if n % CPU_NF4_PACK_N_MULTIPLE:
            return (
                f"N={n} is not a multiple of {CPU_NF4_PACK_N_MULTIPLE} (bitsandbytes' AVX-512 "
                "BF16 CPU packing)"
            )
        if k % NF4_BLOCK:
            return (
                f"K={k} is not a multiple of the NF4 block {NF4_BLOCK} (bitsandbytes' CPU packing)"
            )
    return None


def apply_quant(model: nn.Module, name: str, device: torch.device) -> nn.Module:
    """Quantize `model`'s Linear weights in place with method `name`; returns the model."""
    m = method(name)
    if m.library == "none":
        return model
    keep = quantizable(model, name, device.type)
    if m.library in ("torchao", "gemlite"):
        _torchao(model, name, m, keep, device)
    else:
        _bitsandbytes(model, name, keep, device)
    return model


# torchao's configs taking no argument but `set_inductor_config`, by method.
_PLAIN_CONFIGS = {
    "int8wo": "Int8WeightOnlyConfig",
    "int8dq": "Int8DynamicActivationInt8WeightConfig",
    "fp8wo": "Float8WeightOnlyConfig",
    "fp8dq": "Float8DynamicActivationFloat8WeightConfig",
}


def _torchao_config(name: str, m: Method, device: torch.device) -> Any:
    quantization: Any = importlib.import_module("torchao.quantization")
    if name in _PLAIN_CONFIGS:
        return getattr(quantization, _PLAIN_CONFIGS[name])(set_inductor_config=False)
    if m.library == "gemlite":  # torchao 0.18's gemlite path, a prototype
        uintx: Any = importlib.import_module("torchao.prototype.quantization.quant_api")
        return uintx.UIntxWeightOnlyConfig(
            group_size=m.group_size,
            bit_width=4 if m.group_size is not None else 8,
            set_inductor_config=False,
        )
    if device.type == "cuda":  # tinygemm's tile-packed layout, gpt-fast's int4 path
        return quantization.Int4WeightOnlyConfig(
            group_size=m.group_size,
            int4_packing_format="tile_packed_to_4d",
            set_inductor_config=False,
        )
    prototype: Any = importlib.import_module("torchao.prototype.quantization.int4")
    return prototype.PrototypeInt4WeightOnlyConfig(
        group_size=m.group_size, set_inductor_config=False
    )


def _torchao(
    model: nn.Module,
    name: str,
    m: Method,
    keep: Callable[[nn.Module, str], bool],
    device: torch.device,
) -> None:
    quantize: Any = importlib.import_module("torchao.quantization").quantize_
    quantize(model, _torchao_config(name, m, device), filter_fn=keep)


def _bitsandbytes(
    model: nn.Module, name: str, keep: Callable[[nn.Module, str], bool], device: torch.device
) -> None:
    bnb: Any = importlib.import_module("bitsandbytes")
    targets = [(fqn, mod) for fqn, mod in model.named_modules() if keep(mod, fqn)]
    replaced: list[tuple[nn.Module, int]] = []  # (layer, K)
    dtype = targets[0][1].weight.dtype if targets else torch.float32
    for fqn, linear in targets:
        assert isinstance(linear, nn.Linear)
        parent_name, _, child = fqn.rpartition(".")
        parent = model.get_submodule(parent_name)
        has_bias = linear.bias is not None
        weight = linear.weight.data
        if name == "nf4":
            # transformers' BitsAndBytesConfig defaults: NF4, block 64, no double quantization,
            # compute in the model's dtype.
            new = bnb.nn.Linear4bit(
                linear.in_features,
                linear.out_features,
                bias=has_bias,
                compute_dtype=weight.dtype,
                quant_type="nf4",
                compress_statistics=False,
                device="meta",
            )
            new.weight = bnb.nn.Params4bit(
                weight,
                requires_grad=False,
                quant_type="nf4",
                compress_statistics=False,
                blocksize=NF4_BLOCK,
            )
        else:
            new = bnb.nn.Linear8bitLt(
                linear.in_features,
                linear.out_features,
                bias=has_bias,
                has_fp16_weights=False,
                threshold=6.0,
                device="meta",
            )
            new.weight = bnb.nn.Int8Params(weight, requires_grad=False, has_fp16_weights=False)
        if has_bias:
            new.bias = nn.Parameter(linear.bias.data, requires_grad=False)
        # Moving a bitsandbytes layer to its device is what quantizes it; a new module starts
        # in training mode, where bitsandbytes runs its training path: take the model's mode.
        new = new.to(device).train(linear.training)
        setattr(parent, child, new)
        replaced.append((new, linear.in_features))
    # The first forward repacks an eval-mode 4-bit weight on an AVX-512 BF16 CPU: run it here,
    # untimed, so stored bytes and every timed round see the layout the kernel uses.
    with torch.no_grad():
        for layer, k in replaced:
            layer(torch.zeros(1, k, dtype=dtype, device=device))
