"""Memory of CUDA-graph cells (issue 30, row 8), on a fake of the CUDA caching allocator.

What the fake keeps of torch 2.13 (c10 CUDACachingAllocator through torch/cuda/memory.py, and
torch/_inductor/cudagraph_trees.py):

* `memory_stats` counts every pool: a block allocated in a private pool is in
  `allocated_bytes`, a private pool's segments are in `reserved_bytes`;
* cudagraph trees capture each graph into one private pool (`graph_pool_handle()`): the
  capture allocates the graph's intermediates there and frees them back to the pool, whose
  segments stay reserved; a replay allocates nothing through the allocator;
* `torch._dynamo.reset()` drops the trees (`reset_cudagraph_trees`); a pool no graph uses any
  more is freed only by `empty_cache` (`graph_pools_freeable`), until then it stays reserved;
* `memory_snapshot()` lists every segment with its `device`, `total_size` and
  `segment_pool_id`, (0, 0) for the default pools.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch._dynamo

from benchmarks.harness.device import memory
from benchmarks.harness.device.memory import (
    GRAPH_POOL_LABEL,
    MemoryMonitor,
    cuda_graph_pool_bytes,
    peak_fields,
)
from benchmarks.harness.runmode.compiled import first_calls

CUDA = torch.device("cuda", 0)
DEFAULT_POOL = (0, 0)
MIB = 1 << 20


class FakeAllocator:
    """Segments (reserved) per pool, bytes in use per segment, and the allocator's peaks."""

    def __init__(self) -> None:
        self.segments: list[dict[str, Any]] = []
        self.graph_pools: list[tuple[int, int]] = []  # pools some CUDA graph still uses
        self.peak_allocated = self.peak_reserved = 0
        self.events: list[str] = []
        self.with_pool_ids = True

    def allocated(self) -> int:
        return sum(segment["used"] for segment in self.segments)

    def reserved(self) -> int:
        return sum(segment["size"] for segment in self.segments)

    def malloc(self, nbytes: int, pool: tuple[int, int] = DEFAULT_POOL) -> None:
        """Use a free segment of the pool, else reserve a new one (one block per segment)."""
        free = [s for s in self.segments if s["pool"] == pool and s["used"] == 0]
        fitting = [s for s in free if s["size"] >= nbytes]
        if fitting:
            fitting[0]["used"] = nbytes
        else:
            self.segments.append({"pool": pool, "size": nbytes, "used": nbytes})
        self.peak_allocated = max(self.peak_allocated, self.allocated())
        self.peak_reserved = max(self.peak_reserved, self.reserved())

    def free(self, nbytes: int, pool: tuple[int, int] = DEFAULT_POOL) -> None:
        segment = next(s for s in self.segments if s["pool"] == pool and s["used"] == nbytes)
        segment["used"] = 0

    # --- cudagraph trees --------------------------------------------------------------------

    def capture(self, *intermediates: int) -> tuple[int, int]:
        """Record a graph into the cell's private pool: allocate its intermediates there, and
        free them back to the pool at the end of the capture."""
        if not self.graph_pools:
            self.graph_pools.append((1, len(self.segments) + 1))
        pool = self.graph_pools[0]
        for nbytes in intermediates:
            self.malloc(nbytes, pool)
        for nbytes in intermediates:
            self.free(nbytes, pool)
        return pool

    def replay(self) -> None:
        """A replay runs the captured kernels in the pool's memory: no allocator call."""

    def dynamo_reset(self) -> None:
        self.events.append("dynamo.reset")
        self.graph_pools.clear()  # the pools are freeable now, but still reserved

    # --- torch.cuda's entry points ----------------------------------------------------------

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        return {
            "allocated_bytes.all.current": self.allocated(),
            "reserved_bytes.all.current": self.reserved(),
            "allocated_bytes.all.peak": self.peak_allocated,
            "reserved_bytes.all.peak": self.peak_reserved,
        }

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.peak_allocated, self.peak_reserved = self.allocated(), self.reserved()

    def empty_cache(self) -> None:
        self.events.append("empty_cache")
        self.segments = [
            s
            for s in self.segments
            if s["used"] or (s["pool"] != DEFAULT_POOL and s["pool"] in self.graph_pools)
        ]

    def memory_snapshot(self, include_traces: bool = True) -> list[dict[str, Any]]:
        assert include_traces is False  # the harness never asks for trace entries
        snapshot = []
        for segment in self.segments:
            entry = {"device": 0, "total_size": segment["size"], "allocated_size": segment["used"]}
            if self.with_pool_ids:
                entry["segment_pool_id"] = segment["pool"]
            snapshot.append(entry)
        return snapshot


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch) -> FakeAllocator:
    fake = FakeAllocator()
    for name in ("memory_stats", "reset_peak_memory_stats", "empty_cache", "memory_snapshot"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._dynamo, "reset", fake.dynamo_reset)
    return fake


