"""The owned loop on MLX: the same phases as `benchmarks.harness.engine`, run as mlx-lm runs them.

`MlxEngine` has the torch `Engine`'s methods and results (`PrefillResult`, `Generation`,
`DecodeResult`, `CacheSnapshot`), so the suite's test functions time it unchanged:

* `prefill_forward(ids, cache)`: the prompt as mlx-lm's `generate_step` processes it: the first
  P - 1 tokens in chunks of `PREFILL_STEP` (2,048) with only the cache evaluated (their logits
  are never computed: MLX is lazy) and MLX's buffer cache cleared after each, then the last
  token's forward, its logits and the greedy argmax. Token 1 comes from logits of the last
  position only, as torch's `logits_to_keep=1`. Ends with `fence` (`mx.eval` of the token and
  every cache array): it returns only once the work is done.
* `decode_step(token, cache, position)`: one forward of `[B, 1]` with the cache, argmax, fence.
* `prefill`, `client_generate`, `generate`: the client's view (host ids in, token ids to the host
  as numpy) and the recorded pass (`generate`: allocated and used KV bytes, MLX's memory
  counters and CPU time at every phase boundary), as the torch engine's.
* `snapshot` / `restore`: a cache frozen at P positions on the host (numpy, outside MLX's
  allocator and its peak), restored as new MLX arrays evaluated before the round, so a timed
  step updates arrays only it holds, in place, as in mlx-lm's own loop; a restore that aliased
  the snapshot would add a copy of the whole cache to every step.

The caches are mlx-lm's (`make_prompt_cache`, or `QuantizedKVCache` per layer for `kv_quant`
mlx4 / mlx8). It deliberately does not sample, stop at EOS, or use mlx-lm's `generate` (whose
`async_eval` overlaps a step with the next one's graph building: not one step's time).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

import numpy as np
import torch

from benchmarks.harness.device.memory import PhaseRecorder
from benchmarks.harness.engine import CacheSnapshot, DecodeResult, Generation, PrefillResult
from benchmarks.harness.errors import EngineError
from benchmarks.harness.mlx.measure import MeasuredMlxKV, measure
from benchmarks.harness.mlx.runtime import MlxCounters, fence, mx_device, mx_module

# mlx-lm's `generate_step(prefill_step_size=2048)`.
PREFILL_STEP = 2048


def prefill_updates(prompt_len: int) -> list[int]:
    """Positions each prefill forward adds to the cache: chunks of the first P - 1, then 1."""
    step = PREFILL_STEP  # read at call time (a test shortens it to chunk a short prompt)
    chunks: list[int] = []
    rest = prompt_len - 1
    while rest > 0:
        chunks.append(min(step, rest))
        rest -= chunks[-1]
    return [*chunks, 1]


# numpy holds a snapshot's arrays as unsigned ints of the same width (`_to_host`).
_UINTS = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


@dataclass(frozen=True)
class _HostArray:
    """An MLX array's bytes on the host, and its MLX dtype."""

    data: np.ndarray[Any, Any]
    dtype: Any


@dataclass(frozen=True, eq=False)
class MlxDecodeResult(DecodeResult):
    """A recorded generation with the used KV bytes beside the allocated ones, per boundary."""

    kv_used_bytes: tuple[int, ...] = ()  # after prefill, then after each decode step


def _state(cache: list[Any]) -> list[Any]:
    return [layer.state for layer in cache]


