"""How much the owned engine costs over a bare forward loop and over HF `model.generate`.

Four measurements on the same model, prompt and N, each synchronized (`devices.timed`):

* **engine step**: `Engine.decode_step` (forward + greedy argmax + cache hand-over), per step;
* **bare step**: `model(input_ids=tok, <cache kwarg>=cache, use_cache=True)` + argmax, per step,
  with the same sync and nothing else (no engine bookkeeping);
* **engine generate**: the whole owned loop `Engine.generate(ids, N)` (with its instrumentation)
  timed wall-clock; **HF generate**: `model.generate(max_new_tokens=N, min_new_tokens=N,
  do_sample=False)` timed wall-clock. Each gives a per-token time by the same method:
  `(total - prefill) / (N - 1)`, where `prefill` is the median of a separately timed bare
  prefill forward (`[B, P]`, last-position logits, argmax). Both loops produce token 1 by a
  prefill and tokens 2..N by N - 1 decode steps, so subtracting one prefill leaves the decode
  part; any prefill-side overhead of either loop (input prep, logits processors) lands in its
  per-token figure, which is the point.

Ratios: `overhead_vs_bare = engine_step_s / bare_step_s` and `overhead_vs_hf_generate =
engine_generate_token_s / hf_generate_token_s` (1.0 = same cost; above 1 = ours is slower).
Drift is cancelled by interleaving: every round runs all four measurements, in forward order on
even rounds and reversed on odd ones (ABCD DCBA ...), and the figures are medians over rounds.
With N = 1 there is no decode step: every per-step/per-token figure and ratio is None.

This module measures; it does not decide rounds or record history (benchmarks/test_overhead.py
does, into `extra_info`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from benchmarks.harness import compat
from benchmarks.harness.devices import timed
from benchmarks.harness.engine import Engine
from benchmarks.harness.errors import EngineError


@dataclass(frozen=True)
class OverheadResult:
    """Medians over rounds, in seconds, and the two ratios (None where N = 1)."""

    new_tokens: int
    rounds: int
    prefill_s: float
    engine_step_s: float | None
    bare_step_s: float | None
    engine_generate_token_s: float | None
    hf_generate_token_s: float | None
    overhead_vs_bare: float | None
    overhead_vs_hf_generate: float | None

    def to_extra_info(self) -> dict[str, float | int | None]:
        """Plain JSON fields for a benchmark's `extra_info`."""
        # `rounds`, `new_tokens` and `prefill_s` already mean something else in extra_info.
        renamed = {"rounds": "overhead_rounds", "new_tokens": "overhead_new_tokens"}
        renamed["prefill_s"] = "overhead_prefill_s"
        return {renamed.get(k, k): v for k, v in asdict(self).items()}


