"""torch.compile as a measurement (DESIGN §9): compile cost, graph breaks, recompilations.

* `compile_model(model, mode)`: `model.compile(mode=...)` (`nn.Module.compile`: every
  `model(...)` call, prefill and decode, goes through one `torch.compile` wrapper); `none`
  leaves the model eager.
* `first_calls(engine, prompt, new_tokens, mode)`: for a compiled cell, `torch._dynamo.reset()`
  (so every cell pays its own compilation, whatever ran before), then times the first prefill
  and the first decode step, synchronized: `compile_s` is their sum, compilation plus one
  execution each, the cost a user pays on first use (`compile_fx_cache_hits` says whether
  inductor's on-disk cache made it a warm-cache figure). One untimed generation of N tokens
  follows, so every shape the cell's measurements use is compiled before any timed round
  (with a dynamic cache the context length grows, and dynamo recompiles once for a dynamic
  length). The counters of that phase are recorded. Where the mode captures CUDA graphs
  (`reduce-overhead`, and `max-autotune`, whose inductor config turns them on too; on CUDA
  only) the first calls run with inductor's `cudagraph_or_error`, and a graph that was still
  skipped (`counters["inductor"]["cudagraph_skips"]`) fails the cell with torch's reason
  (`CudaGraphsSkippedError`): a silently eager "reduce-overhead" cell would be mislabelled.
  The same guard (`cuda_graphs_kept`) holds through the matrix warmup and the timed rounds.
  CUDA graphs free or overwrite a replay's outputs at the next replay; the engine computes the
  next token from the logits before it calls the model again and keeps no other output (the
  static cache's buffers are inputs, allocated before the first call: `static.make_static_cache`).
  Memory: the dynamo reset drops the previous cell's graphs (and the static caches dynamo kept),
  whose private pool the allocator would keep cached, so the allocator's cache is emptied after
  it (`memory.release_cached_memory`), eager cells too: each cell's reserved figures start from
  its own. A CUDA-graph cell's replays allocate nothing, so its graph pool, reserved at capture,
  is read after the first calls (`cuda_graph_pool_bytes`, labelled `cuda_graph_pool_label`): in
  the cell's `peak_reserved_bytes`, never in its `peak_allocated_bytes`.
* `TimedWindow`: around the timed rounds. It reads `torch._dynamo.utils.counters` before and
  after (frames compiled, graph breaks) and sets `torch._dynamo.config.error_on_recompile`, so
  a recompilation inside the timed rounds stops the cell with dynamo's guard-failure reason
  (`CompiledInTimedRoundsError`); a first compilation of a frame there fails the cell too.

It deliberately does not pick shapes to mark dynamic, tune dynamo's cache limits, or compile
anything but the model's call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch
import torch._dynamo
import torch._inductor.config
from torch._dynamo.utils import counters

from benchmarks.harness.device.devices import device_sync
from benchmarks.harness.device.memory import cuda_graph_pool_bytes, release_cached_memory
from benchmarks.harness.errors import PhasebenchError


class CompiledInTimedRoundsError(PhasebenchError, AssertionError):
    """torch.compile compiled or recompiled during timed rounds: they timed compilation."""


class CudaGraphsSkippedError(PhasebenchError, AssertionError):
    """A CUDA-graph cell ran (partly) without CUDA graphs: it would not measure its mode."""


# Modes whose inductor options turn CUDA graphs on (`torch._inductor.list_mode_options`:
# `triton.cudagraphs` for both); they are captured on CUDA devices only.
CUDA_GRAPH_MODES = frozenset({"reduce-overhead", "max-autotune"})


def uses_cuda_graphs(mode: str | None, device_type: str) -> bool:
    """Whether torch.compile in `mode` captures CUDA graphs on a device of `device_type`."""
    return mode in CUDA_GRAPH_MODES and device_type == "cuda"


def is_compiled(mode: str | None) -> bool:
    """Whether a cell's `compile` value means torch.compile is on."""
    return mode not in (None, "none")


def compile_model(model: Any, mode: str | None, backend: str = "inductor") -> None:
    """Wrap every call of `model` in torch.compile (`mode` from the matrix; `none`: eager).

    `backend` is for tests only (the `eager` backend traces without generating code).
    """
    if not is_compiled(mode):
        return
    model.compile(backend=backend, mode=None if mode == "default" else mode)


