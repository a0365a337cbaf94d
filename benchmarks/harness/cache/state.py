"""Fixed-size state of linear-attention and Mamba layers: analytic bytes from a config.

Hybrid and SSM models hold, beside (or instead of) per-token K/V, a conv state and a
recurrent/SSM state per stateful layer whose size does not grow with the sequence: Qwen3-Next's
Gated DeltaNet layers (`linear_attention`) and Jamba's Mamba layers (`mamba`). `analytic_state`
gives their shapes and bytes from the config alone; `measure.measure_kv(...).state_bytes` is the
measured side, and the suite asserts the two equal on every cell.

It deliberately covers only the families whose layout was checked against real caches (jamba,
qwen3_next; tests/harness/cache/test_kv_families.py): any other stateful layer raises `KVError`
rather than
return a guess. Per-token KV stays in `kv.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.harness.cache.kv import element_bytes, layer_types, required_int, text_config
from benchmarks.harness.errors import KVError

# The recurrent/SSM state is float32 whatever the model dtype: the scan runs in float32 and the
# layer stores its result (checked on 5.24 for both families and on 4.46.3 for Jamba, whose
# hybrid cache is allocated in the model dtype and rebound to the float32 state on first use).
RECURRENT_STATE_BYTES = 4
_STATEFUL_TYPES = frozenset({"linear_attention", "mamba", "conv"})
# Model types whose state layout was checked against the real cache
# (tests/harness/cache/test_kv_families.py).
_STATE_MODEL_TYPES = frozenset({"jamba", "qwen3_next"})


@dataclass(frozen=True)
class LayerState:
    """One layer's fixed state: conv and recurrent shapes `[B, ...]` and their bytes."""

    index: int
    kind: str
    conv_shape: tuple[int, ...]
    recurrent_shape: tuple[int, ...]
    bytes: int

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for the CLI."""
        return {
            "index": self.index,
            "type": self.kind,
            "conv_shape": list(self.conv_shape),
            "recurrent_shape": list(self.recurrent_shape),
            "bytes": self.bytes,
        }


@dataclass(frozen=True)
class StateLayout:
    """The analytic fixed state of a whole model (stateful layers only)."""

    layers: tuple[LayerState, ...]
    total_bytes: int


def _state_shapes(config: Any, batch: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    model_type = getattr(config, "model_type", "")
    if model_type == "qwen3_next":
        key_heads = required_int(config, "linear_num_key_heads")
        key_dim = required_int(config, "linear_key_head_dim")
        value_heads = required_int(config, "linear_num_value_heads")
        value_dim = required_int(config, "linear_value_head_dim")
        kernel = required_int(config, "linear_conv_kernel_dim")
        conv_channels = 2 * key_heads * key_dim + value_heads * value_dim  # q, k and v convolved
        return (batch, conv_channels, kernel), (batch, value_heads, key_dim, value_dim)
    # jamba: the Mamba mixer's inner width is expand * hidden
    inner = required_int(config, "mamba_expand") * required_int(config, "hidden_size")
    conv = (batch, inner, required_int(config, "mamba_d_conv"))
    return conv, (batch, inner, required_int(config, "mamba_d_state"))


def analytic_state(config: Any, *, dtype: torch.dtype, batch: int) -> StateLayout:
    """Per-layer conv + recurrent state bytes of linear-attention / Mamba layers (fixed in T).

    Conv state in the model dtype; recurrent state in float32. A model without such layers has
    an empty layout (0 bytes). Raises KVError for stateful layers of a model type whose layout
    was never verified.
    """
    if batch <= 0:
        raise KVError(f"batch is {batch}; use a positive batch size.")
    cfg = text_config(config)
    types = layer_types(cfg, required_int(cfg, "num_hidden_layers"))
    stateful = [(i, t) for i, t in enumerate(types) if t in _STATEFUL_TYPES]
    if not stateful:
        return StateLayout(layers=(), total_bytes=0)
    model_type = getattr(cfg, "model_type", "")
    if model_type not in _STATE_MODEL_TYPES:
        raise KVError(
            f"config model_type `{model_type}` has {stateful[0][1]} layers whose state layout "
            f"phasebench has not verified (only {sorted(_STATE_MODEL_TYPES)}); add a rule to "
            "benchmarks/harness/cache/kv.py with a test."
        )
    conv_shape, recurrent_shape = _state_shapes(cfg, batch)
    esize = element_bytes(dtype)
    per_layer = _numel(conv_shape) * esize + _numel(recurrent_shape) * RECURRENT_STATE_BYTES
    layers = tuple(
        LayerState(i, kind, conv_shape, recurrent_shape, per_layer) for i, kind in stateful
    )
    return StateLayout(layers=layers, total_bytes=per_layer * len(layers))


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def state_fields(
    config: Any, dtype: torch.dtype, batch: int, measured_bytes: int
) -> dict[str, Any]:
    """The `kv_state_*` extra_info fields: analytic and measured fixed state, in bytes.

    `kv_state_analytic_bytes` is None (with `kv_state_note` saying why) for a stateful family
    without a verified rule; the suite asserts equality wherever it is not None.
    """
    try:
        analytic: int | None = analytic_state(config, dtype=dtype, batch=batch).total_bytes
        note = None
    except KVError as error:
        analytic, note = None, str(error)
    fields: dict[str, Any] = {
        "kv_state_analytic_bytes": analytic,
        "kv_state_measured_bytes": measured_bytes,
    }
    if note is not None:
        fields["kv_state_note"] = note
    return fields


def state_mismatch(fields: dict[str, Any]) -> str | None:
    """A one-line description when analytic and measured state differ, else None."""
    analytic = fields["kv_state_analytic_bytes"]
    measured = fields["kv_state_measured_bytes"]
    if analytic is None or analytic == measured:
        return None
    return f"recurrent/conv state: analytic {analytic} bytes, measured {measured} bytes"
