"""The `kv --kv-quant K` CLI: a quantized cache's bytes after the prefill and every step.

`add_quantized_kv(report, request, ...)` puts it into the `kv` report (and `match`);
`quantized_report(request, kv_quant, group_size, residual)` gives the analytic timeline
(`kvbytes`: packed data, scales, zero points and the residual window per layer, the flush
timeline exact), and with a device the measured one: the model built (and its weights
quantized with `--quant`), the engine's real prefill/decode loop run from an empty
`QuantizedCache`, `measure_kv` after the prefill and after every step.

It deliberately does not parse arguments (`benchmarks.harness.cli`) or time anything.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import transformers

from benchmarks.harness.cache.measure import measure_kv
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.errors import KVError
from benchmarks.harness.kvquant.backends import (
    kv_quant_shape_reason,
    kv_quant_unsupported_reason,
    make_quantized_cache,
)
from benchmarks.harness.kvquant.kvbytes import (
    quantized_kv_bytes_per_token,
    quantized_kv_layers,
)
from benchmarks.harness.kvquant.quantobuild import ensure_quanto_built
from benchmarks.harness.model.models import ModelSpec, build_model
from benchmarks.harness.quant.methods import apply_quant
from benchmarks.harness.quant.weights_cli import weights_measured


class KVArguments(Protocol):
    """What the report reads of the CLI's validated `kv` request (read-only; the static
    report's `runmode.kvlayout.KVArguments` adds the dtype's name)."""

    @property
    def spec(self) -> ModelSpec: ...

    @property
    def config(self) -> Any: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def prompt_len(self) -> int: ...

    @property
    def new_tokens(self) -> int: ...

    @property
    def batch(self) -> int: ...

    @property
    def device(self) -> torch.device | None: ...

    @property
    def seed(self) -> int: ...


def check_kv_quant(request: KVArguments, kv_quant: str, group_size: int, residual: int) -> None:
    """KVError (exit 2 in the CLI) when the backend cannot run here or be counted exactly."""
    device_type = "cpu" if request.device is None else request.device.type
    reason = kv_quant_unsupported_reason(kv_quant, request.config, device_type)
    if reason is None:
        reason = kv_quant_shape_reason(
            kv_quant,
            request.config,
            batch=request.batch,
            prompt_len=request.prompt_len,
            last_positions=request.prompt_len + request.new_tokens - 1,
            group_size=group_size,
            residual=residual,
        )
    if reason is not None:
        raise KVError(f"--kv-quant {kv_quant}: {reason}.")
    if request.device is not None and request.device.type == "meta":
        raise KVError("--kv-quant quantizes values; --device meta has none: use cpu or cuda.")


def quantized_report(
    request: KVArguments, kv_quant: str, group_size: int, residual: int, quant: str = "none"
) -> dict[str, Any]:
    """The KV part of `kv --kv-quant` (analytic, and `measured` with a device)."""
    check_kv_quant(request, kv_quant, group_size, residual)
    positions = [request.prompt_len + step for step in range(request.new_tokens)]
    layers = [
        quantized_kv_layers(
            request.config,
            dtype=request.dtype,
            batch=request.batch,
            prompt_len=request.prompt_len,
            seq_len=t,
            kv_quant=kv_quant,
            group_size=group_size,
            residual=residual,
        )
        for t in positions
    ]
    per_step = [sum(layer.bytes for layer in step) for step in layers]
    final = layers[-1]
    report: dict[str, Any] = {
        "transformers": transformers.__version__,
        "kv_quant": kv_quant,
        "kv_group_size": group_size,
        "kv_residual": residual,
        "kv_quant_bytes_per_token": quantized_kv_bytes_per_token(
            request.config,
            dtype=request.dtype,
            kv_quant=kv_quant,
            group_size=group_size,
            batch=request.batch,
        ),
        "after_prefill_bytes": per_step[0],
        "final_bytes": per_step[-1],
        "per_step_bytes": per_step,
        "layers": [
            {
                "index": layer.index,
                "type": layer.kind,
                "quantized_positions": layer.quantized_positions,
                "residual_positions": layer.residual_positions,
                "bytes": layer.bytes,
                "keys": vars(layer.keys),
                "values": vars(layer.values),
            }
            for layer in final
        ],
    }
    if request.device is not None:
        report["measured_kv"] = _measured(request, kv_quant, group_size, residual, quant)
    return report


def add_quantized_kv(
    report: dict[str, Any], request: KVArguments, kv_quant: str, group_size: int, residual: int
) -> bool:
    """Replace the dense KV timeline of the `kv` report with the quantized one (measured too,
    with a device: the model's weights as `request.quant` stores them); whether all matched."""
    for dense in ("after_prefill_bytes", "final_bytes", "per_step_bytes", "layers"):
        report.pop(dense, None)
    quant = str(getattr(request, "quant", "none"))
    report.update(quantized_report(request, kv_quant, group_size, residual, quant=quant))
    if "measured_kv" not in report:
        return True
    measured = report.pop("measured_kv")
    measured.update(weights_measured(measured.pop("model"), request.dtype))
    report["measured"] = measured
    report["match"] = (
        measured["per_step_bytes"] == report["per_step_bytes"]
        and measured["weights_bytes"] == report["weights_bytes"]
    )
    return bool(report["match"])


def _measured(
    request: KVArguments, kv_quant: str, group_size: int, residual: int, quant: str
) -> dict[str, Any]:
    device = request.device
    assert device is not None
    model = build_model(request.spec, device, request.dtype, seed=request.seed)
    apply_quant(model, quant, device)
    if kv_quant.startswith("quanto"):
        ensure_quanto_built(device.type)  # never a build inside the loop
    engine = Engine(model, device)
    engine.start_cache = lambda batch: make_quantized_cache(
        model, kv_quant, group_size=group_size, residual=residual, batch=batch
    )
    vocab = int(model.config.get_text_config(decoder=True).vocab_size)
    prompt = make_prompt(request.batch, request.prompt_len, vocab, request.seed)
    result = engine.generate(prompt, request.new_tokens)
    per_step = [result.kv_bytes_after_prefill, *result.kv_bytes_per_step]
    return {
        "device": str(device),
        "after_prefill_bytes": per_step[0],
        "final_bytes": per_step[-1],
        "per_step_bytes": per_step,
        "storage_final_bytes": measure_kv(result.cache).storage_bytes,
        "model": model,  # the CLI reads its weights, then drops it
    }