@dataclass(frozen=True)
class DynamoCounts:
    """A snapshot of torch._dynamo's counters: frames compiled, graphs, graph breaks."""

    frames: int
    graphs: int
    graph_breaks: int
    # Inductor's on-disk FX graph cache: a hit reuses code compiled by an earlier process, so
    # compile_s with hits is a warm-cache figure, not the cold cost.
    fx_cache_hits: int = 0
    fx_cache_misses: int = 0
    # Graphs inductor compiled with CUDA graphs on but ran without them (also counted on CPU,
    # where a CUDA-graph mode has nothing to capture).
    cudagraph_skips: int = 0

    @classmethod
    def now(cls) -> DynamoCounts:
        """Read the process-wide counters now."""
        return cls(
            frames=int(counters["frames"]["total"]),
            graphs=int(counters["stats"]["unique_graphs"]),
            graph_breaks=int(sum(counters["graph_break"].values())),
            fx_cache_hits=int(counters["inductor"]["fxgraph_cache_hit"]),
            fx_cache_misses=int(counters["inductor"]["fxgraph_cache_miss"]),
            cudagraph_skips=int(counters["inductor"]["cudagraph_skips"]),
        )

    def since(self, earlier: DynamoCounts) -> DynamoCounts:
        """What was added after `earlier`."""
        return DynamoCounts(
            frames=self.frames - earlier.frames,
            graphs=self.graphs - earlier.graphs,
            graph_breaks=self.graph_breaks - earlier.graph_breaks,
            fx_cache_hits=self.fx_cache_hits - earlier.fx_cache_hits,
            fx_cache_misses=self.fx_cache_misses - earlier.fx_cache_misses,
            cudagraph_skips=self.cudagraph_skips - earlier.cudagraph_skips,
        )


def _timed_call(device: torch.device, call: Callable[[], Any]) -> tuple[float, Any]:
    device_sync(device)
    start_s = time.perf_counter()
    result = call()
    device_sync(device)
    return time.perf_counter() - start_s, result


