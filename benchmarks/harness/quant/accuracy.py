"""Accuracy beside speed: how far a quantized cell's outputs are from the same model's dense ones.

A faster cell that computes something else is no win. Before a model's weights are quantized, the
suite runs the dense model once per quantized cell's prompt (`reference_outputs`, untimed): the
logits of the prompt's last position and the N greedy tokens. The quantized cell then runs
*teacher-forced* on those tokens (`measure_accuracy`, untimed): its prefill on the same prompt,
then one decode step per reference token, with the cell's own cache (a quantized KV cache
included). Recorded:

* `accuracy_max_abs_logit_delta`: max |logit - reference logit| over the batch, the vocabulary
  and the first `LOGIT_POSITIONS` generated positions (the prefill's and the first decode
  steps': a quantized KV cache changes nothing in the prefill's own logits, which attend to the
  unquantized K/V, only the steps that read it back); logits are unitless;
* `accuracy_top1_agreement_ratio`: the fraction of the N positions whose argmax equals the
  reference token (teacher forcing: one early disagreement does not derail the rest);
* the bounds (`ACCURACY_BOUNDS`): per method, a multiple of the reference logits' standard
  deviation (over the kept positions), and a least agreement; `accuracy_flag` is true when
  either is crossed.

The bounds were measured on this project's random-weight models (docs/quantization.md, "Accuracy
bounds"): random weights give nearly flat logits, where an argmax flips at the slightest
change, so the agreement bounds are loose on purpose and a flag means a broken path (a kernel
computing garbage, a scale applied twice), not a slightly lossy one.

It deliberately does not time anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.harness.model import compat


@dataclass(frozen=True)
class Bound:
    """A method's largest acceptable deviation: |Δ logit| in reference std, least agreement."""

    logit_delta_std: float
    top1_agreement_ratio: float


# Measured (docs/quantization.md, "Accuracy bounds"): the worst |Δ logit| / std and the least
# agreement over tiny-llama and tiny-qwen2 (float32, bfloat16) and smollm2-135m (float32), seeds
# 0-2, P = 64, N = 24, on CPU; the bound is 1.5x that worst delta (rounded up to 0.1 std) and half
# that least agreement (rounded down to 0.05). The worst case was smollm2-135m every time: 30
# random layers amplify any perturbation. fp8dq (CUDA only) takes fp8wo's bound, unmeasured. A KV
# method's bound combines with its weight method's.
ACCURACY_BOUNDS: dict[str, Bound] = {
    "int8wo": Bound(0.8, 0.4),  # worst 0.511 std, least agreement 0.875
    "int8dq": Bound(1.2, 0.35),  # 0.762, 0.708
    "int4wo-g32": Bound(6.2, 0.0),  # 4.113, 0.000
    "int4wo-g64": Bound(6.5, 0.0),  # 4.279, 0.000
    "int4wo-g128": Bound(3.2, 0.1),  # 2.107, 0.208
    "fp8wo": Bound(2.4, 0.25),  # 1.586, 0.500
    "fp8dq": Bound(2.4, 0.25),  # fp8wo's, unmeasured (needs sm89+)
    "nf4": Bound(6.8, 0.0),  # 4.489, 0.000
    "bnb8": Bound(0.8, 0.35),  # 0.494, 0.750
    "fp8": Bound(1.2, 0.35),  # 0.792, 0.750
    "hqq2": Bound(7.9, 0.0),  # 5.260, 0.042
    "hqq4": Bound(3.6, 0.15),  # 2.384, 0.375
    "hqq8": Bound(0.3, 0.45),  # 0.135, 0.917
    "quanto2": Bound(7.6, 0.0),  # 5.012, 0.042
    "quanto4": Bound(3.4, 0.15),  # 2.228, 0.333
}


# Positions whose whole logit vector is kept from the dense run (prefill + 15 steps): enough to
# see a quantized cache read back, bounded on the host (B x 16 x V float32: 64 MiB for an 8-batch
# 128k vocabulary) whatever N is.
LOGIT_POSITIONS = 16


@dataclass(frozen=True, eq=False)
class Reference:
    """The dense model's outputs on one prompt: logits `[B, S, V]` of the first S generated
    positions (S = min(N, LOGIT_POSITIONS)) and the N greedy tokens `[B, N]`."""

    prompt: torch.Tensor  # [B, P] on the host
    logits: torch.Tensor  # float32, on the host
    tokens: torch.Tensor  # [B, N] on the host