def measure_overhead(
    model: Any,
    device: torch.device,
    input_ids: torch.Tensor,
    new_tokens: int,
    *,
    rounds: int = 5,
    warmup_rounds: int = 1,
) -> OverheadResult:
    """Interleaved engine / bare / engine-generate / HF-generate measurements (module docstring).

    `input_ids` is `[B, P]` on any device; `model` is on `device` in eval mode.
    `warmup_rounds` full interleaved rounds run first and are discarded. Raises EngineError for
    new_tokens < 1 or rounds < 1.
    """
    if new_tokens < 1 or rounds < 1 or warmup_rounds < 0:
        raise EngineError(
            "overhead needs new_tokens >= 1, rounds >= 1 and warmup_rounds >= 0 "
            f"(got {new_tokens}, {rounds}, {warmup_rounds})."
        )
    engine = Engine(model, device)
    ids = input_ids.to(device)
    bare = BareLoop(model, device)
    prefill_s: list[float] = []
    engine_steps: list[float] = []
    bare_steps: list[float] = []
    engine_totals: list[float] = []
    hf_totals: list[float] = []

    def engine_steps_round() -> None:
        prefill = engine.prefill(ids)
        token, cache = prefill.next_token, prefill.cache
        durations = _steps(engine.decode_step, token, cache, new_tokens, device)
        engine_steps.append(statistics.median(durations))

    def bare_round() -> None:
        elapsed, token, cache = bare.prefill(ids)
        prefill_s.append(elapsed)
        if new_tokens > 1:
            durations = _steps(bare.decode_step, token, cache, new_tokens, device)
            bare_steps.append(statistics.median(durations))

    def engine_generate_round() -> None:
        with timed(device) as watch:
            engine.generate(ids, new_tokens)
        engine_totals.append(watch.elapsed_s)

    def hf_round() -> None:
        with timed(device) as watch:
            hf_generate(model, ids, new_tokens)
        hf_totals.append(watch.elapsed_s)

    order: list[Callable[[], None]] = [bare_round]
    if new_tokens > 1:
        order = [engine_steps_round, bare_round, engine_generate_round, hf_round]
    for r in range(warmup_rounds + rounds):
        if r == warmup_rounds:  # warmup rounds pay first-call costs; drop what they recorded
            for recorded in (prefill_s, engine_steps, bare_steps, engine_totals, hf_totals):
                recorded.clear()
        for measure in order if r % 2 == 0 else reversed(order):
            measure()

    prefill_median = statistics.median(prefill_s)
    if new_tokens == 1:
        return OverheadResult(1, rounds, prefill_median, None, None, None, None, None, None)
    engine_step = statistics.median(engine_steps)
    bare_step = statistics.median(bare_steps)
    engine_token = per_token_s(statistics.median(engine_totals), prefill_median, new_tokens)
    hf_token = per_token_s(statistics.median(hf_totals), prefill_median, new_tokens)
    return OverheadResult(
        new_tokens=new_tokens,
        rounds=rounds,
        prefill_s=prefill_median,
        engine_step_s=engine_step,
        bare_step_s=bare_step,
        engine_generate_token_s=engine_token,
        hf_generate_token_s=hf_token,
        overhead_vs_bare=ratio(engine_step, bare_step),
        overhead_vs_hf_generate=ratio(engine_token, hf_token),
    )


def per_token_s(total_s: float, prefill_s: float, new_tokens: int) -> float | None:
    """`(total - prefill) / (N - 1)`; None for N < 2 or a non-positive difference.

    A non-positive difference means the decode part drowned in noise: a ratio built on it
    would be meaningless, so it is None rather than clamped.
    """
    if new_tokens < 2:
        return None
    decode_s = total_s - prefill_s
    return decode_s / (new_tokens - 1) if decode_s > 0 else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, None when either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def hf_generate(model: Any, input_ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """HF greedy generation of exactly `new_tokens` tokens (EOS cannot stop it early)."""
    from transformers import GenerationConfig  # noqa: PLC0415 - keep import cost off module load

    config = model.config
    pad = getattr(config, "pad_token_id", None)
    eos = getattr(config, "eos_token_id", None)
    generation = GenerationConfig(  # type: ignore[no-untyped-call]
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=pad if pad is not None else (eos if isinstance(eos, int) else 0),
        eos_token_id=eos,
    )
    with torch.inference_mode():
        out: torch.Tensor = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            generation_config=generation,
        )
    return out


def _steps(
    step: Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]],
    token: torch.Tensor,
    cache: Any,
    new_tokens: int,
    device: torch.device,
) -> list[float]:
    """N - 1 synchronized decode steps from a fresh prefill state; their durations."""
    durations: list[float] = []
    for _ in range(new_tokens - 1):
        with timed(device) as watch:
            token, cache = step(token, cache)
        durations.append(watch.elapsed_s)
    return durations


class BareLoop:
    """The model's forward and an argmax, nothing else: the floor the engine is compared to."""

    def __init__(self, model: Any, device: torch.device) -> None:
        self.model = model
        self.device = device
        self.cache_kwarg = compat.cache_kwarg(model)
        logits_kwarg = compat.logits_kwarg(model)
        self.prefill_kwargs = {} if logits_kwarg is None else {logits_kwarg: 1}

    def prefill(self, ids: torch.Tensor) -> tuple[float, torch.Tensor, Any]:
        with timed(self.device) as watch, torch.inference_mode():
            out = self.model(input_ids=ids, use_cache=True, **self.prefill_kwargs)
            token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        # Same cache form the engine hands on (4.46 legacy tuples become a DynamicCache once),
        # so the comparison is about per-step work, not a per-step tuple conversion.
        return watch.elapsed_s, token, compat.adopt_cache(self.model, compat.output_cache(out))

    def decode_step(self, token: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]:
        with torch.inference_mode():
            out = self.model(input_ids=token, use_cache=True, **{self.cache_kwarg: cache})
            next_token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        return next_token, compat.output_cache(out)