class MlxEngine:
    """Greedy prefill/decode of an mlx-lm model on one MLX device."""

    def __init__(self, model: Any, device: torch.device, max_positions: int | None) -> None:
        self.model = model
        self.device = device
        self.mx_device = mx_device(device)
        self.max_positions = max_positions
        # The cell's KV quantization (`configure`): None, or (bits, group size).
        self.kv_bits: tuple[int, int] | None = None
        self.start_cache_cell: str | None = None
        self._mx = mx_module()

    def configure(self, cell_id: str, kv_bits: tuple[int, int] | None) -> None:
        """The cell whose caches `start_cache_for` makes (a quantized cache or mlx-lm's own)."""
        self.start_cache_cell, self.kv_bits = cell_id, kv_bits

    def start_cache_for(self, batch: int) -> list[Any]:
        """A new empty cache (the batch is the arrays' first dim, set by the first forward)."""
        del batch
        from mlx_lm.models import cache as caches  # noqa: PLC0415 - optional dependency

        if self.kv_bits is None:
            made: list[Any] = caches.make_prompt_cache(self.model)
            return made
        bits, group_size = self.kv_bits
        return [
            caches.QuantizedKVCache(group_size=group_size, bits=bits) for _ in self.model.layers
        ]

    def to_device(self, ids: torch.Tensor) -> Any:
        """Host ids `[B, P]` as an MLX array (int32), before any timer starts."""
        return self._mx.array(ids.numpy().astype(np.int32))

    # --- the two phases ----------------------------------------------------------------------

    def prefill_forward(self, ids: Any, start_cache: list[Any]) -> tuple[Any, list[Any]]:
        """mlx-lm's prompt processing of ids `[B, P]` (module docstring): token 1 `[B, 1]`."""
        mx, cache = self._mx, start_cache
        with mx.stream(self.mx_device):
            done = 0
            for chunk in prefill_updates(int(ids.shape[1]))[:-1]:
                self.model(ids[:, done : done + chunk], cache=cache)
                fence(_state(cache))
                mx.clear_cache()
                done += chunk
            logits = self.model(ids[:, done:], cache=cache)
            token = mx.argmax(logits[:, -1, :], axis=-1, keepdims=True)
            fence(token, _state(cache))
        return token, cache

    def decode_step(self, token: Any, cache: list[Any], position: int) -> tuple[Any, list[Any]]:
        """One token `[B, 1]` through the model with the cache (which knows its own position)."""
        del position
        mx = self._mx
        with mx.stream(self.mx_device):
            logits = self.model(token, cache=cache)
            next_token = mx.argmax(logits[:, -1, :], axis=-1, keepdims=True)
            fence(next_token, _state(cache))
        return next_token, cache

    def _timed(self, call: Callable[[], Any]) -> tuple[Any, float]:
        self._mx.synchronize()  # nothing queued earlier is billed to the call
        started_s = time.perf_counter()
        out = call()  # fenced inside: it returns when its work is done
        self._mx.synchronize()
        return out, time.perf_counter() - started_s

    def prefill(self, input_ids: torch.Tensor) -> PrefillResult:
        """Host prompt -> token 1 on the host, the cache and both times (torch `Engine.prefill`)."""
        start_cache = self.start_cache_for(int(input_ids.shape[0]))
        client_start_s = time.perf_counter()
        ids = self.to_device(input_ids)  # the host copy, as torch's H2D
        (token, cache), prefill_s = self._timed(lambda: self.prefill_forward(ids, start_cache))
        host_token = torch.from_numpy(np.array(token).astype(np.int64))  # token 1 on the host
        return PrefillResult(
            next_token=token,
            host_token=host_token,
            cache=cache,
            prefill_s=prefill_s,
            ttft_s=time.perf_counter() - client_start_s,
        )

    # --- the whole loop ----------------------------------------------------------------------

    def check_request(self, prompt_len: int, new_tokens: int) -> None:
        """EngineError unless N >= 1 and P + N - 1 positions fit the model (torch's rule)."""
        final = prompt_len + new_tokens - 1
        if new_tokens <= 0:
            raise EngineError(f"new_tokens must be at least 1 (got {new_tokens}); fix the matrix.")
        if self.max_positions is not None and final > self.max_positions:
            raise EngineError(
                f"P + N - 1 = {final} positions exceed the model's {self.max_positions}; "
                "lower prompt_len or new_tokens in the matrix"
            )

    def client_generate(self, input_ids: torch.Tensor, new_tokens: int) -> Generation:
        """N tokens greedily as a client runs them: what the suite times (`test_generate`)."""
        return self._loop(input_ids, new_tokens, None, [])

    def generate(
        self, input_ids: torch.Tensor, new_tokens: int, probe: Callable[[Any], Any] | None = None
    ) -> MlxDecodeResult:
        """The same loop with every phase boundary recorded: the untimed asserting pass.

        `probe(cache)`, when given, reads the cache at each boundary too (`probed`), as torch's.
        """
        recorder = PhaseRecorder(self.device, MlxCounters())
        measured: list[MeasuredMlxKV] = []
        probed: list[Any] = []
        sink = None if probe is None else (lambda cache: probed.append(probe(cache)))
        run = self._loop(input_ids, new_tokens, recorder, measured, sink)
        kv_bytes = [s.kv_bytes for s in recorder.samples[1:]]
        return MlxDecodeResult(
            **{f.name: getattr(run, f.name) for f in fields(Generation)},
            kv_bytes_after_prefill=kv_bytes[0],
            kv_bytes_per_step=tuple(kv_bytes[1:]),
            samples=tuple(recorder.samples),
            memory_labels=recorder.monitor.labels,
            kv_used_bytes=tuple(m.used_bytes for m in measured),
            probed=tuple(probed),
        )

    def _kv_bytes(self, cache: list[Any], measured: list[MeasuredMlxKV]) -> int:
        found = measure(cache)
        measured.append(found)
        return found.allocated_bytes

    def _loop(
        self,
        input_ids: torch.Tensor,
        new_tokens: int,
        recorder: PhaseRecorder | None,
        measured: list[MeasuredMlxKV],
        probe: Callable[[Any], None] | None = None,
    ) -> Generation:
        self.check_request(int(input_ids.shape[-1]), new_tokens)
        call_start_s = time.perf_counter()
        if recorder is not None:
            recorder.begin()
        prefill = self.prefill(input_ids)
        arrived_s = time.perf_counter()
        token, cache = prefill.next_token, prefill.cache
        host_tokens = [prefill.host_token]
        if recorder is not None:
            recorder.end_phase("after_prefill", 0, partial(self._kv_bytes, cache, measured))
        if probe is not None:
            probe(cache)
        step_s: list[float] = []
        gap_s: list[float] = []
        prompt_len = int(input_ids.shape[-1])
        for step in range(1, new_tokens):
            if recorder is not None:
                recorder.start_phase()
            (token, cache), elapsed_s = self._timed(
                partial(self.decode_step, token, cache, prompt_len + step - 1)
            )
            host_tokens.append(torch.from_numpy(np.array(token).astype(np.int64)))
            now_s = time.perf_counter()
            gap_s.append(now_s - arrived_s)
            arrived_s = now_s
            step_s.append(elapsed_s)
            if recorder is not None:
                recorder.end_phase("after_decode", step, partial(self._kv_bytes, cache, measured))
            if probe is not None:
                probe(cache)
        e2e_s = time.perf_counter() - call_start_s
        return Generation(
            generated_ids=torch.cat(host_tokens, dim=-1),
            step_s=tuple(step_s),
            gap_s=tuple(gap_s),
            ttft_s=prefill.ttft_s,
            e2e_s=e2e_s,
            prefill_s=prefill.prefill_s,
            cache=cache,
        )

    # --- fixed-context decode rounds -----------------------------------------------------------

    def _to_host(self, cache: list[Any]) -> list[tuple[Any, Any]]:
        """Each layer's class and state, its arrays as numpy (off MLX's allocator)."""
        mx = self._mx

        def host(value: Any) -> Any:
            if isinstance(value, mx.array):
                # As unsigned ints of the same width: numpy has no bfloat16.
                bits = _UINTS[value.dtype.size]
                return _HostArray(np.array(mx.view(value, getattr(mx, bits))), value.dtype)
            if isinstance(value, tuple | list):
                return type(value)(host(v) for v in value)
            return value

        return [(type(layer), host(layer.state)) for layer in cache]

    def _from_host(self, layers: list[tuple[Any, Any]]) -> list[Any]:
        """New caches whose arrays are new MLX buffers (evaluated here, untimed)."""
        mx = self._mx

        def device(value: Any) -> Any:
            if isinstance(value, _HostArray):
                return mx.view(mx.array(value.data), value.dtype)
            if isinstance(value, tuple | list):
                return type(value)(device(v) for v in value)
            return value

        fresh = [kind.from_state(device(state)) for kind, state in layers]
        fence(_state(fresh))
        return fresh

    def snapshot(self, cache: list[Any]) -> CacheSnapshot:
        """The cache frozen at its positions, on the host (as torch keeps an accelerator's: a
        timed round's memory peak holds only its own cache), restorable any number of times."""
        found = measure(cache)
        return CacheSnapshot(
            cache=self._to_host(cache), seq_len=found.positions, kv_bytes=found.allocated_bytes
        )

    def restore(self, snapshot: CacheSnapshot) -> list[Any]:
        """A fresh copy of the snapshot's cache (evaluated now, before the round's clock)."""
        cache = self._from_host(snapshot.cache)
        if measure(cache).positions != snapshot.seq_len:  # a bug in `_from_host`, not the user's
            raise RuntimeError(f"restored cache does not hold {snapshot.seq_len} positions")
        return cache
