"""The fence: an MLX call is timed only once `mx.eval` has run its graph.

A fake model returns logits whose evaluation takes a known time (a chain of matrix products,
timed evaluated beforehand), while building its graph takes microseconds. The engine's timed
decode step, read on the suite's MLX clock, must hold that evaluation; with the fence removed
(`engine.fence` a no-op) the same reading falls to graph-building time, which shows the check
fails on the defect it guards against.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import pytest
import torch

from benchmarks.harness.mlx import engine as mlx_engine
from benchmarks.harness.mlx.engine import MlxEngine
from benchmarks.harness.mlx.runtime import synced_clock


class SlowLogits:
    """A stand-in model: `[B, 1]` tokens -> `[B, 1, 8]` logits behind `depth` lazy matmuls."""

    layers: ClassVar[list[Any]] = []

    def __init__(self, mx, depth: int = 8, size: int = 256) -> None:
        self._mx = mx
        self.depth = depth
        self.weight = mx.random.normal((size, size)) / size**0.5
        mx.eval(self.weight)

    def __call__(self, token, cache=None):
        x = self.weight
        for _ in range(self.depth):
            x = x @ self.weight
        return self._mx.zeros((token.shape[0], 1, 8)) + x[:1, :8].reshape(1, 1, 8)


def _engine(model) -> MlxEngine:
    return MlxEngine(model, torch.device("cpu"), None)


def _step_s(mx, engine: MlxEngine) -> float:
    """One decode step between two reads of the suite's MLX clock (`runtime.synced_clock`)."""
    clock = synced_clock()
    token = mx.zeros((1, 1), dtype=mx.int32)
    start = clock()
    engine.decode_step(token, [], 0)
    return clock() - start


def _evaluation_s(mx, model) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        mx.eval(model(mx.zeros((1, 1), dtype=mx.int32)))
        best = min(best, time.perf_counter() - started)
    return best


def test_a_step_is_timed_through_its_evaluation(mx):
    model = SlowLogits(mx)
    known_s = _evaluation_s(mx, model)
    assert known_s > 0.005, "the stand-in must take measurable time to evaluate"
    timed = min(_step_s(mx, _engine(model)) for _ in range(3))
    assert timed >= 0.5 * known_s, (timed, known_s)


def test_without_the_fence_the_timer_would_measure_graph_building(mx, monkeypatch):
    model = SlowLogits(mx)
    known_s = _evaluation_s(mx, model)
    monkeypatch.setattr(mlx_engine, "fence", lambda *outputs: None)
    unfenced = min(_step_s(mx, _engine(model)) for _ in range(3))
    assert unfenced < 0.5 * known_s, (unfenced, known_s)  # the bound above catches this


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_the_engine_fences_every_timed_phase(mx, monkeypatch, phase):
    """Each phase calls `fence` last, with the token and the cache's arrays."""
    calls: list[tuple] = []
    real = mlx_engine.fence
    monkeypatch.setattr(mlx_engine, "fence", lambda *out: (calls.append(out), real(*out)))
    engine = _engine(SlowLogits(mx, depth=1, size=16))
    ids = mx.zeros((1, 5), dtype=mx.int32)
    if phase == "prefill":
        engine.prefill_forward(ids, [])
        assert len(calls) == 2  # the 4 first tokens (cache only), then token 1 and the cache
    else:
        engine.decode_step(ids[:, :1], [], 0)
        assert len(calls) == 1
    assert calls[-1][0].shape == (1, 1)  # the token comes first in the last fence
