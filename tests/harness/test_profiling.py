"""Profiling: one owned generation traced with named phase ranges, and no timings handed back."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from benchmarks.harness.errors import EngineError
from benchmarks.harness.profiling import DECODE_RANGE, PREFILL_RANGE, profile_generation

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny_llama():
    config = AutoConfig.for_model(
        "llama",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def prompt(length: int = 8) -> torch.Tensor:
    return torch.randint(0, 128, (1, length), generator=torch.Generator().manual_seed(0))


def test_trace_is_valid_json_with_prefill_and_every_decode_step(tiny_llama, tmp_path):
    trace = tmp_path / "profiles" / "trace.json"
    artifact = profile_generation(tiny_llama, CPU, prompt(), 3, trace)
    events = json.loads(trace.read_text())["traceEvents"]
    names = {event.get("name") for event in events}
    expected = (PREFILL_RANGE, DECODE_RANGE.format(i=1), DECODE_RANGE.format(i=2))
    assert artifact.ranges == expected
    assert set(expected) <= names
    assert DECODE_RANGE.format(i=3) not in names  # N = 3: one prefill + two decode steps
    assert artifact.trace_path == trace
    assert artifact.activities == ("cpu",)
    assert artifact.mps_signposts is False


def test_the_artifact_carries_no_timings(tiny_llama, tmp_path):
    """Profiler overhead distorts latency: nothing here may look like a history figure."""
    artifact = profile_generation(tiny_llama, CPU, prompt(), 2, tmp_path / "t.json")
    for field in dataclasses.fields(artifact):
        assert not field.name.endswith("_s")
        assert not isinstance(getattr(artifact, field.name), float)


def test_single_token_traces_only_the_prefill(tiny_llama, tmp_path):
    artifact = profile_generation(
        tiny_llama, CPU, prompt(), 1, tmp_path / "t.json", warmup_generations=0
    )
    assert artifact.ranges == (PREFILL_RANGE,)


def test_zero_tokens_is_refused(tiny_llama, tmp_path):
    with pytest.raises(EngineError, match="at least 1"):
        profile_generation(tiny_llama, CPU, prompt(), 0, tmp_path / "t.json")
