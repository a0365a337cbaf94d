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

The int4 configs: CPU `torchao.prototype.quantization.int4.PrototypeInt4WeightOnlyConfig`, CUDA
`Int4WeightOnlyConfig(int4_packing_format="tile_packed_to_4d")` (gpt-fast's tinygemm path).

Every `nn.Linear` of the decoder is quantized except the LM head; embeddings stay in the cell's
dtype (as torchao's and transformers' defaults do). The CPU int4 kernel needs N % 16 == 0: such a
Linear is left dense (named by `predict`); torchao itself leaves a Linear dense when K % G != 0.

`apply_quant(model, method, device)` quantizes a built model in place with the library's own API
(random weights work: `from_config` never quantizes, so the suite quantizes after its init).
torchao is always called with `set_inductor_config=False`, so no global inductor setting leaks
into later cells. `quant_skip_reason(method, device, dtype)` is the collection-time reason a
cell cannot run here (a missing package names the command that installs it).

It deliberately does not count bytes (`stored`, `predict`).
"""

from __future__ import annotations

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
}
CPU_INT4_N_MULTIPLE = 16  # `_convert_weight_to_int4pack_cpu`: "expect N to be dividable by 16"
FP8_MIN_CAPABILITY = (8, 9)  # Ada / Hopper: float8 tensor cores


@dataclass(frozen=True)
class Method:
    """One `quant` value: the library it needs and, for int4, the group size."""

    name: str
    library: str  # torchao | bitsandbytes | none
    group_size: int | None = None


def method(name: str) -> Method:
    """The method of a `quant` value (ValueError for an unknown one: a bug, the matrix checks)."""
    if name not in METHODS:
        raise ValueError(f"unknown quant method {name!r}; use one of {', '.join(METHODS)}")
    if name == "none":
        return Method(name, "none")
    if name.startswith("int4wo-g"):
        return Method(name, "torchao", int(name.removeprefix("int4wo-g")))
    return Method(name, "bitsandbytes" if name in ("nf4", "bnb8") else "torchao")


def quant_skip_reason(name: str, device: torch.device | str, dtype: torch.dtype) -> str | None:
    """Why method `name` cannot run on `device` in `dtype` here (one line), or None."""
    m = method(name)
    if m.library == "none":
        return None
    if importlib.util.find_spec(m.library) is None:
        return (
            f"quant {name}: {m.library} is not installed ({INSTALL[m.library]}, or "
            "`pip install --group quant` from pyproject.toml)"
        )
    return _device_reason(name, m, torch.device(device), dtype)


def _device_reason(name: str, m: Method, device: torch.device, dtype: torch.dtype) -> str | None:
    """What the method's kernels need of the device (MPS, fp8 and int4 on CUDA)."""
    if device.type == "mps":
        return f"quant {name}: {m.library} on MPS is not verified by phasebench"
    if name == "fp8dq" and device.type != "cuda":
        return "quant fp8dq: float8 dynamic activation needs a CUDA GPU with sm89+"
    if device.type != "cuda" or not (name == "fp8dq" or name.startswith("int4wo")):
        return None
    capability = torch.cuda.get_device_capability(device)
    if name == "fp8dq":
        low = capability < FP8_MIN_CAPABILITY
        return (
            f"quant fp8dq: needs compute capability 8.9+, this GPU is {capability}" if low else None
        )
    if dtype != torch.bfloat16:
        return f"quant {name}: CUDA int4 (tinygemm tile packing) is bfloat16 only"
    return f"quant {name}: CUDA int4 needs compute capability 8.0+" if capability[0] < 8 else None


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
        return not (
            name.startswith("int4wo")
            and device_type == "cpu"
            and module.out_features % CPU_INT4_N_MULTIPLE
        )

    return keep


def apply_quant(model: nn.Module, name: str, device: torch.device) -> nn.Module:
    """Quantize `model`'s Linear weights in place with method `name`; returns the model."""
    m = method(name)
    if m.library == "none":
        return model
    keep = quantizable(model, name, device.type)
    if m.library == "torchao":
        _torchao(model, name, m, keep, device)
    else:
        _bitsandbytes(model, name, keep, device)
    return model


def _torchao_config(name: str, m: Method, device: torch.device) -> Any:
    quantization: Any = importlib.import_module("torchao.quantization")
    if name == "int8wo":
        return quantization.Int8WeightOnlyConfig(set_inductor_config=False)
    if name == "int8dq":
        return quantization.Int8DynamicActivationInt8WeightConfig(set_inductor_config=False)
    if name == "fp8wo":
        return quantization.Float8WeightOnlyConfig(set_inductor_config=False)
    if name == "fp8dq":
        return quantization.Float8DynamicActivationFloat8WeightConfig(set_inductor_config=False)
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
                weight, requires_grad=False, quant_type="nf4", compress_statistics=False
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
        # Moving a bitsandbytes layer to its device is what quantizes it.
        setattr(parent, child, new.to(device))
