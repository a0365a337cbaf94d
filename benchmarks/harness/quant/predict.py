"""Analytic weight bytes of a cell: per Linear, from its shape, the method and the device.

`predict_weights(model, method, dtype=..., device_type=...)` walks a model (normally built on the
meta device: shapes only) and says what each parameter will store after `methods.apply_quant`.
For a quantized Linear with N output and K input features, in bytes (e = the cell dtype's
element size, bias N * e where present):

* `int8wo`, `int8dq`: N*K + 4*N (fp32 scale) + N (int8 zero point);
* `fp8wo`, `fp8dq`: N*K + 4*N (fp32 row scale);
* `int4wo-gG`, CPU (`Int4OpaqueTensor`): N*K/2 + (K/G)*N*2*e (scale and zero per group, in
  the cell dtype); needs K % G == 0 (else torchao leaves it dense) and N % 16 == 0 (else
  phasebench leaves it dense: the CPU packing refuses it);
* `int4wo-gG`, CUDA (tinygemm tile packing, bfloat16): N'*K'/2 + (K'/G)*N'*2*2 with
  N' = N rounded up to 8 and K' = K rounded up to 1024 (torchao pads both); K % G == 0 as above;
* `nf4`: ceil(N*K/2) + 4*ceil(N*K/64) (fp32 absmax per block of 64) + 64 (the 16-entry fp32
  code each layer keeps); on a CPU where bitsandbytes repacks for its AVX-512 BF16 kernel
  (`methods.nf4_cpu_packed`), the absmax is bfloat16: ceil(N*K/2) + 2*ceil(N*K/64) + 64, and a
  Linear with N % 32 != 0 or K % 64 != 0 stays dense (the repack refuses it);
* `bnb8`: N*K + 4*N (fp32 row scales);
* `gemlite4-gG` (CUDA): N*K/2 + 2*(K/G)*N*e (scale and zero per group in the model dtype; K % G
  != 0: dense); `gemlite8`: N*K + N*e (a scale per row, an empty zero point). Read from torchao
  0.18's `UIntxBitPackedTensor` and gemlite 0.6's packing (not run here: no GPU).

Every other parameter (embeddings, norms, the LM head, a Linear left dense) is numel * e, a
tied one once. The result names every Linear left dense and why, so a user sees which layers
the method did not reach. `stored.stored_weights` of the quantized model must equal it exactly.

Verified against the stored tensors on CPU (torchao 0.18.0, bitsandbytes 0.50.2; float32,
float16, bfloat16). The CUDA int4 and fp8 layouts are read from torchao 0.18's source and are
asserted by the suite on the first GPU run like everything else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from benchmarks.harness.quant.methods import (
    NF4_BLOCK,
    left_dense_reason,
    method,
    nf4_cpu_packed,
    output_linear,
)

NF4_CODE_BYTES = 16 * 4
CUDA_INT4_K_MULTIPLE = 1024
CUDA_INT4_N_MULTIPLE = 8


@dataclass(frozen=True)
class LinearBytes:
    """One Linear's predicted storage (`method` none: left dense, with the reason)."""

    name: str
    out_features: int
    in_features: int
    method: str
    bytes: int
    dense_bytes: int
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for the `kv` CLI."""
        found: dict[str, Any] = {
            "name": self.name,
            "shape": [self.out_features, self.in_features],
            "method": self.method,
            "bytes": self.bytes,
            "dense_bytes": self.dense_bytes,
        }
        if self.reason:
            found["left_dense_because"] = self.reason
        return found


@dataclass(frozen=True)
class WeightPrediction:
    """Predicted stored and dense bytes of a whole model's weights."""

    method: str
    total_bytes: int
    dense_bytes: int
    linears: tuple[LinearBytes, ...]

    @property
    def left_dense(self) -> tuple[LinearBytes, ...]:
        """Linears the method does not quantize (the LM head always; more with a reason)."""
        return tuple(layer for layer in self.linears if layer.method == "none")


