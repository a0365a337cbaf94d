"""The kernels a timed call ran (`benchmarks.suite.oplist`): the profiled top operators, the
refusal to call an eager step compiled, and the note a record carries about its method's kernel."""

from __future__ import annotations

import pytest
import torch

from benchmarks.suite.oplist import RanEagerError, kernel_note, top_ops

CPU = torch.device("cpu")


def _matmul():
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    return lambda: torch.mm(a, b)


def test_the_top_operators_of_a_call_with_their_share_and_count():
    ops = top_ops(CPU, _matmul, calls=3)
    assert ops[0]["op"] == "aten::mm"
    assert ops[0]["calls"] == 1  # per call, over the three profiled
    assert 0.0 < ops[0]["self_share"] <= 1.0
    assert sum(o["self_share"] for o in ops) <= 1.0 + 1e-6


def test_a_compiled_cell_whose_step_ran_eager_is_refused():
    with pytest.raises(RanEagerError, match="ran no compiled region"):
        top_ops(CPU, _matmul, compiled=True, calls=1)
    compiled = torch.compile(lambda a: a * 2 + 1, backend="eager")
    x = torch.randn(8)
    compiled(x)  # compile outside the profile
    assert top_ops(CPU, lambda: lambda: compiled(x), compiled=True, calls=1) is not None


def test_the_note_says_whether_the_methods_kernel_ran():
    ran = [{"op": "aten::_weight_int8pack_mm", "self_share": 0.34, "calls": 210}]
    assert kernel_note("int8wo", "cpu", True, ran) == (
        "aten::_weight_int8pack_mm ran: 34% of the step's own time"
    )
    other = [{"op": "aten::mm", "self_share": 0.8, "calls": 211}]
    note = kernel_note("int8wo", "cpu", True, other)
    assert note == "aten::_weight_int8pack_mm is not among the step's top operators (aten::mm 80%)"
    assert "converts the whole int8 weight" in (kernel_note("int8wo", "cpu", False, other) or "")
    assert kernel_note("int4wo-g64", "cpu", False, other) is not None
    assert kernel_note("none", "cpu", False, other) is None
