"""Where a quantized cache's quantization time goes: the prefill and each residual flush.

A quantized cache quantizes the prompt's K/V inside the prefill and re-quantizes its whole prefix
at every flush of the residual window, inside the decode step that fills it. HQQ's quantizer runs
with `optimize=True` there (transformers' `HQQQuantizedLayer` calls `Quantizer.quantize` with
its default): an iterative proximal solver per call, the reason an HQQ cache's prefill runs at a
third of the dense one's. Those seconds belong to the method and stay in the timed rounds; this
module says how many of them are quantization, measured in an untimed run.

`QuantizeTimer` patches the `_quantize` method of transformers' quantized-cache classes (4.4x
caches and 5.x layers alike) while it is open, synchronizing the device around each call, and
keeps (positions quantized, seconds) per call. `fields(prompt_len)` then splits them: the calls
that quantized P positions are the prefill's, every later length is one flush.

It deliberately does not time anything that is recorded as a round.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch
from transformers import cache_utils

from benchmarks.harness.device.devices import device_sync

# transformers' classes that own a `_quantize`: 5.x layers, 4.4x caches (whichever exist).
_CLASSES = (
    "HQQQuantizedLayer",
    "QuantoQuantizedLayer",
    "Fp8QuantizedLayer",
    "HQQQuantizedCache",
    "QuantoQuantizedCache",
)
LABEL = (
    "seconds in the cache backend's quantize calls (HQQ: optimize=True, an iterative solver per "
    "call) at the prefill and per residual flush, measured once in an untimed teacher-forced "
    "run; the timed prefill and the decode steps that flush contain the same work"
)


class QuantizeTimer:
    """While open, every quantized-cache `_quantize` call is timed (device-synchronized)."""

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self.calls: list[tuple[int, float]] = []  # (positions quantized, seconds)
        self._saved: list[tuple[type, Callable[..., Any]]] = []

    def __enter__(self) -> QuantizeTimer:
        for name in _CLASSES:
            cls = getattr(cache_utils, name, None)
            original = None if cls is None else cls.__dict__.get("_quantize")
            if cls is None or original is None:
                continue
            self._saved.append((cls, original))
            cls._quantize = self._timed(original)  # restored in __exit__
        return self

    def _timed(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(this: Any, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            device_sync(self._device)
            start = time.perf_counter()
            out = original(this, tensor, *args, **kwargs)
            device_sync(self._device)
            positions = int(tensor.shape[-2]) if tensor.dim() >= 2 else 0
            self.calls.append((positions, time.perf_counter() - start))
            return out

        return timed

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for cls, original in self._saved:
            setattr(cls, "_quantize", original)  # noqa: B010 - undo the patch above
        self._saved.clear()

    def fields(self, prompt_len: int) -> dict[str, Any]:
        """`kv_quantize_prefill_s` (the calls on P positions), `kv_quantize_flush_s` (the
        median over flushes, each the sum of its calls on one longer length; None without a
        flush), `kv_quantize_flushes`, `kv_quantize_total_s` (every call, fp8's per-step
        appends of fewer than P positions included), `kv_quantize_label`. {} when nothing was
        quantized (a dense cache)."""
        if not self.calls:
            return {}
        flushes: dict[int, float] = {}
        prefill_s = 0.0
        for positions, seconds in self.calls:
            if positions == prompt_len:
                prefill_s += seconds
            elif positions > prompt_len:
                flushes[positions] = flushes.get(positions, 0.0) + seconds
        return {
            "kv_quantize_prefill_s": prefill_s,
            "kv_quantize_flush_s": statistics.median(flushes.values()) if flushes else None,
            "kv_quantize_flushes": len(flushes),
            "kv_quantize_total_s": sum(seconds for _, seconds in self.calls),
            "kv_quantize_label": LABEL,
        }