class GraphEngine:
    """The engine's calls on a CUDA-graph cell: the first prefill allocates the static cache
    (default pool) and captures, the first decode step captures into the same pool, and every
    later call replays."""

    def __init__(self, allocator: FakeAllocator) -> None:
        self.device = CUDA
        self._allocator = allocator
        self.captured = 0

    def prefill(self, prompt: torch.Tensor) -> Any:
        self._allocator.malloc(8 * MIB)  # the cell's static cache, before the graph runs
        self._allocator.capture(3 * MIB, 1 * MIB)
        self.captured += 1
        return SimpleNamespace(next_token=None, cache=None)

    def decode_step(self, token: Any, cache: Any, position: int) -> None:
        self._allocator.capture(1 * MIB)  # a free 3-MiB segment of the pool serves it
        self.captured += 1

    def client_generate(self, prompt: torch.Tensor, new_tokens: int) -> None:
        for _ in range(new_tokens):
            self._allocator.replay()


def test_fake_replays_leave_the_graph_pool_out_of_peak_allocated_and_in_peak_reserved(allocator):
    """The mechanism behind the labels: a replay's workspace is the pool reserved at capture,
    so a CUDA-graph round's allocated peak is the weights alone, its reserved peak holds the
    pool, and only `cuda_graph_pool_bytes` says how big the graphs' working set is."""
    allocator.malloc(100 * MIB)  # weights
    allocator.capture(6 * MIB, 2 * MIB)
    monitor = MemoryMonitor(CUDA)
    monitor.reset_peak()
    allocator.replay()
    fields = peak_fields([monitor.sample()])
    assert fields["peak_allocated_bytes"] == 100 * MIB
    assert fields["peak_reserved_bytes"] == 108 * MIB
    assert cuda_graph_pool_bytes(CUDA) == (8 * MIB, GRAPH_POOL_LABEL)
    labels = monitor.labels
    assert "cuda_graph_pool_bytes" in labels["peak_allocated"]
    assert "not in it" in labels["peak_allocated"]
    assert "includes a CUDA-graph cell's graph pool" in labels["peak_reserved"]


def test_fake_a_graph_cell_records_the_pool_its_capture_reserved_not_the_reserved_delta(
    allocator,
):
    """The pool is read from the allocator's segments: the reserved delta across the first calls
    (12 MiB here) would count the static cache the first prefill allocates as graph memory."""
    allocator.malloc(100 * MIB)  # weights
    engine = GraphEngine(allocator)
    before = allocator.reserved()
    info = first_calls(engine, torch.ones(1, 4, dtype=torch.long), 3, "reduce-overhead")
    assert engine.captured == 2
    assert info["compile_cuda_graphs"] is True
    assert info["cuda_graph_pool_bytes"] == 4 * MIB  # the 3-MiB and 1-MiB segments of the pool
    assert info["cuda_graph_pool_label"] == GRAPH_POOL_LABEL
    assert allocator.reserved() - before == 12 * MIB


