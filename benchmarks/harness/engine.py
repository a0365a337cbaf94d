"""The owned generation loop: one prefill, then one decode step per further token, greedily.

N new tokens = 1 prefill + (N - 1) decode steps, and the final cache holds P + N - 1 positions
(the last token is produced but never fed back). With P = 4 and N = 3 the cache grows 4 -> 5 -> 6.

* `prefill_forward(ids, start_cache)`: the model-side prefill, exactly what `prefill_s` times:
  one forward from the start cache (`start_cache_for`, made untimed) over `[B, P]` ids already
  on the device with `use_cache=True`, logits for the last position only (`logits_to_keep=1`
  where the forward takes it, else a slice), argmax -> token 1. It times nothing, so a
  benchmark can time exactly it.
* `prefill(input_ids)`: the client's view around it: host ids -> H2D -> `prefill_forward`
  (synchronized: `prefill_s`) -> D2H of token 1 (`ttft_s`, client-observed), then the cache in
  the form the model takes back.
* `decode_step(token, cache, position)`: one forward of `[B, 1]` with the cache, argmax -> next
  token; it times nothing. `position` (the fed token's position: the cache's length) goes to
  forwards that take `cache_position` (4.x): no static cache is asked its length in a step.
* `client_generate(input_ids, N)`: the whole loop as a client runs it, and what the suite
  times: per token only the forward, the argmax, the syncs around the model-side step and the
  token's copy to the host. `step_s` are the N - 1 synchronized model-side decode steps; `gap_s`
  the client-observed gaps between successive token ids arriving on the host (tokens 2..N).
* `generate(input_ids, N, probe=None)`: the same loop with resources recorded at every phase
  boundary (KV bytes, memory counters and their per-phase peaks, CPU meter; `PhaseRecorder`),
  and `probe(cache)` there when given: the untimed pass the KV and state checks assert on. Its
  gaps and `e2e_s` include that bookkeeping, which is how its cost is measured
  (`bookkeeping_per_step_s`: its median gap minus the plain loop's); its `step_s`, `prefill_s`
  and `ttft_s` do not. Memory peaks are reset right before each phase (before the
  `before_prefill` sample, so no earlier work leaks into the prefill's peak), and nothing of one
  phase is kept into the next beyond the cache.
* `snapshot(cache)` / `restore(snapshot)`: a cache of exactly the snapshot's positions, so a
  decode step can be timed at a fixed context length round after round (a fresh copy, or for a
  static cache the same buffers rewritten in place).

It deliberately does not call `model.generate()`, sample (greedy only), pad, stop at EOS, build
models (`models.py`), or decide warmup and rounds (the benchmark suite does).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

import torch

from benchmarks.harness.cache.measure import measure_kv
from benchmarks.harness.device.devices import device_sync, timed
from benchmarks.harness.device.memory import PhaseRecorder, ResourceSample
from benchmarks.harness.errors import EngineError
from benchmarks.harness.model import compat

PHASES = ("before_prefill", "after_prefill", "after_decode")


def make_prompt(
    batch: int, prompt_len: int, vocab_size: int, seed: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Seeded synthetic prompt ids `[batch, prompt_len]` (int64) in `[0, vocab_size)`.

    Drawn on the CPU generator, so every device gets the same ids for the same seed. Keep the
    prompt on the host (the default) for `generate`, so `ttft_s` includes the H2D copy.
    """
    for name, value in (("batch", batch), ("prompt_len", prompt_len), ("vocab_size", vocab_size)):
        if value <= 0:
            raise EngineError(f"{name} must be a positive integer (got {value}); fix the matrix.")
    generator = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(0, vocab_size, (batch, prompt_len), generator=generator, dtype=torch.long)
    return ids.to(device)


@dataclass(frozen=True, eq=False)
class PrefillResult:
    """Output token 1 (`[B, 1]`, on the device), the prompt's cache, and the two prefill times."""

    next_token: torch.Tensor
    host_token: torch.Tensor  # the same ids as the client received them (on the host)
    cache: Any
    prefill_s: float  # model-side: synchronized `prefill_forward` (forward + argmax)
    ttft_s: float  # client-observed: host ids -> H2D -> prefill -> argmax -> D2H of token 1


@dataclass(frozen=True, eq=False)
class Generation:
    """One whole generation of N tokens as the client saw it; times in seconds."""

    generated_ids: torch.Tensor  # [B, N], on the host
    step_s: tuple[float, ...]  # N - 1 model-side synchronized decode steps
    gap_s: tuple[float, ...]  # N - 1 client-observed gaps between token ids on the host
    ttft_s: float
    e2e_s: float  # the whole call: >= ttft_s + sum(gap_s)
    prefill_s: float
    cache: Any  # the final cache: P + N - 1 positions


