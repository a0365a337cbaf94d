"""How much the owned engine costs over a bare forward loop and over HF `model.generate`.

Four measurements on the same model, prompt and N, each bracketed by a device sync
(`devices.timed`):

* **bare prefill**: one forward over `[B, P]` (last-position logits) + argmax;
* **bare loop**: that prefill and N - 1 decode steps, `model(...)` + argmax each, tokens kept on
  the device and copied to the host once at the end: nothing but the model's own work;
* **engine loop**: the whole instrumented `Engine.generate(ids, N)`, exactly what
  `test_generate` times and users of phasebench run: per-step syncs for the model-side step
  times, each token's copy to the host, the KV measurement, memory counters and CPU meter
  between tokens;
* **HF generate**: `model.generate(max_new_tokens=N, min_new_tokens=N, do_sample=False)`.

Each loop gives a per-token time by the same method, `(loop - prefill) / (N - 1)`, with
`prefill` the median bare prefill: both make token 1 with a prefill and tokens 2..N with N - 1
steps, so subtracting one prefill leaves the decode part, and any prefill-side extra of a loop
(input prep, logits processors, the engine's bookkeeping after token 1) lands in its per-token
figure, which is the point. Ratios: `overhead_vs_bare = engine_token_s / bare_token_s` and
`overhead_vs_hf_generate = engine_token_s / hf_token_s` (1.0 = same cost; above 1 = ours is
slower). A per-step delay d in the engine's bookkeeping moves `engine_generate_token_s` by about
d (N bookkeeping points over N - 1 tokens) and the ratio by d / bare_token_s.

Every loop runs once untimed first (HF `generate` pays first-call costs of its own: generation
config, logits processors, cache setup, which the cell's warmup never touched). Drift is
cancelled by interleaving: every round runs all four measurements, forward on even rounds and
reversed on odd ones (ABCD DCBA ...), and the figures are medians over rounds. With N = 1 there
is no decode step: every per-token figure and ratio is None.

This module measures; it does not decide rounds or record history (benchmarks/test_overhead.py
does, into `extra_info`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from benchmarks.harness.device.devices import timed
from benchmarks.harness.engine import Engine
from benchmarks.harness.errors import EngineError
from benchmarks.harness.model import compat


@dataclass(frozen=True)
class OverheadResult:
    """Medians over rounds, in seconds, and the two ratios (None where N = 1)."""

    new_tokens: int
    rounds: int
    prefill_s: float
    bare_generate_token_s: float | None
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
    warmup_rounds: int = 0,
) -> OverheadResult:
    """Interleaved bare prefill / bare loop / engine loop / HF generate (module docstring).

    `input_ids` is `[B, P]` on any device; `model` is on `device` in eval mode. Every loop runs
    once untimed first; `warmup_rounds` further interleaved rounds run and are discarded.
    Raises EngineError for new_tokens < 1 or rounds < 1.
    """
    if new_tokens < 1 or rounds < 1 or warmup_rounds < 0:
        raise EngineError(
            "overhead needs new_tokens >= 1, rounds >= 1 and warmup_rounds >= 0 "
            f"(got {new_tokens}, {rounds}, {warmup_rounds})."
        )
    engine = Engine(model, device)
    ids = input_ids.to(device)
    host_ids = input_ids.to("cpu")  # the engine's client starts from host ids, as in the suite
    bare = BareLoop(model, device)
    recorded: dict[str, list[float]] = {"prefill": [], "bare": [], "engine": [], "hf": []}

    def timed_call(name: str, call: Callable[[], object]) -> Callable[[], None]:
        def measure() -> None:
            with timed(device) as watch:
                call()
            recorded[name].append(watch.elapsed_s)

        return measure

    order = [timed_call("prefill", lambda: bare.prefill(ids))]
    if new_tokens > 1:
        order += [
            timed_call("bare", lambda: bare.generate(ids, new_tokens)),
            timed_call("engine", lambda: engine.generate(host_ids, new_tokens)),
            timed_call("hf", lambda: hf_generate(model, ids, new_tokens)),
        ]
    for measure in order:  # first calls: HF generate's own setup costs are not timed
        measure()
    for r in range(warmup_rounds + rounds):
        if r == warmup_rounds:  # the untimed first calls and warmup rounds are dropped
            for values in recorded.values():
                values.clear()
        for measure in order if r % 2 == 0 else reversed(order):
            measure()

    prefill_median = statistics.median(recorded["prefill"])
    if new_tokens == 1:
        return OverheadResult(1, rounds, prefill_median, None, None, None, None, None)
    tokens = {
        name: per_token_s(statistics.median(recorded[name]), prefill_median, new_tokens)
        for name in ("bare", "engine", "hf")
    }
    return OverheadResult(
        new_tokens=new_tokens,
        rounds=rounds,
        prefill_s=prefill_median,
        bare_generate_token_s=tokens["bare"],
        engine_generate_token_s=tokens["engine"],
        hf_generate_token_s=tokens["hf"],
        overhead_vs_bare=ratio(tokens["engine"], tokens["bare"]),
        overhead_vs_hf_generate=ratio(tokens["engine"], tokens["hf"]),
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


class BareLoop:
    """The model's forward and an argmax, nothing else: the floor the engine is compared to."""

    def __init__(self, model: Any, device: torch.device) -> None:
        self.model = model
        self.device = device
        self.cache_kwarg = compat.cache_kwarg(model)
        logits_kwarg = compat.logits_kwarg(model)
        self.prefill_kwargs = {} if logits_kwarg is None else {logits_kwarg: 1}

    def prefill(self, ids: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """One forward over `[B, P]` + argmax: token 1 `[B, 1]` and the cache (untimed)."""
        with torch.inference_mode():
            out = self.model(input_ids=ids, use_cache=True, **self.prefill_kwargs)
            token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        # Same cache form the engine hands on (4.46 legacy tuples become a DynamicCache once),
        # so the comparison is about per-step work, not a per-step tuple conversion.
        return token, compat.adopt_cache(self.model, compat.output_cache(out))

    def decode_step(self, token: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]:
        """One forward of `[B, 1]` with the cache + argmax, nothing else."""
        with torch.inference_mode():
            out = self.model(input_ids=token, use_cache=True, **{self.cache_kwarg: cache})
            next_token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        return next_token, compat.output_cache(out)

    def generate(self, ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
        """N tokens: the prefill and N - 1 steps, tokens on the device, one copy to the host."""
        token, cache = self.prefill(ids)
        tokens = [token]
        for _ in range(new_tokens - 1):
            token, cache = self.decode_step(token, cache)
            tokens.append(token)
        return torch.cat(tokens, dim=-1).to("cpu")
