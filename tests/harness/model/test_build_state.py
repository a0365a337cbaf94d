"""Spec: one model-building path, and random weights that produce no subnormal floats.

Subnormals run tens of times slower per operation on x86, so a random-weight model that made
them would time differently from a real checkpoint and would depend on the process's
flush-to-zero state. Every op output of a prefill and decode steps is checked, not only module
outputs: an intermediate (an attention softmax, a SiLU gate) is where they would appear.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from benchmarks.harness.device.fpstate import read_fp_state
from benchmarks.harness.engine import Engine
from benchmarks.harness.errors import ModelError
from benchmarks.harness.matrix.parse import load_matrix
from benchmarks.harness.model import compat
from benchmarks.harness.model.models import build_model, load_model_spec
from benchmarks.harness.runmode import decide
from benchmarks.harness.runmode.decide import build_cell_model

CPU = torch.device("cpu")
TINY = ("tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma2", "tiny-gpt2", "tiny-phi3")


def subnormals(tensor: torch.Tensor) -> int:
    """How many float32 elements of `tensor` are subnormal (nonzero, below the smallest normal)."""
    tiny = torch.finfo(torch.float32).tiny
    return int(((tensor != 0) & (tensor.abs() < tiny)).sum())


class SubnormalCounter(TorchDispatchMode):
    """Counts subnormal float32 elements in every aten op's outputs, per op."""

    def __init__(self) -> None:
        super().__init__()
        self.found: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
                count = subnormals(value)
                if count:
                    self.found[str(func)] += count
        return out


def test_the_counter_sees_a_subnormal_an_op_makes():
    torch.set_flush_denormal(False)
    counter = SubnormalCounter()
    with counter:
        torch.full((4,), torch.finfo(torch.float32).tiny) * 0.5
    assert dict(counter.found) == {"aten.mul.Tensor": 4}


@pytest.mark.parametrize("name", TINY)
def test_built_weights_and_every_op_of_prefill_and_decode_have_no_subnormals(name):
    torch.set_flush_denormal(False)  # what a user's process has: subnormals would stay subnormal
    try:
        model = build_model(load_model_spec(name), CPU, torch.float32)
    except ModelError as error:  # a model_type this transformers does not know (4.46: qwen3)
        pytest.skip(str(error))
    unsupported = compat.unsupported_reason(model.config)
    if unsupported is not None:
        pytest.skip(unsupported)
    tensors = [*model.parameters(), *model.buffers()]
    assert {n: subnormals(t) for n, t in model.state_dict().items() if subnormals(t)} == {}
    assert tensors
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, 32), generator=torch.Generator().manual_seed(0))
    counter = SubnormalCounter()
    engine = Engine(model, CPU)
    with torch.inference_mode(), counter:
        engine.generate(ids, 4)  # the suite's own loop: a prefill and 3 decode steps
    assert dict(counter.found) == {}


def test_a_cells_model_and_the_plain_build_are_the_same_model(monkeypatch):
    """The two entry points ran at different speeds once (issue 19); they are one path: the
    cell's build is `build_model` with the cell's seed and attention, nothing else, and gives
    the same modules, values, dtypes, attention kernel and process FP state."""
    (cell,) = [
        c
        for c in load_matrix(Path("matrix/smoke.yaml")).cells
        if c.model == "tiny-llama" and c.dtype == "float32"
    ][:1]
    spec = load_model_spec("tiny-llama")
    calls: list[tuple[Any, ...]] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return build_model(*args, **kwargs)

    monkeypatch.setattr(decide, "build_model", spy)
    plain = build_model(spec, CPU, torch.float32, seed=cell.seed, attention=cell.attention)
    state = read_fp_state()
    of_cell = build_cell_model(spec, cell, CPU, torch.float32)
    assert len(calls) == 1  # through build_model, once
    assert read_fp_state() == state
    assert [type(m) for m in plain.modules()] == [type(m) for m in of_cell.modules()]
    assert plain.config._attn_implementation == of_cell.config._attn_implementation
    a, b = plain.state_dict(), of_cell.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert torch.equal(a[key], b[key]), key
    assert plain.training is of_cell.training is False
