"""Accuracy beside speed: how far a quantized cell's outputs are from the same model's dense ones.

A faster cell that computes something else is no win. Before a model's weights are quantized, the
suite runs the dense model once per quantized cell's prompt (`reference_outputs`, untimed): the
logits of the prompt's last position, the N greedy tokens, and every decoder Linear's input and
output at the prefill (`sqnr.capture_linears`). Right after quantizing (untimed, once per cell,
where the model is built: `modelcache`), the quantized model runs each Linear on its own
captured input, and *teacher-forced* on the reference tokens (`measure_accuracy`): its prefill on
the same prompt, then one decode step per reference token, with the cell's own cache (a quantized
KV cache included: what each layer writes to it at the prefill and reads back at the first step
are kept, `sqnr.capture_kv`). Recorded (`Accuracy.fields`):

* `quant_sqnr_db_min`: the lowest SQNR in dB (`sqnr`) over every quantized Linear (on the cell's
  own inputs, against the dense outputs) and, for a quantized cache, every layer's K and V as the
  attention reads them back against what the same model wrote (the cache's own error, whatever
  the weights are); `quant_sqnr_db` per kind and layer; the method's bound
  (`SQNR_BOUNDS_DB`) for the weights and the cache apart. This is the check that fails a broken
  path at every bit width (a scale applied twice reads 0 dB);
* `quant_logits_kl`: the mean KL divergence (nats) of the next-token distributions from the
  dense ones over the first `LOGIT_POSITIONS` generated positions, `quant_logits_kl_max` the
  largest;
* `accuracy_max_abs_logit_delta` (unitless logits, over the same positions; the prefill's own
  logits see an unquantized K/V, so a quantized cache shows in the steps that read it back) and
  `accuracy_top1_agreement_ratio` (teacher-forced top-1 agreement over the N tokens), each with
  its bound (`ACCURACY_BOUNDS`);
* `accuracy_flag`: true when any bound is crossed.

The logit bounds were measured on this project's random-weight models (docs/quantization.md):
random weights give nearly flat logits, where an argmax flips at the slightest change, so they
are loose and the 4- and 2-bit agreement bounds are 0; the SQNR bounds are what can fail there.

It deliberately does not time anything.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from benchmarks.harness.model import compat
from benchmarks.harness.quant.sqnr import (
    SQNR_TOKENS,
    KVCapture,
    LinearCapture,
    by_kind,
    capture_kv,
    capture_linears,
    kv_sqnr_db,
    linear_sqnr_db,
)


@dataclass(frozen=True)
class Bound:
    """A method's largest acceptable deviation: |Δ logit| in reference std, least agreement."""

    logit_delta_std: float
    top1_agreement_ratio: float


# Measured (docs/quantization.md, "Accuracy bounds"; `python -m benchmarks.calibration.
# accuracy_bounds`): the worst |Δ logit| / std and the least agreement over tiny-llama and
# tiny-qwen2 (float32, bfloat16, seeds 0-2) and smollm2-135m (float32, bfloat16, seeds 0-1),
# P = 64, N = 24, on CPU; the bound is 1.5x that worst delta (rounded up to 0.1 std) and half
# that least agreement (rounded down to 0.05). The worst case was smollm2-135m every time: 30
# random layers amplify any perturbation. Methods that run on CUDA only take their CPU twin's
# bound, unmeasured. A KV method's bound combines with its weight method's.
ACCURACY_BOUNDS: dict[str, Bound] = {
    "int8wo": Bound(0.8, 0.25),  # worst 0.526 std, least agreement 0.542
    "int8dq": Bound(1.2, 0.25),  # 0.796, 0.542
    "int4wo-g32": Bound(6.9, 0.0),  # 4.558, 0.000
    "int4wo-g64": Bound(6.7, 0.0),  # 4.459, 0.000
    "int4wo-g128": Bound(3.2, 0.05),  # 2.107, 0.125
    "fp8wo": Bound(2.7, 0.15),  # 1.769, 0.375
    "fp8dq": Bound(2.7, 0.15),  # fp8wo's, unmeasured (needs sm89+)
    "nf4": Bound(6.8, 0.0),  # 4.533, 0.000
    "bnb8": Bound(1.2, 0.25),  # 0.749, 0.583
    "gemlite4-g64": Bound(6.7, 0.0),  # int4wo-g64's, unmeasured (CUDA only)
    "gemlite8": Bound(0.8, 0.25),  # int8wo's, unmeasured (CUDA only)
    "fp8": Bound(1.4, 0.25),  # 0.886, 0.583
    "hqq2": Bound(7.9, 0.0),  # 5.260, 0.042
    "hqq4": Bound(3.6, 0.1),  # 2.384, 0.250
    "hqq8": Bound(0.6, 0.35),  # 0.386, 0.750
    "quanto2": Bound(7.8, 0.0),  # 5.182, 0.042
    "quanto4": Bound(4.2, 0.15),  # 2.756, 0.333
}