@pytest.mark.parametrize("next_mode", ["none", "default", "reduce-overhead"])
def test_fake_the_next_cell_starts_without_the_previous_cells_graph_pool(allocator, next_mode):
    """`_dynamo.reset()` drops the previous cell's graphs but leaves their pool in the
    allocator's cache: without `empty_cache` after it, the next cell's reserved figures (and
    every peak_reserved of its rounds) carry the last cell's graphs."""
    allocator.malloc(100 * MIB)  # weights, shared by both cells
    previous = GraphEngine(allocator)
    first_calls(previous, torch.ones(1, 4, dtype=torch.long), 2, "reduce-overhead")
    assert allocator.reserved() == 100 * MIB + 8 * MIB + 4 * MIB
    allocator.free(8 * MIB)  # `configure_engine` dropped the previous cell's static cache
    allocator.events.clear()

    class EagerEngine:
        device = CUDA

        def prefill(self, prompt: torch.Tensor) -> Any:
            return SimpleNamespace(next_token=None, cache=None)

        def decode_step(self, token: Any, cache: Any, position: int) -> None:
            pass

        def client_generate(self, prompt: torch.Tensor, new_tokens: int) -> None:
            pass

    engine = GraphEngine(allocator) if next_mode == "reduce-overhead" else EagerEngine()
    allocator.reset_peak_memory_stats()
    info = first_calls(engine, torch.ones(1, 4, dtype=torch.long), 2, next_mode)
    assert allocator.events[:2] == ["dynamo.reset", "empty_cache"]
    if next_mode == "reduce-overhead":
        # Its own static cache and pool only; the previous 8 + 4 MiB went back to the driver.
        assert allocator.reserved() == 100 * MIB + 8 * MIB + 4 * MIB
        assert info["cuda_graph_pool_bytes"] == 4 * MIB
    else:
        assert allocator.reserved() == 100 * MIB
        monitor = MemoryMonitor(CUDA)
        monitor.reset_peak()
        assert monitor.sample().peak_reserved_bytes == 100 * MIB


def test_fake_a_compiled_cell_without_cuda_graphs_records_no_pool_with_the_reason(allocator):
    engine = GraphEngine(allocator)
    info = first_calls(engine, torch.ones(1, 4, dtype=torch.long), 2, "default")
    assert info["compile_cuda_graphs"] is False
    assert info["cuda_graph_pool_bytes"] is None
    assert info["cuda_graph_pool_label"] == (
        "n/a (torch.compile default on cuda captures no CUDA graphs)"
    )


def test_fake_a_torch_without_segment_pool_ids_records_none_with_the_reason(allocator):
    allocator.capture(2 * MIB)
    allocator.with_pool_ids = False
    pool_bytes, label = cuda_graph_pool_bytes(CUDA)
    assert pool_bytes is None
    assert label.startswith("n/a (")
    assert "segment_pool_id" in label


def test_fake_an_older_memory_snapshot_without_include_traces_is_still_read(allocator, monkeypatch):
    allocator.capture(2 * MIB)
    snapshot = allocator.memory_snapshot

    def old_snapshot() -> list[dict[str, Any]]:  # torch before `include_traces`
        return snapshot(include_traces=False)

    monkeypatch.setattr(torch.cuda, "memory_snapshot", old_snapshot)
    assert cuda_graph_pool_bytes(CUDA) == (2 * MIB, GRAPH_POOL_LABEL)


def test_fake_segments_of_another_device_are_not_this_devices_pool(allocator, monkeypatch):
    allocator.capture(2 * MIB)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert cuda_graph_pool_bytes(torch.device("cuda"))[0] == 0  # "cuda" is device 1 now
    assert cuda_graph_pool_bytes(CUDA)[0] == 2 * MIB


def test_release_on_a_cpu_touches_no_accelerator(monkeypatch):
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("CPU memory has no allocator cache to empty")

    monkeypatch.setattr(torch.cuda, "empty_cache", refuse)
    monkeypatch.setattr(torch.mps, "empty_cache", refuse)
    memory.release_cached_memory(torch.device("cpu"))
    assert cuda_graph_pool_bytes(torch.device("cpu")) == (None, "n/a (no CUDA graphs on cpu)")
