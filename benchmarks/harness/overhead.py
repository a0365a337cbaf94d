"""What the owned engine costs over a bare forward loop and over HF `model.generate`.

Five measurements on the same model, prompt and N, each bracketed by a device sync
(`devices.timed`):

* **bare prefill**: one forward over `[B, P]` (last-position logits) + argmax;
* **bare loop**: that prefill and N - 1 decode steps, `model(...)` + argmax each, and after each
  token the same device sync and host copy of the token as the engine's client loop: the model's
  own work plus what any client pays to see each token, nothing else;
* **engine loop**: `Engine.client_generate(ids, N)`, exactly what `test_generate` times: the
  model-side step's timer (a sync before it) on top of the bare loop's work;
* **instrumented loop**: `Engine.generate(ids, N)`, the untimed pass the suite asserts KV bytes
  on: the engine loop plus KV bytes, memory counters and CPU meter at every phase boundary;
* **HF generate**: `model.generate(max_new_tokens=N, min_new_tokens=N, do_sample=False)`.

Each loop gives a per-token time by the same method, `(loop - prefill) / (N - 1)`, with
`prefill` the median bare prefill: each makes token 1 with a prefill and tokens 2..N with N - 1
steps, so subtracting one prefill leaves the decode part, and any prefill-side extra of a loop
(input prep, logits processors, bookkeeping after token 1) lands in its per-token figure.
Ratios: `overhead_vs_bare = engine_token_s / bare_token_s` (like with like: both loops sync and
copy every token to the host, so it is about 1 unless the engine adds work) and
`overhead_vs_hf_generate = engine_token_s / hf_token_s` (1.0 = same cost; above 1 = ours is
slower). `bookkeeping_per_step_s` is measured, not estimated: the median client gap of the
instrumented loop minus that of the engine loop, pooled over the rounds' N - 1 gaps each: what
recording resources at one step boundary adds to a token's gap, kept out of every timed figure.

Every loop runs once untimed first (HF `generate` pays first-call costs of its own: generation
config, logits processors, cache setup, which the cell's warmup never touched). Drift is
cancelled by interleaving: every round runs all measurements, forward on even rounds and
reversed on odd ones (ABCDE EDCBA ...), and the figures are medians over rounds. With N = 1
there is no decode step: every per-token figure, ratio and the bookkeeping cost are None.

This module measures; it does not decide rounds or record history (benchmarks/test_overhead.py
does, into `extra_info`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from benchmarks.harness.device.devices import device_sync, timed
from benchmarks.harness.engine import Engine, Generation
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
    instrumented_generate_token_s: float | None = None
    bookkeeping_per_step_s: float | None = None

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
    """Interleaved bare prefill / bare, engine, instrumented loops / HF generate (module doc).

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
    recorded: dict[str, list[float]] = {n: [] for n in ("prefill", *_LOOPS)}
    gaps: dict[str, list[float]] = {"engine": [], "instrumented": []}

    def timed_call(name: str, call: Callable[[], object]) -> Callable[[], None]:
        def measure() -> None:
            with timed(device) as watch:
                out = call()
            recorded[name].append(watch.elapsed_s)
            if isinstance(out, Generation):
                gaps[name].extend(out.gap_s)

        return measure

    order = [timed_call("prefill", lambda: bare.prefill(ids))]
    if new_tokens > 1:
        order += [
            timed_call("bare", lambda: bare.generate(ids, new_tokens)),
            timed_call("engine", lambda: engine.client_generate(host_ids, new_tokens)),
            timed_call("instrumented", lambda: engine.generate(host_ids, new_tokens)),
            timed_call("hf", lambda: hf_generate(model, ids, new_tokens)),
        ]
    for measure in order:  # first calls: HF generate's own setup costs are not timed
        measure()
    for r in range(warmup_rounds + rounds):
        if r == warmup_rounds:  # the untimed first calls and warmup rounds are dropped
            for values in (*recorded.values(), *gaps.values()):
                values.clear()
        for measure in order if r % 2 == 0 else reversed(order):
            measure()

    prefill_median = statistics.median(recorded["prefill"])
    if new_tokens == 1:
        return OverheadResult(1, rounds, prefill_median, None, None, None, None, None)
    tokens = {
        name: per_token_s(statistics.median(recorded[name]), prefill_median, new_tokens)
        for name in _LOOPS
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
        instrumented_generate_token_s=tokens["instrumented"],
        bookkeeping_per_step_s=bookkeeping_per_step_s(gaps["instrumented"], gaps["engine"]),
    )


_LOOPS = ("bare", "engine", "instrumented", "hf")


def bookkeeping_per_step_s(
    instrumented_gap_s: Sequence[float], plain_gap_s: Sequence[float]
) -> float | None:
    """Median client gap with per-step bookkeeping minus the median without; None without gaps.

    The gaps are per-token times of two runs of the same loop, with and without the resource
    recording at each step boundary, so the difference is what that recording costs per step,
    measured. It may come out slightly negative on a noisy machine: reported as measured.
    """
    if not instrumented_gap_s or not plain_gap_s:
        return None
    return statistics.median(instrumented_gap_s) - statistics.median(plain_gap_s)


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
    """The model's forward and an argmax, plus the sync and host copy every client pays per token.

    The floor the engine is compared to: it does per token what `Engine.client_generate` does
    (forward, argmax, device sync, the token's copy to the host) minus the step timer, so the
    ratio compares like with like. A loop that kept tokens on the device would let the GPU run
    ahead of Python, and the ratio would measure that lost overlap, not the engine's cost.
    """

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
        """N tokens: the prefill and N - 1 steps, each token synced and copied to the host."""
        token, cache = self.prefill(ids)
        device_sync(self.device)
        tokens = [token.to("cpu")]
        for _ in range(new_tokens - 1):
            token, cache = self.decode_step(token, cache)
            device_sync(self.device)
            tokens.append(token.to("cpu"))
        return torch.cat(tokens, dim=-1)
