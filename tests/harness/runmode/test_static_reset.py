"""The start cache is made before any timer starts (issue 30, row 7): a static cell's reset
(a few kernels per layer) and a quantized cell's new cache are not part of `prefill_s` or
`ttft_s`; `prefill_forward` times the forward from the cache it is handed, and nothing else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from benchmarks.harness import engine as engine_module
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import load_model_spec
from benchmarks.harness.runmode.decide import build_cell_model, configure_engine

CPU = torch.device("cpu")


@pytest.fixture
def static_engine() -> Engine:
    cell = Cell("tiny-llama", "cpu", "float32", 1, 16, 4, 0, 1, 0, cache="static")
    model = build_cell_model(load_model_spec("tiny-llama"), cell, CPU, torch.float32)
    engine = Engine(model, CPU)
    configure_engine(engine, cell)
    return engine


def _logged(engine: Engine, log: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Log the cell's cache resets, the forwards and the timer's edges, in order."""
    slot = engine.start_cache
    assert slot is not None

    def start(batch: int) -> Any:
        log.append("start cache")
        return slot(batch)

    engine.start_cache = start
    forward = engine.model.forward

    def logged_forward(*args: Any, **kwargs: Any) -> Any:
        log.append("forward")
        return forward(*args, **kwargs)

    monkeypatch.setattr(engine.model, "forward", logged_forward)
    real_timed = engine_module.timed

    @contextlib.contextmanager
    def logged_timed(device: torch.device) -> Iterator[Any]:
        log.append("timer starts")
        with real_timed(device) as watch:
            yield watch
        log.append("timer stops")

    monkeypatch.setattr(engine_module, "timed", logged_timed)


def test_the_prefill_resets_the_static_cache_before_its_timer_starts(
    static_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = make_prompt(1, 16, 256, seed=0)
    first = static_engine.generate(prompt, 3).generated_ids
    log: list[str] = []
    _logged(static_engine, log, monkeypatch)
    second = static_engine.generate(prompt, 3)
    assert log[:4] == ["start cache", "timer starts", "forward", "timer stops"]
    assert log.count("start cache") == 1  # decode steps reuse the prefill's cache
    assert torch.equal(second.generated_ids, first)  # the reset cache gives the same tokens


def test_prefill_forward_times_the_forward_from_the_cache_it_is_handed(
    static_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = make_prompt(1, 16, 256, seed=0)
    start = static_engine.start_cache_for(1)
    log: list[str] = []
    _logged(static_engine, log, monkeypatch)
    _token, cache = static_engine.prefill_forward(ids, start)
    assert log == ["forward"]  # no reset, no new cache inside what `prefill_s` times
    assert cache is start