@dataclass(frozen=True, eq=False)
class DecodeResult(Generation):
    """A generation with resources recorded at every phase boundary (`Engine.generate`).

    Its gaps and `e2e_s` include that bookkeeping; the model-side `step_s` and `prefill_s` and
    `ttft_s` do not (nothing is recorded between the prompt leaving and token 1 arriving).
    """

    kv_bytes_after_prefill: int
    kv_bytes_per_step: tuple[int, ...]  # after each of the N - 1 decode steps
    samples: tuple[ResourceSample, ...]  # 1 before_prefill + 1 after_prefill + N - 1 after_decode
    memory_labels: Mapping[str, str]
    probed: tuple[Any, ...] = ()  # `probe(cache)` after the prefill and after each step

    @property
    def peak_allocated_bytes(self) -> int | None:
        """The largest phase peak of allocated bytes (None where the device has no counter)."""
        return _max_or_none(s.peak_allocated_bytes for s in self.samples)

    @property
    def peak_reserved_bytes(self) -> int | None:
        """The largest phase peak of reserved / driver bytes (None where there is no counter)."""
        return _max_or_none(s.peak_reserved_bytes for s in self.samples)

    @property
    def peak_rss_bytes(self) -> int:
        """The largest RSS sampled at a phase boundary (a lower bound of the true peak)."""
        return max(s.rss_bytes for s in self.samples)


def _same_device(actual: torch.device, wanted: torch.device) -> bool:
    # "cuda" names the current CUDA device: accept any index for it.
    return actual.type == wanted.type and (wanted.index is None or actual.index == wanted.index)


def _max_or_none(values: Any) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


@dataclass(frozen=True, eq=False)
class CacheSnapshot:
    """A cache frozen at `seq_len` positions, restorable any number of times."""

    cache: Any
    seq_len: int
    kv_bytes: int
    # The cache a restore writes into, when its buffers have fixed addresses (a static cache:
    # compiled graphs and CUDA graphs keep them); None: each restore is a fresh copy.
    live: Any = None