def first_calls(
    engine: Any,
    prompt: torch.Tensor,
    new_tokens: int,
    mode: str | None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Compile cost of a compiled cell (extra_info fields); `{}` for an eager cell.

    Every cell first resets dynamo and empties the allocator's cache (module docstring). Then
    for a compiled cell it times the first prefill and first decode step, then runs one untimed
    generation of `new_tokens` so that the timed rounds meet only compiled shapes. `progress`
    gets a line before and after (compiling a real model takes minutes on a CPU).
    """
    device = engine.device
    # Release what an earlier compiled cell left with dynamo (its graphs, and the static caches
    # `mark_static_address` keeps alive), then the blocks and graph pools it leaves cached, so
    # none of it is in this cell's memory figures.
    torch._dynamo.reset()
    release_cached_memory(device)
    if not is_compiled(mode):
        return {}
    say = progress or (lambda _line: None)
    say(f"torch.compile {mode}: compiling (first prefill, first decode step, one generation) ...")
    start = DynamoCounts.now()
    graphs = uses_cuda_graphs(mode, device.type)
    with cuda_graphs_kept(graphs, mode, "first calls"):
        prefill_s, prefill = _timed_call(device, lambda: engine.prefill(prompt))
        decode_s, _ = _timed_call(
            device,
            lambda: engine.decode_step(prefill.next_token, prefill.cache, int(prompt.shape[-1])),
        )
        first = DynamoCounts.now().since(start)
        warm_s, _ = _timed_call(device, lambda: engine.client_generate(prompt, new_tokens))
    warmed = DynamoCounts.now().since(start)
    pool_bytes, pool_label = (
        cuda_graph_pool_bytes(device)
        if graphs
        else (None, f"n/a (torch.compile {mode} on {device.type} captures no CUDA graphs)")
    )
    say(
        f"torch.compile {mode}: compile_s {prefill_s + decode_s:.1f} s (first prefill + decode "
        f"step; inductor cache {first.fx_cache_hits} hit(s), {first.fx_cache_misses} miss(es)), "
        f"{warmed.frames} frame(s), {warmed.graph_breaks} graph break(s)"
    )
    return {
        "compile_mode": mode,
        "compile_s": prefill_s + decode_s,
        "compile_prefill_first_call_s": prefill_s,
        "compile_decode_first_call_s": decode_s,
        "compile_first_calls_frames": first.frames,
        "compile_graphs": warmed.graphs,
        "compile_graph_breaks": warmed.graph_breaks,
        "compile_warmup_frames": warmed.frames - first.frames,
        "compile_fx_cache_hits": first.fx_cache_hits,
        "compile_fx_cache_misses": first.fx_cache_misses,
        "compile_cuda_graphs": graphs,
        "cuda_graph_pool_bytes": pool_bytes,
        "cuda_graph_pool_label": pool_label,
        "compile_warmup_generation_s": warm_s,
        "compile_warmup": (
            "dynamo reset, first prefill + first decode step timed (compile_s), then one untimed "
            "generation of N tokens compiled every shape before the matrix warmup and the timed "
            "rounds"
        ),
    }


@contextmanager
def _cuda_graphs_or_error(graphs: bool, mode: str | None) -> Iterator[None]:
    """With `graphs`, make inductor raise where it would skip CUDA graphs, naming why."""
    if not graphs:
        yield
        return
    options: dict[str, Any] = {}
    if hasattr(torch._inductor.config.triton, "cudagraph_or_error"):  # where torch has it
        options["triton.cudagraph_or_error"] = True
    try:
        with torch._inductor.config.patch(options):
            yield
    except Exception as error:
        if "cudagraph" not in str(error).lower():
            raise
        lines = [line.strip() for line in str(error).splitlines()]
        reason = next(line for line in lines if "cudagraph" in line.lower())
        raise CudaGraphsSkippedError(
            f"torch.compile {mode}: CUDA graphs could not be captured ({reason}); the cell "
            "would run without them, so it is not measured"
        ) from error


@contextmanager
def cuda_graphs_kept(graphs: bool, mode: str | None, where: str) -> Iterator[None]:
    """With `graphs`, CUDA graphs must hold for the whole block (`where`: first calls, warmup,
    timed rounds): inductor raises where it would skip them (`cudagraph_or_error`, its reason),
    and a skip it counted without raising fails the block at its end. A later fallback (a
    mutated input, the re-record limit) would otherwise time eager code under the mode's label.
    """
    if not graphs:
        yield
        return
    before = DynamoCounts.now().cudagraph_skips
    with _cuda_graphs_or_error(graphs, mode):
        yield
    skipped = DynamoCounts.now().cudagraph_skips - before
    if skipped:
        raise CudaGraphsSkippedError(
            f"torch.compile {mode}: CUDA graphs were skipped {skipped} time(s) in the {where} "
            "(counters['inductor']['cudagraph_skips']) without a reason torch raised; rerun "
            "with TORCH_LOGS=perf_hints to see it"
        )


class TimedWindow:
    """Counts dynamo's work during the timed rounds; any compilation there fails the cell.

    `with TimedWindow(cell_id, mode) as window: benchmark.pedantic(...)`, then
    `info.update(window.extra_info())` and `window.check()`. For an eager cell it does nothing.
    """

    def __init__(self, cell_id: str, mode: str | None) -> None:
        self._cell_id = cell_id
        self._active = is_compiled(mode)
        self._start: DynamoCounts | None = None
        self._added: DynamoCounts | None = None
        self._patch: Any = None

    def __enter__(self) -> TimedWindow:
        if self._active:
            self._patch = torch._dynamo.config.patch(error_on_recompile=True)
            self._patch.__enter__()
            self._start = DynamoCounts.now()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if not self._active or self._start is None:
            return
        self._added = DynamoCounts.now().since(self._start)
        self._patch.__exit__(None, None, None)
        if isinstance(error, torch._dynamo.exc.RecompileError):
            first_line = str(error).strip()
            raise CompiledInTimedRoundsError(
                f"{self._cell_id}: torch.compile recompiled during the timed rounds, so they "
                f"would time compilation ({first_line}); warm the shapes the timed rounds use "
                "or fix the guard that failed"
            ) from error

    def extra_info(self) -> dict[str, Any]:
        """`compile_timed_frames`, `compile_timed_graph_breaks` and
        `compile_timed_cudagraph_skips` (nothing for eager cells)."""
        if self._added is None:
            return {}
        return {
            "compile_timed_frames": self._added.frames,
            "compile_timed_graph_breaks": self._added.graph_breaks,
            "compile_timed_cudagraph_skips": self._added.cudagraph_skips,
        }

    def check(self) -> None:
        """Raise `CompiledInTimedRoundsError` if any frame was compiled in the timed rounds."""
        if self._added is not None and self._added.frames:
            raise CompiledInTimedRoundsError(
                f"{self._cell_id}: torch.compile compiled {self._added.frames} frame(s) during "
                "the timed rounds, so they timed compilation; the warmup must reach every "
                "function and shape the rounds call"
            )
