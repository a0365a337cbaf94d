"""MLX weight bytes: what the arrays store, and what they must store (DESIGN §11 on MLX).

* `stored_bytes(model)`: the `nbytes` of every array of the model's parameters (a quantized
  layer's packed uint32 weight, its scales and biases), each counted once.
* `predicted_bytes(model, dtype_bytes, bits, group_size)`: from the dense model (its shapes
  only; nothing is evaluated), the bytes after mlx-lm's quantization rule (`quantize_model`): a
  layer with `to_quantized` (Linear, Embedding) whose input width divides by the group size,
  and that the model's own `quant_predicate` accepts, stores its `[out, in]` weight as
  `out * in * bits / 32` uint32 words plus a scale and a bias per group in the model's dtype (its
  Linear bias stays); every other parameter stays dense. Unquantized (`bits` None) it is the
  dense bytes, which the suite also checks against the torch model's analytic weights of the
  same config: one architecture, whichever engine runs it.

It deliberately does not quantize anything (`build.py` calls mlx-lm's `quantize_model`).
"""

from __future__ import annotations

from typing import Any

# `quant` value -> bits of mlx's affine quantization; the group size is mlx-lm's default.
QUANT_BITS = {"mlx4": 4, "mlx8": 8}
GROUP_SIZE = 64
_UINT32_BYTES = 4


def _arrays(tree: Any) -> list[Any]:
    from mlx.utils import tree_flatten  # noqa: PLC0415 - optional dependency

    flat = tree_flatten(tree)  # a list of (path, array) pairs (a dict only with destination=)
    assert isinstance(flat, list)
    return [value for _, value in flat]


def stored_bytes(model: Any) -> int:
    """Bytes the model's parameter arrays occupy (each array once)."""
    seen: set[int] = set()
    total = 0
    for array in _arrays(model.parameters()):
        if id(array) not in seen:
            seen.add(id(array))
            total += int(array.nbytes)
    return total


def quant_params(model: Any, path: str, module: Any, bits: int, group_size: int) -> dict[str, int]:
    """mlx-lm's `quantize_model` predicate for one module: {} when it stays dense, else the
    bits and group size it is quantized with (a model's `quant_predicate` may override them)."""
    weight = getattr(module, "weight", None)
    if not hasattr(module, "to_quantized") or weight is None or weight.shape[-1] % group_size:
        return {}
    chosen: Any = True
    predicate = getattr(model, "quant_predicate", None)
    if predicate is not None:
        chosen = predicate(path, module)
    if not chosen:
        return {}
    params = chosen if isinstance(chosen, dict) else {}
    return {
        "bits": int(params.get("bits", bits)),
        "group_size": int(params.get("group_size", group_size)),
    }


def predicted_bytes(model: Any, *, element_bytes: int, bits: int | None, group_size: int) -> int:
    """Bytes `model` (dense, not yet quantized) stores after quantizing to `bits` (None: dense)."""
    total = 0
    for path, module in model.named_modules():
        own = [v for k, v in module.parameters().items() if not isinstance(v, dict | list)]
        params = {} if bits is None else quant_params(model, path, module, bits, group_size)
        if not params:
            total += sum(int(v.nbytes) for v in own)
            continue
        out_features, in_features = module.weight.shape
        words = in_features * params["bits"] // 32
        groups = in_features // params["group_size"]
        total += out_features * (words * _UINT32_BYTES + 2 * groups * element_bytes)
        bias = module.parameters().get("bias")
        if bias is not None and not isinstance(bias, dict | list):
            total += int(bias.nbytes)
    return total