class Engine:
    """Greedy prefill/decode for one model already on `device`, in eval mode."""

    def __init__(self, model: Any, device: torch.device) -> None:
        if model.training:
            raise EngineError(
                f"{type(model).__name__} is in training mode (dropout would make greedy decoding "
                "random); call model.eval() before building the Engine."
            )
        parameter = next(model.parameters(), None)
        if parameter is not None and not _same_device(parameter.device, device):
            raise EngineError(
                f"{type(model).__name__} is on {parameter.device} but the Engine was given "
                f"{device}; move the model with model.to(device) first."
            )
        unsupported = compat.unsupported_reason(model.config)
        if unsupported is not None:
            raise EngineError(f"{type(model).__name__}: {unsupported}.")
        self.model = model
        self.device = device
        self._cache_kwarg = compat.cache_kwarg(model)
        self._logits_kwarg = compat.logits_kwarg(model)
        self._position_kwarg = compat.position_kwarg(model)
        self.max_positions = compat.max_positions(model.config)
        # The cache a prefill starts from, given the batch size (`runmode.configure_engine` sets
        # it per cell, e.g. a StaticCache); None: the model's own (`compat.initial_cache`).
        self.start_cache: Callable[[int], Any] | None = None
        self.start_cache_cell: str | None = None  # the cell `start_cache` was made for

    # --- the two phases ----------------------------------------------------------------------

    def start_cache_for(self, batch: int) -> Any:
        """The cache a prefill of `batch` sequences starts from, made before any timer starts.

        The cell's (`start_cache`: a static cache reset in place, an empty quantized cache) or
        the model's own (`compat.initial_cache`, usually None: the forward makes it). A static
        reset is a few kernels per layer (72 for Qwen2.5-0.5B) that `prefill_s` must not hold:
        a server keeps its cache slots ready, and an eager dynamic cell times no such work.
        """
        make = self.start_cache
        return compat.initial_cache(self.model, batch) if make is None else make(batch)

    def to_device(self, ids: torch.Tensor) -> torch.Tensor:
        """Host ids on the model's device: the H2D copy `prefill` makes inside the client's
        time, which a benchmark of `prefill_forward` makes before its timer starts."""
        return ids.to(self.device)

    def prefill_forward(self, ids: torch.Tensor, start_cache: Any) -> tuple[torch.Tensor, Any]:
        """Model-side prefill of ids `[B, P]` already on the device: token 1 `[B, 1]`, raw cache.

        Exactly what `prefill_s` times (the caller synchronizes): one forward from
        `start_cache` (`start_cache_for`; None: the model makes its own), the argmax.
        """
        kwargs = self._prefill_kwargs()
        kwargs.update(self._position_kwargs(0, int(ids.shape[-1]), ids.device))
        if start_cache is not None:
            kwargs[self._cache_kwarg] = start_cache
        with torch.inference_mode():
            outputs = self.model(input_ids=ids, use_cache=True, **kwargs)
            next_token = outputs.logits[:, -1, :].argmax(dim=-1, keepdim=True)  # [B, 1]
        return next_token, compat.output_cache(outputs)

    def prefill(self, input_ids: torch.Tensor) -> PrefillResult:
        """Run the prompt `[B, P]` once; return output token 1, the cache and both times."""
        start_cache = self.start_cache_for(int(input_ids.shape[0]))
        device_sync(self.device)  # a static reset's kernels are done before the client starts
        client_start_s = time.perf_counter()
        ids = self.to_device(input_ids)  # H2D (a no-op when already on the device)
        with timed(self.device) as watch:
            next_token, raw_cache = self.prefill_forward(ids, start_cache)
        del start_cache  # the raw cache holds it (or the model's own replaced it)
        host_token = next_token.to("cpu")  # D2H: the first token id reaches the client
        ttft_s = time.perf_counter() - client_start_s
        return PrefillResult(
            next_token=next_token,
            host_token=host_token,
            cache=compat.adopt_cache(self.model, raw_cache),
            prefill_s=watch.elapsed_s,
            ttft_s=ttft_s,
        )

    def decode_step(
        self, token: torch.Tensor, cache: Any, position: int
    ) -> tuple[torch.Tensor, Any]:
        """Feed one token `[B, 1]` at `position` (the positions the cache has seen) with the
        cache; return the next token `[B, 1]` and the cache."""
        kwargs: dict[str, Any] = {self._cache_kwarg: cache}
        kwargs.update(self._position_kwargs(position, int(token.shape[-1]), token.device))
        with torch.inference_mode():
            outputs = self.model(input_ids=token, use_cache=True, **kwargs)
            next_token = outputs.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        return next_token, compat.output_cache(outputs)

    def _position_kwargs(self, start: int, length: int, device: torch.device) -> dict[str, Any]:
        # What `generate` hands a 4.x forward: the new tokens' positions, made on the device (no
        # host-to-device copy), an ordinary tensor on every call (dynamo guards on that).
        if self._position_kwarg is None:
            return {}
        return {self._position_kwarg: torch.arange(start, start + length, device=device)}

    def _prefill_kwargs(self) -> dict[str, Any]:
        # Only the last position's logits are needed (as `generate` does); models without the
        # kwarg compute all P positions and the caller slices.
        return {} if self._logits_kwarg is None else {self._logits_kwarg: 1}

    # --- the whole loop ----------------------------------------------------------------------

    def check_request(self, prompt_len: int, new_tokens: int) -> None:
        """Raise `EngineError` unless N >= 1 and the final P + N - 1 positions fit the model.

        The last token is produced but never fed back, so the model sees P + N - 1 positions
        (the same rule the suite uses to skip cells at collection).
        """
        if new_tokens <= 0:
            raise EngineError(
                f"new_tokens must be at least 1 (got {new_tokens}): prefill already produces "
                "token 1; fix `new_tokens` in the matrix."
            )
        final_positions = prompt_len + new_tokens - 1
        if self.max_positions is not None and final_positions > self.max_positions:
            raise EngineError(
                f"prompt_len + new_tokens - 1 = {prompt_len} + {new_tokens} - 1 = "
                f"{final_positions} positions exceed the model's {self.max_positions} "
                "(max_position_embeddings); lower prompt_len or new_tokens in the matrix, or "
                "exclude this cell."
            )

    def client_generate(self, input_ids: torch.Tensor, new_tokens: int) -> Generation:
        """N tokens greedily, as a client would: what the suite times (`test_generate`).

        Per token only the forward, the argmax, the syncs that bracket the model-side step and
        the token's copy to the host: no KV count, memory counter or CPU meter (`generate`).
        """
        return self._loop(input_ids, new_tokens, None)

    def generate(
        self, input_ids: torch.Tensor, new_tokens: int, probe: Callable[[Any], Any] | None = None
    ) -> DecodeResult:
        """N tokens greedily with every phase boundary recorded: the untimed asserting pass.

        `client_generate`'s loop, plus KV bytes, memory counters and CPU time after the prefill
        and every step (the cost shows in its gaps: `bookkeeping_per_step_s`); `probe(cache)`
        at the same points, after the recorder, gives `probed` (a static cache's used bytes).
        """
        recorder = PhaseRecorder(self.device)
        probed: list[Any] = []
        sink = None if probe is None else (lambda cache: probed.append(probe(cache)))
        run = self._loop(input_ids, new_tokens, recorder, sink)
        kv_bytes = [s.kv_bytes for s in recorder.samples[1:]]
        return DecodeResult(
            **{f.name: getattr(run, f.name) for f in fields(Generation)},
            kv_bytes_after_prefill=kv_bytes[0],
            kv_bytes_per_step=tuple(kv_bytes[1:]),
            samples=tuple(recorder.samples),
            memory_labels=recorder.monitor.labels,
            probed=tuple(probed),
        )

    def _loop(
        self,
        input_ids: torch.Tensor,
        new_tokens: int,
        recorder: PhaseRecorder | None,
        probe: Callable[[Any], None] | None = None,
    ) -> Generation:
        if input_ids.dim() != 2:
            raise EngineError(
                f"input_ids must be [batch, prompt_len] (got shape {tuple(input_ids.shape)}); "
                "build prompts with make_prompt."
            )
        self.check_request(int(input_ids.shape[-1]), new_tokens)
        call_start_s = time.perf_counter()
        if recorder is not None:
            recorder.begin()
        prefill = self.prefill(input_ids)
        arrived_s = time.perf_counter()  # token 1 is on the host (~ client start + ttft_s)
        token, cache = prefill.next_token, prefill.cache
        host_tokens = [prefill.host_token]
        ttft_s, prefill_s = prefill.ttft_s, prefill.prefill_s
        del prefill  # a legacy-tuple cache must not outlive its replacement in the steps below
        if recorder is not None:
            recorder.end_phase("after_prefill", 0, partial(self._kv_bytes, cache))
        if probe is not None:
            probe(cache)

        step_s: list[float] = []
        gap_s: list[float] = []
        prompt_len = int(input_ids.shape[-1])
        for step in range(1, new_tokens):
            if recorder is not None:
                recorder.start_phase()
            with timed(self.device) as watch:  # token `step` sits at position P + step - 1
                token, cache = self.decode_step(token, cache, prompt_len + step - 1)
            host_tokens.append(token.to("cpu"))  # D2H: token `step + 1` reaches the client
            now_s = time.perf_counter()
            gap_s.append(now_s - arrived_s)  # the recorder's bookkeeping, if any, included
            arrived_s = now_s
            step_s.append(watch.elapsed_s)
            if recorder is not None:
                recorder.end_phase("after_decode", step, partial(self._kv_bytes, cache))
            if probe is not None:
                probe(cache)
        e2e_s = time.perf_counter() - call_start_s
        return Generation(
            generated_ids=torch.cat(host_tokens, dim=-1),
            step_s=tuple(step_s),
            gap_s=tuple(gap_s),
            ttft_s=ttft_s,
            e2e_s=e2e_s,
            prefill_s=prefill_s,
            cache=cache,
        )

    def _kv_bytes(self, cache: Any) -> int:
        # One named call per boundary, so a test can inject a known delay into the bookkeeping.
        return measure_kv(cache).logical_bytes

    # --- fixed-context decode rounds -----------------------------------------------------------

    def snapshot(self, cache: Any) -> CacheSnapshot:
        """Freeze `cache` (typically right after prefill) so it can be restored between rounds.

        On an accelerator the snapshot lives on the host, so a timed round's memory peak holds
        only the round's own cache, not a spare copy kept for the next round.
        """
        host = None if self.device.type == "cpu" else torch.device("cpu")
        return CacheSnapshot(
            cache=compat.copy_cache(cache, host),
            seq_len=compat.cache_seq_length(cache),
            kv_bytes=measure_kv(cache).logical_bytes,
            live=cache if compat.has_static_addresses(cache) else None,
        )

    def restore(self, snapshot: CacheSnapshot) -> Any:
        """A cache with the snapshot's positions and KV bytes; the snapshot stays reusable.

        A cache with fixed-address buffers is the same object every time, rewritten in place
        (`compat.copy_into`): a new one would make a compiled step recompile or re-record.
        """
        device = None if self.device.type == "cpu" else self.device
        if snapshot.live is not None:
            compat.copy_into(snapshot.live, snapshot.cache)
            cache = snapshot.live
        else:
            cache = compat.copy_cache(snapshot.cache, device)
        restored = compat.cache_seq_length(cache)
        if restored != snapshot.seq_len:  # a bug in copy_cache, not a user error
            raise RuntimeError(
                f"restored cache has {restored} positions, expected {snapshot.seq_len}"
            )
        return cache