# The least SQNR in dB a method's quantized tensors may show (per Linear on its own inputs; per
# K or V layer as the attention reads it), tuned from measurement on the same runs (the least
# value, in the comment): that least less one bit (6 dB; half the least where that is less, so
# a 2-bit bound stays above the 0 dB of a doubled scale), rounded down, never above the field's
# figure (int8 / fp8 30 dB, 4 bits 15 dB; torchao's own tests assert 20 dB). A scale applied
# twice reads 0 dB whatever the bit width: far below every bound.
SQNR_BOUNDS_DB: dict[str, float] = {
    "int8wo": 30.0,  # least 41.1 dB
    "int8dq": 26.0,  # 32.1
    "bnb8": 27.0,  # 33.5
    "fp8wo": 24.0,  # 30.9
    "fp8dq": 24.0,  # fp8wo's, unmeasured (needs sm89+)
    "int4wo-g32": 14.0,  # 20.7
    "int4wo-g64": 13.0,  # 19.8
    "int4wo-g128": 13.0,  # 19.4
    "nf4": 13.0,  # 19.8
    "gemlite4-g64": 13.0,  # int4wo-g64's, unmeasured (CUDA only)
    "gemlite8": 30.0,  # int8wo's, unmeasured (CUDA only)
    "fp8": 23.0,  # 29.3
    "hqq8": 30.0,  # 38.4
    "hqq4": 14.0,  # 20.1
    "quanto4": 13.0,  # 19.3
    "hqq2": 3.0,  # 7.0
    "quanto2": 3.0,  # 6.4
}


# Positions whose whole logit vector is kept from the dense run (prefill + 15 steps): enough to
# see a quantized cache read back, bounded on the host (B x 16 x V float32: 64 MiB for an 8-batch
# 128k vocabulary) whatever N is.
LOGIT_POSITIONS = 16


@dataclass(frozen=True, eq=False)
class Reference:
    """The dense model's outputs on one prompt: logits `[B, S, V]` of the first S generated
    positions (S = min(N, LOGIT_POSITIONS)), the N greedy tokens `[B, N]`, and every decoder
    Linear's input and output at the prefill."""

    prompt: torch.Tensor  # [B, P] on the host
    logits: torch.Tensor  # float32, on the host
    tokens: torch.Tensor  # [B, N] on the host
    linears: dict[str, LinearCapture] = field(default_factory=dict)


@dataclass(frozen=True)
class Accuracy:
    """One quantized cell's deviation from its dense reference and whether it is flagged."""

    max_abs_logit_delta: float
    top1_agreement_ratio: float
    tokens: int
    bound_max_abs_logit_delta: float
    bound_top1_agreement_ratio: float
    logit_delta_by_position: tuple[float, ...] = ()
    logits_kl: float = 0.0  # mean over batch and kept positions, nats
    logits_kl_max: float = 0.0
    # SQNR in dB per quantized tensor ("model.layers.3.mlp.down_proj", "kv.keys.3", ...).
    sqnr_db: dict[str, float] = field(default_factory=dict)
    sqnr_bound_weights_db: float | None = None
    sqnr_bound_kv_db: float | None = None

    def _minimum(self, kv: bool | None) -> tuple[str, float] | None:
        values = [
            (name, v)
            for name, v in self.sqnr_db.items()
            if kv is None or name.startswith("kv.") == kv
        ]
        return min(values, key=lambda item: item[1]) if values else None

    @property
    def sqnr_db_min(self) -> float | None:
        """The lowest SQNR over every quantized tensor (None: none was quantized)."""
        found = self._minimum(None)
        return None if found is None else found[1]

    @property
    def sqnr_outside(self) -> bool:
        """A quantized Linear or K/V layer below its method's SQNR bound."""
        for kv, bound in ((False, self.sqnr_bound_weights_db), (True, self.sqnr_bound_kv_db)):
            found = self._minimum(kv)
            if found is not None and bound is not None and found[1] < bound:
                return True
        return False

    @property
    def flagged(self) -> bool:
        """Outside the method's bound on any measure."""
        return (
            self.max_abs_logit_delta > self.bound_max_abs_logit_delta
            or self.top1_agreement_ratio < self.bound_top1_agreement_ratio
            or self.sqnr_outside
        )

    def fields(self) -> dict[str, Any]:
        """The `accuracy_*` and `quant_*` accuracy fields of a record (module docstring)."""
        worst = self._minimum(None)
        weights, kv = self._minimum(False), self._minimum(True)
        return {
            "accuracy_max_abs_logit_delta": self.max_abs_logit_delta,
            "accuracy_top1_agreement_ratio": self.top1_agreement_ratio,
            "accuracy_tokens": self.tokens,
            "accuracy_bound_max_abs_logit_delta": self.bound_max_abs_logit_delta,
            "accuracy_bound_top1_agreement_ratio": self.bound_top1_agreement_ratio,
            "accuracy_flag": self.flagged,
            "accuracy_reference": "the same model unquantized, same prompt, teacher-forced",
            "quant_logits_kl": self.logits_kl,
            "quant_logits_kl_max": self.logits_kl_max,
            "quant_sqnr_db_min": None if worst is None else worst[1],
            "quant_sqnr_db_min_tensor": None if worst is None else worst[0],
            "quant_sqnr_db_weights_min": None if weights is None else weights[1],
            "quant_sqnr_db_weights_bound": self.sqnr_bound_weights_db,
            "quant_sqnr_db_kv_min": None if kv is None else kv[1],
            "quant_sqnr_db_kv_bound": self.sqnr_bound_kv_db,
            "quant_sqnr_db": by_kind(self.sqnr_db),
            "quant_sqnr_tokens": SQNR_TOKENS,
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
    """The dense model's greedy run on the cell's prompt `[B, P]` (on the host; untimed), with
    every decoder Linear's prefill input and output."""
    batch = int(prompt.shape[0])
    linears: dict[str, LinearCapture] = {}
    with torch.inference_mode():
        with capture_linears(model, linears):
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
        prompt=prompt,
        logits=torch.stack(kept, dim=1),
        tokens=torch.cat(tokens, dim=-1),
        linears=linears,
    )


