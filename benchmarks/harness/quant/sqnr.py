"""Signal-to-quantization-noise ratio: per quantized Linear and per quantized K/V, in dB.

SQNR is the measure the field uses for a quantized layer (torchao's `compute_error`, asserted
above 20 dB in its own tests): 10 log10(||y||^2 / ||y - y_q||^2), y the dense output, y_q the
quantized one, on the same input. It is scale-free (random and real weights alike), per layer
(thirty random layers cannot amplify one layer's error into a flat-logit argmax flip), and it
cannot pass a broken kernel: a scale applied twice gives y_q = 2y, 0 dB, whatever the bit width.

* `LinearCapture` / `capture_linears(model)`: forward hooks that keep, for the dense model's
  prefill of the cell's own prompt, every decoder Linear's input and output (batch row 0, the
  last `SQNR_TOKENS` positions, on the host): the inputs the cell's Linears really see.
* `linear_sqnr_db(model, captures)`: after quantizing, each quantized Linear run on its own
  captured input against its dense output; Linears left dense are not listed.
* `KVCapture` / `capture_kv(cache, into, read=...)`: per layer, the K and V the model hands a
  cache's `update` (`read=False`: at the prefill, what the cache is given to quantize) or the K
  and V the cache hands back to the attention (`read=True`: at a decode step, the dequantized
  prefix, the residual and the new position), batch row 0, on the host. `kv_sqnr_db(written,
  read)` compares the prompt's positions: the cache's own quantization error, isolated from
  whatever the model's weights did to K and V (a weight-quantized model writes other K/V than
  the dense one, and comparing with those would charge the cache for the weights' error).
* `by_kind(named)`: `{"self_attn.q_proj": [dB per layer, ...]}` for the record (compact).

It deliberately does not decide what is acceptable (`accuracy` holds the bounds).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from benchmarks.harness.quant.methods import output_linear
from benchmarks.harness.quant.stored import is_quantized_tensor

#: Prompt positions (of batch row 0) whose Linear inputs are kept: enough for a stable
#: per-layer ratio, bounded on the host whatever P is (an 8B model's 224 Linears at 64
#: positions: about 0.1 GB in float32).
SQNR_TOKENS = 64
#: The SQNR of an exact output (no error at all): finite, so records stay plain JSON numbers.
EXACT_DB = 200.0
_LAYER_INDEX = re.compile(r"\.(\d+)\.")


def sqnr_db(reference: torch.Tensor, other: torch.Tensor) -> float:
    """10 log10(sum(reference^2) / sum((reference - other)^2)) in float64; `EXACT_DB` for no
    error, 0 dB for an error as large as the signal."""
    ref = reference.double()
    noise = float((ref - other.double()).pow(2).sum())
    signal = float(ref.pow(2).sum())
    if noise == 0.0:
        return EXACT_DB
    if signal == 0.0:
        return -EXACT_DB
    return min(EXACT_DB, 10.0 * math.log10(signal / noise))


@dataclass
class LinearCapture:
    """One Linear's dense input `[T, K]` (its dtype) and output `[T, N]` (float32), host."""

    inputs: torch.Tensor
    outputs: torch.Tensor


