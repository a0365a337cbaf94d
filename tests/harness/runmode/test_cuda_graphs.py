"""Compiled cells that hold up under CUDA graphs (DESIGN §9), shown on a CPU with fakes of the
semantics phasebench relies on:

* cudagraph trees free a replay's outputs when the next replay starts (the
  `cudagraph_mark_step_begin` docs; "accessing tensor output of CUDAGraphs that has been
  overwritten"): `ReplayFreesOutputs` frees every tensor a model call produced (reachable from
  its output, not among its inputs) when the next call starts, so a later read raises;
* a graph compiled on inference tensors recompiles for an ordinary tensor (real dynamo, the
  `eager` backend: no code generation);
* inductor counts a graph it ran without CUDA graphs in `counters["inductor"]["cudagraph_skips"]`
  and, with `cudagraph_or_error`, raises its reason (torch's own logging function).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters
from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter
from transformers import cache_utils

from benchmarks.harness.cache.static import STATIC_SLIDING_SINCE
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model import compat
from benchmarks.harness.model.models import load_model_spec
from benchmarks.harness.runmode import compiled
from benchmarks.harness.runmode.compiled import (
    CompiledInTimedRoundsError,
    CudaGraphsSkippedError,
    TimedWindow,
    compile_model,
    first_calls,
)
from benchmarks.harness.runmode.decide import build_cell_model, configure_engine
from tests.engine_fakes import TRANSFORMERS_VERSION

CPU = torch.device("cpu")
LAZY_STATIC_LAYERS = TRANSFORMERS_VERSION >= STATIC_SLIDING_SINCE


def _storage(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage()._cdata)


class ReplayFreesOutputs:
    """Fake of cudagraph trees' output lifetime on a real model: every call is a new replay of
    its own, and what the previous call produced (reachable from its output, not among its
    inputs) is overwritten when the next one starts. Handing such a tensor to the next call
    raises torch's error; one read afterwards on the host reads NaN (its floats are
    overwritten). Inputs (arguments, the cache handed in, parameters, buffers) are never
    overwritten: they model static addresses and the graph's inputs."""

    def __init__(self, model: Any) -> None:
        self.overwritten = 0
        self._inputs: set[int] = set()
        self._outputs: list[torch.Tensor] = []
        model.register_forward_pre_hook(self._before, with_kwargs=True)
        model.register_forward_hook(self._after, with_kwargs=True)

    def _before(self, module: Any, args: Any, kwargs: Any) -> None:
        inputs = {_storage(t) for t in compat._all_tensors([args, kwargs])}
        if inputs & {_storage(t) for t in self._outputs}:
            raise RuntimeError(
                "Error: accessing tensor output of CUDAGraphs that has been overwritten by a "
                "subsequent run (fake)"
            )
        with torch.inference_mode():
            for tensor in self._outputs:
                if tensor.is_floating_point():
                    tensor.fill_(float("nan"))
                    self.overwritten += 1
        self._outputs = []
        self._inputs = inputs | {_storage(t) for t in (*module.parameters(), *module.buffers())}

    def _after(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        produced = compat._all_tensors(dict(output))
        self._outputs = [t for t in produced if _storage(t) not in self._inputs]


def _static_cell(**axes: Any) -> Cell:
    return Cell("tiny-llama", "cpu", "float32", 1, 16, 4, 0, 1, 0, cache="static", **axes)


def _engine(cell: Cell) -> Engine:
    model = build_cell_model(load_model_spec("tiny-llama"), cell, CPU, torch.float32)
    engine = Engine(model, CPU)
    configure_engine(engine, cell)
    return engine


def _decode_rounds(engine: Engine, prompt: torch.Tensor, rounds: int) -> list[torch.Tensor]:
    """test_decode's rounds: one prefill and snapshot, then restore + one step per round."""
    prefill = engine.prefill(prompt)
    snapshot = engine.snapshot(prefill.cache)
    tokens = []
    for _ in range(rounds):
        restored = engine.restore(snapshot)
        token, _cache = engine.decode_step(prefill.next_token, restored, snapshot.seq_len)
        tokens.append(token)
    return tokens


# --- a replay frees the previous replay's outputs ---------------------------------------------


def test_a_phasebench_static_cell_reads_no_output_of_an_earlier_replay():
    """The cell's static cache is allocated before the first call, so its buffers are inputs of
    every replay; the engine takes the next token from the logits before the next call."""
    cell = _static_cell()
    prompt = make_prompt(1, 16, 256, seed=0)
    expected = _engine(cell).generate(prompt, cell.new_tokens).generated_ids
    engine = _engine(cell)
    graphs = ReplayFreesOutputs(engine.model)
    assert torch.equal(engine.generate(prompt, cell.new_tokens).generated_ids, expected)
    rounds = _decode_rounds(engine, prompt, 3)
    assert all(torch.equal(token, expected[:, 1:2]) for token in rounds)
    assert graphs.overwritten > 0  # earlier calls' logits were overwritten on the way


@pytest.mark.skipif(
    not LAZY_STATIC_LAYERS, reason="transformers < 4.56 allocates StaticCache layers eagerly"
)
def test_a_lazily_allocated_static_cache_breaks_at_the_first_decode_step():
    """What the fake catches: K/V buffers made inside the first (captured) call are its
    outputs, and the next replay frees them; the old `make_static_cache` built exactly this."""
    engine = _engine(_static_cell())
    config = engine.model.config

    def lazy(batch: int) -> Any:
        with torch.inference_mode():
            return cache_utils.StaticCache(config=config, max_cache_len=19)

    engine.start_cache = lazy
    ReplayFreesOutputs(engine.model)
    with pytest.raises(RuntimeError, match="has been overwritten"):
        engine.generate(make_prompt(1, 16, 256, seed=0), 3)


def test_a_dynamic_cache_breaks_under_cuda_graphs_which_is_why_they_need_a_static_one():
    cell = Cell("tiny-llama", "cpu", "float32", 1, 16, 4, 0, 1, 0)
    engine = _engine(cell)
    ReplayFreesOutputs(engine.model)
    with pytest.raises(RuntimeError, match="has been overwritten"):
        engine.generate(make_prompt(1, 16, 256, seed=0), 3)


# --- one cache per cell, restored in place ---------------------------------------------------


def test_a_static_cell_keeps_one_preallocated_cache_reset_per_prefill_and_restored_in_place():
    engine = _engine(_static_cell())
    prompt = make_prompt(1, 16, 256, seed=0)
    first = engine.generate(prompt, 4)
    cache = first.cache
    keys = cache.layers[0].keys if LAZY_STATIC_LAYERS else cache.key_cache[0]
    assert hasattr(keys, "_dynamo_static_input_type")  # marked before any forward ran
    assert keys.is_inference()
    second = engine.generate(prompt, 4)
    assert second.cache is cache  # the same buffers, reset: the same tokens
    assert torch.equal(second.generated_ids, first.generated_ids)
    prefill = engine.prefill(prompt)
    assert prefill.cache is cache
    assert compat.cache_seq_length(cache) == 16  # reset, then 16 positions written
    snapshot = engine.snapshot(prefill.cache)
    engine.decode_step(prefill.next_token, cache, 16)
    restored = engine.restore(snapshot)
    assert restored is cache
    assert compat.cache_seq_length(restored) == 16  # back to P, in place


def test_compiled_static_decode_rounds_compile_nothing_after_the_warmup():
    """torch.compile (dynamo, `eager` backend) of a static cell: after `first_calls` the decode
    rounds (restore in place + one step) and another prefill reuse the compiled graphs."""
    cell = _static_cell(compile="default")
    model = build_cell_model(load_model_spec("tiny-llama"), _static_cell(), CPU, torch.float32)
    compile_model(model, "default", backend="eager")
    engine = Engine(model, CPU)
    configure_engine(engine, cell)
    prompt = make_prompt(1, 16, 256, seed=0)
    info = first_calls(engine, prompt, cell.new_tokens, cell.compile)
    assert info["compile_cuda_graphs"] is False
    with TimedWindow(cell.id, cell.compile) as window:
        _decode_rounds(engine, prompt, 3)
    window.check()
    assert window.extra_info()["compile_timed_frames"] == 0


# --- restored tensors are inference tensors ---------------------------------------------------


def test_a_graph_compiled_on_inference_tensors_recompiles_for_an_ordinary_one():
    """The semantics the restore relies on (real dynamo): so a restored cache must hold
    inference tensors, whatever the device."""
    torch._dynamo.reset()
    step = torch.compile(lambda x: x * 2, backend="eager")
    with torch.inference_mode():
        step(torch.ones(3))
        with TimedWindow("cell", "default"):
            step(torch.ones(3))  # another inference tensor: compiled already
    ordinary = torch.ones(3)  # made outside inference mode, as `.to(device, copy=True)` was
    with (
        pytest.raises(CompiledInTimedRoundsError, match="recompiled"),
        TimedWindow("cell", "default"),
        torch.inference_mode(),
    ):
        step(ordinary)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_a_cache_copied_onto_a_device_holds_inference_tensors(cache):
    """The accelerator path of snapshot/restore (`copy_cache(..., device)`), forced on the CPU:
    every tensor of the copy and of a copy back is an inference tensor."""
    axes = {"cache": "static"} if cache == "static" else {}
    engine = _engine(Cell("tiny-llama", "cpu", "float32", 1, 16, 4, 0, 1, 0, **axes))
    prefill = engine.prefill(make_prompt(1, 16, 256, seed=0))
    host = compat.copy_cache(prefill.cache, "cpu")
    back = compat.copy_cache(host, "cpu")
    for copy in (host, back):
        tensors = list(compat._all_tensors(copy))
        assert tensors
        assert all(t.is_inference() for t in tensors)


def test_a_compiled_step_does_not_recompile_for_a_cache_restored_through_the_device_path():
    cell = Cell("tiny-llama", "cpu", "float32", 1, 16, 4, 0, 1, 0, compile="default")
    eager = Cell("tiny-llama", "cpu", "float32", 1, 16, 4, 0, 1, 0)
    model = build_cell_model(load_model_spec("tiny-llama"), eager, CPU, torch.float32)
    compile_model(model, "default", backend="eager")
    engine = Engine(model, CPU)
    prompt = make_prompt(1, 16, 256, seed=0)
    first_calls(engine, prompt, cell.new_tokens, cell.compile)
    prefill = engine.prefill(prompt)
    host = compat.copy_cache(prefill.cache, "cpu")  # the snapshot on the host
    with TimedWindow(cell.id, cell.compile) as window:
        for _ in range(2):
            engine.decode_step(prefill.next_token, compat.copy_cache(host, "cpu"), 16)
    window.check()


# --- CUDA graphs skipped fail the cell --------------------------------------------------------


class _FakeEngine:
    """An engine whose first prefill makes inductor skip CUDA graphs, as a compile would."""

    def __init__(self, device: str, skip: Any) -> None:
        self.device = torch.device(device)
        self._skip = skip

    def prefill(self, prompt: torch.Tensor) -> Any:
        self._skip()

        class _Prefill:
            next_token = prompt[:, -1:]
            cache = None

        return _Prefill()

    def decode_step(self, token: torch.Tensor, cache: Any, position: int) -> Any:
        return token, cache

    def client_generate(self, prompt: torch.Tensor, new_tokens: int) -> None:
        return None


@pytest.fixture
def no_device_sync(monkeypatch):
    monkeypatch.setattr(compiled, "device_sync", lambda device: None)
    # Nor an allocator: the cache emptied and the graph pool read are test_graph_memory.py's.
    monkeypatch.setattr(compiled, "release_cached_memory", lambda device: None)
    monkeypatch.setattr(compiled, "cuda_graph_pool_bytes", lambda device: (None, "n/a (fake)"))


@pytest.mark.usefixtures("no_device_sync")
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_a_cuda_graph_cell_whose_graphs_were_skipped_fails_with_the_reason(mode):
    def skip() -> None:
        log_cudagraph_skip_and_bump_counter(
            "skipping cudagraphs due to mutated inputs (2 instances)"
        )

    with pytest.raises(CudaGraphsSkippedError, match="mutated inputs"):
        first_calls(_FakeEngine("cuda", skip), torch.ones(1, 4), 2, mode)


@pytest.mark.usefixtures("no_device_sync")
def test_a_skip_counted_without_a_reason_still_fails_a_cuda_graph_cell():
    def skip() -> None:
        counters["inductor"]["cudagraph_skips"] += 1

    with pytest.raises(CudaGraphsSkippedError, match=r"skipped 1 time\(s\)"):
        first_calls(_FakeEngine("cuda", skip), torch.ones(1, 4), 2, "reduce-overhead")


@pytest.mark.usefixtures("no_device_sync")
def test_skips_off_cuda_and_in_graph_free_modes_are_no_failure():
    def skip() -> None:
        counters["inductor"]["cudagraph_skips"] += 1  # inductor counts a CPU graph silently

    assert first_calls(_FakeEngine("cpu", skip), torch.ones(1, 4), 2, "max-autotune")
    info = first_calls(_FakeEngine("cuda", skip), torch.ones(1, 4), 2, "default")
    assert info["compile_cuda_graphs"] is False