def bound_for(quant: str, kv_quant: str | None) -> Bound:
    """The bound of a cell's methods (the looser of weight and KV when both quantize)."""
    bounds = [ACCURACY_BOUNDS[m] for m in (quant, kv_quant or "none") if m != "none"]
    if not bounds:
        return Bound(0.0, 1.0)
    return Bound(
        max(b.logit_delta_std for b in bounds), min(b.top1_agreement_ratio for b in bounds)
    )


def kl_divergence(reference_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(p_reference || p) in nats per row of `[..., V]` logits (float64)."""
    log_p = torch.log_softmax(reference_logits.double(), dim=-1)
    log_q = torch.log_softmax(logits.double(), dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


def measure_accuracy(
    model: Any,
    reference: Reference,
    device: torch.device,
    start_cache: Any,
    bound: Bound,
    *,
    quant: str = "none",
    kv_quant: str | None = None,
) -> Accuracy:
    """The quantized model against `reference` (untimed): every quantized Linear on its own
    captured input, then teacher-forced on the reference tokens; `start_cache` is the cache the
    cell's prefill starts from (None: the model's own). `quant` and `kv_quant` name the methods
    whose SQNR bounds apply; a quantized cache's K/V read back at the first decode step are
    compared with what the model wrote to it at the prefill."""
    batch = int(reference.prompt.shape[0])
    tokens = reference.tokens.to(device)
    kept = reference.logits.shape[1]
    deltas: list[float] = []
    kls: list[torch.Tensor] = []
    agreed = 0
    kv_quantized = kv_quant not in (None, "none")
    written, read_back = KVCapture(), KVCapture()
    sqnr = linear_sqnr_db(model, reference.linears, device) if quant != "none" else {}
    with torch.inference_mode():
        if start_cache is None:
            start_cache = compat.initial_cache(model, batch)
        writing = capture_kv(start_cache, written, read=False) if kv_quantized else nullcontext()
        with writing:
            logits, cache = _forward(model, reference.prompt.to(device), start_cache)
        for i in range(tokens.shape[1]):
            if i > 0:  # teacher forcing: feed the dense run's token i - 1
                first = kv_quantized and i == 1
                reading = capture_kv(cache, read_back, read=True) if first else nullcontext()
                with reading:
                    logits, cache = _forward(model, tokens[:, i - 1 : i], cache)
            if i < kept:
                host = logits.to("cpu")
                deltas.append(float((host - reference.logits[:, i, :]).abs().max()))
                kls.append(kl_divergence(reference.logits[:, i, :], host))
            agreed += int((logits.argmax(dim=-1) == tokens[:, i]).sum())
    sqnr.update(kv_sqnr_db(written, read_back))
    spread = float(reference.logits.std())
    kl = torch.stack(kls) if kls else torch.zeros(1)
    return Accuracy(
        max_abs_logit_delta=max(deltas, default=0.0),
        top1_agreement_ratio=agreed / tokens.numel(),
        tokens=int(tokens.shape[1]),
        bound_max_abs_logit_delta=bound.logit_delta_std * spread,
        bound_top1_agreement_ratio=bound.top1_agreement_ratio,
        logit_delta_by_position=tuple(deltas),
        logits_kl=max(0.0, float(kl.mean())),
        logits_kl_max=max(0.0, float(kl.max())),
        sqnr_db=sqnr,
        sqnr_bound_weights_db=SQNR_BOUNDS_DB.get(quant),
        sqnr_bound_kv_db=SQNR_BOUNDS_DB.get(kv_quant or "none"),
    )
