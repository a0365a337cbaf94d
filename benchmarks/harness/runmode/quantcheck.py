"""A quantized cell's checks at build, untimed: its accuracy against the dense model (and its
quantized cache's quantization time), the key of the dense reference it is measured against,
and the Linears its method left dense, as record fields.

`modelcache.build_loaded` calls these once per quantized cell, right after quantizing and
before torch.compile wraps the model. Deliberately not here: building, timing or caching.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from benchmarks.harness.kvquant.backends import KV_QUANT, make_quantized_cache
from benchmarks.harness.kvquant.quantizetime import QuantizeTimer
from benchmarks.harness.kvquant.quantobuild import ensure_quanto_built
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.quant.accuracy import Accuracy, Reference, bound_for, measure_accuracy
from benchmarks.harness.quant.predict import WeightPrediction


def measure_quantized(
    model: Any, device: torch.device, cell: Cell, reference: Reference
) -> tuple[Accuracy, dict[str, Any]]:
    """One quantized cell's accuracy against `reference` (its own start cache: a quantized KV
    cache where it has one), and where that cache's quantization time went (`QuantizeTimer`;
    {} for a dense cache). Untimed."""
    start_cache = None
    if cell.kv_quantized:
        kv_quant = str(cell.kv_quant)
        if KV_QUANT[kv_quant][0] == "quanto":
            ensure_quanto_built(device.type)  # never a build inside the measurement
        start_cache = make_quantized_cache(
            model, kv_quant, group_size=cell.kv_group, residual=cell.kv_residual_len,
            batch=cell.batch,
        )  # fmt: skip
    with QuantizeTimer(device) as timer:
        found = measure_accuracy(
            model,
            reference,
            device,
            start_cache,
            bound_for(cell.weight_quant, cell.kv_quant),
            quant=cell.weight_quant,
            kv_quant=cell.kv_quant,
        )
    return found, timer.fields(cell.prompt_len)


def reference_key(cell: Cell) -> tuple[int, int, int, int]:
    """The prompt and length a cell's dense reference is computed for."""
    return (cell.batch, cell.prompt_len, cell.new_tokens, cell.seed)


def left_dense_fields(weights: WeightPrediction) -> dict[str, Any]:
    """`weights_left_dense_linears` (how many Linears stay dense, the LM head included) and
    `weights_left_dense` (which, by kind: `[{"linears": "model.layers.*.mlp.gate_proj",
    "count": 30, "reason": ...}]`, in model order), for the report beside the figures."""
    if weights.method == "none":  # nothing was to be quantized (a quantized KV cache only)
        return {}
    groups: dict[tuple[str, str], int] = {}
    for layer in weights.left_dense:
        pattern = re.sub(r"\.\d+\.", ".*.", layer.name)
        groups[(pattern, layer.reason)] = groups.get((pattern, layer.reason), 0) + 1
    return {
        "weights_left_dense_linears": len(weights.left_dense),
        "weights_left_dense": [
            {"linears": pattern, "count": count, "reason": reason}
            for (pattern, reason), count in groups.items()
        ],
    }
