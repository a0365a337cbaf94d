"""Positions handed in (issue 30, row 1): on transformers 4.4x-4.57 a forward without
`cache_position` asks a `StaticCache` for its length, a tensor fed to `torch.arange`: a sync per
step and, compiled, a data-dependent graph break (two graphs per step). Shown with real dynamo
(the `eager` backend) on the installed transformers; CI runs both 4.46 and 5.x.
"""

from __future__ import annotations

from typing import Any

import torch
import torch._dynamo
from torch._dynamo.utils import counters

from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model import compat
from benchmarks.harness.model.models import load_model_spec
from benchmarks.harness.runmode.compiled import compile_model
from benchmarks.harness.runmode.decide import build_cell_model, configure_engine

CPU = torch.device("cpu")


def _engine(cache: str | None) -> Engine:
    cell = Cell("tiny-llama", "cpu", "float32", 1, 16, 4, 0, 1, 0, cache=cache)
    model = build_cell_model(load_model_spec("tiny-llama"), cell, CPU, torch.float32)
    engine = Engine(model, CPU)
    configure_engine(engine, cell)
    return engine


def test_a_compiled_static_cache_step_is_one_graph_on_this_transformers() -> None:
    engine = _engine("static")
    prompt = make_prompt(1, 16, 256, seed=0)
    expected = _engine("static").generate(prompt, 4).generated_ids
    compile_model(engine.model, "default", backend="eager")
    torch._dynamo.reset()
    counters.clear()
    generated = engine.generate(prompt, 4).generated_ids
    # Before positions were handed in, 4.46 broke each graph at `aten._local_scalar_dense`.
    assert dict(counters["graph_break"]) == {}
    assert torch.equal(generated, expected)  # the same tokens as eager
    prefill = engine.prefill(prompt)
    snapshot = engine.snapshot(prefill.cache)
    before = int(counters["frames"]["total"])
    for _ in range(2):  # test_decode's rounds: restore to P, one step at position P
        engine.decode_step(prefill.next_token, engine.restore(snapshot), snapshot.seq_len)
    assert int(counters["frames"]["total"]) == before  # nothing recompiled
    assert dict(counters["graph_break"]) == {}


class _Recorder:
    """Records the positions each forward call is handed (None: it was handed none)."""

    def __init__(self, model: Any) -> None:
        self.positions: list[list[int] | None] = []
        model.register_forward_pre_hook(self._before, with_kwargs=True)

    def _before(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        given = kwargs.get("cache_position")
        self.positions.append(None if given is None else given.tolist())


def test_each_call_gets_its_tokens_positions_where_the_forward_takes_them() -> None:
    engine = _engine(None)
    seen = _Recorder(engine.model)
    engine.generate(make_prompt(2, 5, 256, seed=0), 4)
    if compat.position_kwarg(engine.model) is None:  # 5.x: the forward takes no positions
        assert seen.positions == [None] * 4
    else:  # prefill 0..4, then one token per step at 5, 6, 7
        assert seen.positions == [[0, 1, 2, 3, 4], [5], [6], [7]]
