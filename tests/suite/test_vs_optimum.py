"""Spec of `python -m benchmarks.suite.vs_optimum`: optimum-benchmark's per-token timing,
reimplemented, and the one-command comparison on a saved checkpoint (tiny model here)."""

from __future__ import annotations

import functools
import json
import time

import pytest
import torch

from benchmarks.suite import vs_optimum
from tests.engine_fakes import VOCAB, tiny_model


class ShiftedClock:
    """`vs_optimum.time` with a perf_counter a test moves forward: an exact injected delay."""

    offset_s = 0.0

    @classmethod
    def perf_counter(cls) -> float:
        return time.perf_counter() + cls.offset_s


def test_optimum_style_timing_puts_a_decode_delay_in_per_token_and_not_in_prefill(monkeypatch):
    """Timestamps at each step's logits: prefill = first - start; per token = mean difference.
    A 2 s delay in every decode forward is per-token latency, never prefill latency."""
    model = tiny_model("llama")
    forward = model.forward

    @functools.wraps(forward)  # generate reads the forward's signature
    def slow(*args, **kwargs):
        if kwargs["input_ids"].shape[-1] == 1:
            ShiftedClock.offset_s += 2.0
        return forward(*args, **kwargs)

    monkeypatch.setattr(ShiftedClock, "offset_s", 0.0)
    monkeypatch.setattr(vs_optimum, "time", ShiftedClock)
    monkeypatch.setattr(model, "forward", slow)
    ids = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(0))
    prefill_s, per_token_s = vs_optimum.optimum_style_run(model, ids, 5)
    assert 0 < prefill_s < 1.0
    assert per_token_s == pytest.approx(2.0, rel=0.05)


def test_the_command_compares_on_a_saved_checkpoint_and_writes_every_run(tmp_path, capsys):
    out = tmp_path / "vs.json"
    args = ["--model", "tiny-llama", "--dtypes", "float32", "--prompt-len", "8"]
    args += ["--new-tokens", "3", "--runs", "2", "--checkpoint", str(tmp_path / "ckpt")]
    assert vs_optimum.main([*args, "--json", str(out)]) == 0
    assert (tmp_path / "ckpt" / "config.json").exists()
    report = json.loads(out.read_text())
    assert (report["source"], report["new_tokens"], report["runs"]) == ("checkpoint", 3, 2)
    (result,) = report["results"]
    assert set(result["runs"]) == {"ours", "optimum", "instrumented"}
    assert all(len(pairs) == 2 for pairs in result["runs"].values())
    assert result["ttft_ratio"] == pytest.approx(
        result["ours_ttft_s"] / result["optimum_prefill_s"]
    )
    low, mid, high = result["tpot_ratio_quartiles"]
    assert low <= mid <= high
    assert "float32: ttft" in capsys.readouterr().out


def test_bad_arguments_are_a_usage_error():
    with pytest.raises(SystemExit) as info:
        vs_optimum.main(["--new-tokens", "1"])
    assert info.value.code == 2


class FakeEvent:
    """torch.cuda.Event: remembers the stream it was recorded on; times are set by the test."""

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.stream = "none"
        self.at_ms = 0.0

    def record(self, stream=None):
        self.stream = stream

    def elapsed_time(self, other: FakeEvent) -> float:
        return other.at_ms - self.at_ms


def test_cuda_timestamps_are_events_on_the_cells_device_not_the_current_one(monkeypatch):
    """A model on cuda:1 while cuda:0 is current: `event.record()` would time cuda:0's stream."""
    synced = []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: f"stream of {device}")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    cuda1 = torch.device("cuda", 1)
    start = vs_optimum.cuda_event(cuda1)
    stamps = vs_optimum.TokenTimestamps(cuda1)
    scores = torch.zeros(1, 4)
    for _ in range(3):
        assert stamps(torch.zeros(1, 2, dtype=torch.long), scores) is scores
    for index, event in enumerate(stamps.events):
        event.at_ms = 10.0 * (index + 1)
    assert [e.stream for e in (start, *stamps.events)] == ["stream of cuda:1"] * 4
    assert stamps.since(start) == [0.01, 0.02, 0.03]
    assert synced == [cuda1]