def _decoder_linears(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    head = output_linear(model)
    for name, module in model.named_modules():
        if module is not head and _is_linear_like(module):
            yield name, module


def _is_linear_like(module: nn.Module) -> bool:
    # nn.Linear and the bitsandbytes layers that replace it (subclasses of nn.Linear).
    return isinstance(module, nn.Linear)


@contextmanager
def capture_linears(model: nn.Module, into: dict[str, LinearCapture]) -> Iterator[None]:
    """While open, the first call of every decoder Linear keeps its input and output in `into`
    (batch row 0, the last `SQNR_TOKENS` positions): run the dense prefill inside it."""

    def hook(name: str) -> Callable[[nn.Module, tuple[Any, ...], Any], None]:
        def keep(_module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if name in into or not args or not isinstance(output, torch.Tensor):
                return
            x = args[0]
            rows = x.reshape(-1, x.shape[-1]) if x.dim() < 3 else x[0]
            out = output.reshape(-1, output.shape[-1]) if output.dim() < 3 else output[0]
            into[name] = LinearCapture(
                inputs=rows[-SQNR_TOKENS:].detach().to("cpu", copy=True),
                outputs=out[-SQNR_TOKENS:].detach().float().to("cpu", copy=True),
            )

        return keep

    handles = [module.register_forward_hook(hook(name)) for name, module in _decoder_linears(model)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def quantized_linear(module: nn.Module) -> bool:
    """Whether a Linear's weight is stored quantized (a tensor subclass or bitsandbytes)."""
    weight = getattr(module, "weight", None)
    return isinstance(weight, torch.Tensor) and is_quantized_tensor(weight)


def linear_sqnr_db(
    model: nn.Module, captures: Mapping[str, LinearCapture], device: torch.device
) -> dict[str, float]:
    """SQNR in dB of every quantized Linear on its captured dense input (name -> dB)."""
    found: dict[str, float] = {}
    modules = dict(model.named_modules())
    with torch.inference_mode():
        for name, capture in captures.items():
            module = modules.get(name)
            if module is None or not quantized_linear(module):
                continue  # left dense: its output is the dense one
            out = module(capture.inputs.to(device))
            found[name] = sqnr_db(capture.outputs, out.float().to("cpu"))
    return found


@dataclass
class KVCapture:
    """Per layer index, the keys and values `[H, T, D]` (float32, host) one cache handed its
    layer's attention at a decode step."""

    keys: dict[int, torch.Tensor] = field(default_factory=dict)
    values: dict[int, torch.Tensor] = field(default_factory=dict)


@contextmanager
def capture_kv(cache: Any, into: KVCapture, *, read: bool) -> Iterator[None]:
    """While open, each layer's K and V (batch row 0) go to `into`: those `cache.update` is
    given (`read=False`) or those it returns (`read=True`). Run one forward inside it. A cache
    that is no `Cache` object (a legacy tuple, or None: the model makes its own) captures
    nothing."""
    update = getattr(cache, "update", None)
    if update is None:
        yield
        return

    def recording(key_states: Any, value_states: Any, layer_idx: int, *args: Any, **kw: Any) -> Any:
        keys, values = update(key_states, value_states, layer_idx, *args, **kw)
        kept = (keys, values) if read else (key_states, value_states)
        into.keys[int(layer_idx)] = kept[0][0].detach().float().to("cpu", copy=True)
        into.values[int(layer_idx)] = kept[1][0].detach().float().to("cpu", copy=True)
        return keys, values

    cache.update = recording  # an instance attribute, dropped below: the class is untouched
    try:
        yield
    finally:
        del cache.update


def kv_sqnr_db(written: KVCapture, read: KVCapture) -> dict[str, float]:
    """SQNR of the K and V `read` back against those `written`, over the written positions
    (`[H, T, D]`: the first T of what was read), per layer present in both:
    `{"kv.keys.3": dB, "kv.values.3": dB, ...}`."""
    found: dict[str, float] = {}
    for kind, ref, got in (
        ("keys", written.keys, read.keys),
        ("values", written.values, read.values),
    ):
        for layer in sorted(set(ref) & set(got)):
            positions = ref[layer].shape[-2]
            back = got[layer][..., :positions, :]
            if back.shape == ref[layer].shape:
                found[f"kv.{kind}.{layer}"] = sqnr_db(ref[layer], back)
    return found


def by_kind(named: Mapping[str, float], digits: int = 1) -> dict[str, list[float]]:
    """Per-tensor SQNR grouped by kind, in layer order: "model.layers.3.self_attn.q_proj" ->
    `{"self_attn.q_proj": [..., layer 3's, ...]}`, "kv.keys.3" -> `{"kv.keys": [...]}`; a name
    without a layer index is its own kind. Rounded to `digits` (a record holds a few hundred)."""
    grouped: dict[str, list[tuple[int, float]]] = {}
    for name, value in named.items():
        if name.startswith("kv."):
            kind, _, index = name.rpartition(".")
            grouped.setdefault(kind, []).append((int(index), value))
            continue
        match = _LAYER_INDEX.search(name)
        if match is None:
            grouped.setdefault(name, []).append((0, value))
            continue
        kind = name[match.end() :]
        grouped.setdefault(kind, []).append((int(match.group(1)), value))
    return {kind: [round(v, digits) for _, v in sorted(values)] for kind, values in grouped.items()}
