"""The weights part of the `kv` CLI's JSON: analytic from the config, measured from the model.

`weights_report(spec, quant, dtype, device_type)`: `weights_bytes` (what method `quant` stores
on that device type's layout; the dense size for `none`), `weights_dense_bytes`, `quant`, and
`weight_layers` (one entry per Linear: shape, method, bytes; those left dense say why).
`weights_measured(model, dtype)`: the stored bytes of a built (and quantized) model.

It deliberately does not parse arguments (`benchmarks.harness.cli`).
"""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.harness.model.models import ModelSpec, build_meta_model
from benchmarks.harness.quant.predict import predict_weights
from benchmarks.harness.quant.stored import stored_weights


def weights_report(
    spec: ModelSpec, quant: str, dtype: torch.dtype, device_type: str
) -> dict[str, Any]:
    """The analytic weights of `spec` under `quant` on `device_type` (a meta build: no memory)."""
    layout = "cpu" if device_type == "meta" else device_type
    prediction = predict_weights(
        build_meta_model(spec, dtype), quant, dtype=dtype, device_type=layout
    )
    return {
        "quant": quant,
        "weights_layout": layout,
        "weights_bytes": prediction.total_bytes,
        "weights_dense_bytes": prediction.dense_bytes,
        "weight_layers": [layer.to_json() for layer in prediction.linears],
    }


def weights_measured(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, Any]:
    """The stored and dense bytes of a built model (`quant.stored`)."""
    stored = stored_weights(model, dtype)
    return {"weights_bytes": stored.stored_bytes, "weights_dense_bytes": stored.dense_bytes}