@dataclass(frozen=True)
class Accuracy:
    """One quantized cell's deviation from its dense reference and whether it is flagged."""

    max_abs_logit_delta: float
    top1_agreement_ratio: float
    tokens: int
    bound_max_abs_logit_delta: float
    bound_top1_agreement_ratio: float

    @property
    def flagged(self) -> bool:
        """Outside the method's bound on either measure."""
        return (
            self.max_abs_logit_delta > self.bound_max_abs_logit_delta
            or self.top1_agreement_ratio < self.bound_top1_agreement_ratio
        )

    def fields(self) -> dict[str, Any]:
        """The `accuracy_*` fields of a record (see the module docstring)."""
        return {
            "accuracy_max_abs_logit_delta": self.max_abs_logit_delta,
            "accuracy_top1_agreement_ratio": self.top1_agreement_ratio,
            "accuracy_tokens": self.tokens,
            "accuracy_bound_max_abs_logit_delta": self.bound_max_abs_logit_delta,
            "accuracy_bound_top1_agreement_ratio": self.bound_top1_agreement_ratio,
            "accuracy_flag": self.flagged,
            "accuracy_reference": "the same model unquantized, same prompt, teacher-forced",
        }


def _forward(model: Any, ids: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]:
    """Last-position logits (float32) and the cache after feeding `ids`."""
    kwargs: dict[str, Any] = {}
    if cache is not None:
        kwargs[compat.cache_kwarg(model)] = cache
    logits_kwarg = compat.logits_kwarg(model)
    if logits_kwarg is not None:
        kwargs[logits_kwarg] = 1
    outputs = model(input_ids=ids, use_cache=True, **kwargs)
    return outputs.logits[:, -1, :].float(), compat.adopt_cache(model, compat.output_cache(outputs))


def reference_outputs(
    model: Any, device: torch.device, prompt: torch.Tensor, new_tokens: int
) -> Reference:
    """The dense model's greedy run on the cell's prompt `[B, P]` (on the host; untimed)."""
    batch = int(prompt.shape[0])
    with torch.inference_mode():
        logits, cache = _forward(model, prompt.to(device), compat.initial_cache(model, batch))
        kept = [logits.to("cpu")]
        token = logits.argmax(dim=-1, keepdim=True)
        tokens = [token.to("cpu")]
        for _ in range(1, new_tokens):
            logits, cache = _forward(model, token, cache)
            if len(kept) < LOGIT_POSITIONS:
                kept.append(logits.to("cpu"))
            token = logits.argmax(dim=-1, keepdim=True)
            tokens.append(token.to("cpu"))
    return Reference(
        prompt=prompt, logits=torch.stack(kept, dim=1), tokens=torch.cat(tokens, dim=-1)
    )


def bound_for(quant: str, kv_quant: str | None) -> Bound:
    """The bound of a cell's methods (the looser of weight and KV when both quantize)."""
    bounds = [ACCURACY_BOUNDS[m] for m in (quant, kv_quant or "none") if m != "none"]
    if not bounds:
        return Bound(0.0, 1.0)
    return Bound(
        max(b.logit_delta_std for b in bounds), min(b.top1_agreement_ratio for b in bounds)
    )


def measure_accuracy(
    model: Any,
    reference: Reference,
    device: torch.device,
    start_cache: Any,
    bound: Bound,
) -> Accuracy:
    """The quantized model teacher-forced on `reference` (untimed); `start_cache` is the cache
    the cell's prefill starts from (None: the model's own)."""
    batch = int(reference.prompt.shape[0])
    tokens = reference.tokens.to(device)
    kept = reference.logits.shape[1]
    delta = 0.0
    agreed = 0
    with torch.inference_mode():
        if start_cache is None:
            start_cache = compat.initial_cache(model, batch)
        logits, cache = _forward(model, reference.prompt.to(device), start_cache)
        for i in range(tokens.shape[1]):
            if i > 0:  # teacher forcing: feed the dense run's token i - 1
                logits, cache = _forward(model, tokens[:, i - 1 : i], cache)
            if i < kept:
                step = (logits.to("cpu") - reference.logits[:, i, :]).abs().max()
                delta = max(delta, float(step))
            agreed += int((logits.argmax(dim=-1) == tokens[:, i]).sum())
    spread = float(reference.logits.std())
    return Accuracy(
        max_abs_logit_delta=delta,
        top1_agreement_ratio=agreed / tokens.numel(),
        tokens=int(tokens.shape[1]),
        bound_max_abs_logit_delta=bound.logit_delta_std * spread,
        bound_top1_agreement_ratio=bound.top1_agreement_ratio,
    )