def _ceil_to(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def quantized_weight_bytes(
    name: str, n: int, k: int, *, element_bytes: int, device_type: str
) -> tuple[int | None, str]:
    """Bytes of an [n, k] weight under method `name` (None: left dense, with the reason)."""
    group = method(name).group_size
    if name.startswith("int4wo") and group is not None:
        return _int4_bytes(n, k, group, element_bytes=element_bytes, device_type=device_type)
    dense_because = left_dense_reason(name, n, k, device_type)
    if dense_because is not None:
        return None, dense_because
    if name.startswith("gemlite4") and group is not None:
        return n * k // 2 + 2 * (k // group) * n * element_bytes, ""
    if name == "nf4":
        elements = n * k
        # The CPU repack keeps each block's absmax in bfloat16 (`methods.nf4_cpu_packed`).
        absmax_bytes = 2 if device_type == "cpu" and nf4_cpu_packed() else 4
        blocks = math.ceil(elements / NF4_BLOCK)
        return math.ceil(elements / 2) + absmax_bytes * blocks + NF4_CODE_BYTES, ""
    if name not in _PER_ROW:
        return None, "not quantized"
    fixed, elements = _PER_ROW[name]
    return n * k + (fixed + elements * element_bytes) * n, ""


# One byte per element plus bytes per output row, as (fixed bytes, model-dtype elements): int8
# (an fp32 scale and an int8 zero point), fp8 and LLM.int8 (an fp32 scale), gemlite8 (a scale in
# the model dtype, no zero point).
_PER_ROW = {
    "int8wo": (4 + 1, 0),
    "int8dq": (4 + 1, 0),
    "fp8wo": (4, 0),
    "fp8dq": (4, 0),
    "bnb8": (4, 0),
    "gemlite8": (0, 1),
}


def _int4_bytes(
    n: int, k: int, group: int, *, element_bytes: int, device_type: str
) -> tuple[int | None, str]:
    if k % group:
        return None, f"K={k} is not a multiple of the group size {group} (torchao skips it)"
    if device_type == "cuda":
        n_pad = _ceil_to(n, CUDA_INT4_N_MULTIPLE)
        k_pad = _ceil_to(k, CUDA_INT4_K_MULTIPLE)
        return n_pad * k_pad // 2 + (k_pad // group) * n_pad * 2 * 2, ""
    dense_because = left_dense_reason(f"int4wo-g{group}", n, k, device_type)
    if dense_because is not None:
        return None, dense_because
    return n * k // 2 + (k // group) * n * 2 * element_bytes, ""


def predict_weights(
    model: nn.Module, name: str, *, dtype: torch.dtype, device_type: str
) -> WeightPrediction:
    """Stored weight bytes of `model` after method `name` (see the module docstring)."""
    element_bytes = torch.empty((), dtype=dtype).element_size()
    head = output_linear(model)
    quantizes = method(name).library != "none"
    linears: list[LinearBytes] = []
    total = 0
    dense_total = 0
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            if id(param) in seen:
                continue
            seen.add(id(param))
            dense = param.numel() * element_bytes
            dense_total += dense
            if not (isinstance(module, nn.Linear) and param_name == "weight"):
                total += dense
                continue
            n, k = module.out_features, module.in_features
            stored: int | None = None
            reason = "the LM head stays in the cell's dtype"
            if quantizes and module is not head:
                stored, reason = quantized_weight_bytes(
                    name, n, k, element_bytes=element_bytes, device_type=device_type
                )
            elif not quantizes:
                reason = "quant none"
            total += dense if stored is None else stored
            linears.append(
                LinearBytes(
                    name=module_name,
                    out_features=n,
                    in_features=k,
                    method="none" if stored is None else name,
                    bytes=dense if stored is None else stored,
                    dense_bytes=dense,
                    reason="" if stored is not None else reason,
                )
            )
    return WeightPrediction(
        method=name, total_bytes=total, dense_bytes=dense_total, linears=tuple(linears)
    )
