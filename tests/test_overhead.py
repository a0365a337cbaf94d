"""Overhead: engine vs bare loop vs HF generate, interleaved, with the N = 1/2 edge cases."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from benchmarks.harness.errors import EngineError
from benchmarks.harness.overhead import hf_generate, measure_overhead, per_token_s, ratio

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
        eos_token_id=3,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def prompt(batch: int = 1, length: int = 8) -> torch.Tensor:
    return torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(0))


def test_ratios_on_a_tiny_model_are_finite_and_positive(tiny_llama):
    result = measure_overhead(tiny_llama, CPU, prompt(), 6, rounds=3)
    figures = (
        result.prefill_s,
        result.engine_step_s,
        result.bare_step_s,
        result.engine_generate_token_s,
        result.hf_generate_token_s,
        result.overhead_vs_bare,
        result.overhead_vs_hf_generate,
    )
    assert all(f is not None and math.isfinite(f) and f > 0 for f in figures), result
    assert result.overhead_vs_bare == pytest.approx(result.engine_step_s / result.bare_step_s)
    assert (result.new_tokens, result.rounds) == (6, 3)


def test_one_new_token_has_no_decode_figures(tiny_llama):
    result = measure_overhead(tiny_llama, CPU, prompt(), 1, rounds=2)
    assert result.prefill_s > 0
    assert result.engine_step_s is None
    assert result.bare_step_s is None
    assert result.overhead_vs_bare is None
    assert result.overhead_vs_hf_generate is None


def test_two_new_tokens_measure_the_single_decode_step(tiny_llama):
    result = measure_overhead(tiny_llama, CPU, prompt(batch=2), 2, rounds=1, warmup_rounds=0)
    assert result.engine_step_s is not None
    assert result.bare_step_s is not None
    assert result.overhead_vs_bare is not None


def test_extra_info_fields_do_not_collide_with_the_benchmark_fields(tiny_llama):
    info = measure_overhead(tiny_llama, CPU, prompt(), 2, rounds=1).to_extra_info()
    assert {"overhead_vs_bare", "overhead_vs_hf_generate", "overhead_rounds"} <= set(info)
    assert not {"rounds", "prefill_s", "new_tokens"} & set(info)


def test_hf_generate_makes_exactly_n_tokens_even_past_eos(tiny_llama):
    out = hf_generate(tiny_llama, prompt(), 5)
    assert out.shape == (1, 8 + 5)


@pytest.mark.parametrize(("new_tokens", "rounds"), [(0, 1), (2, 0)])
def test_invalid_requests_are_refused(tiny_llama, new_tokens, rounds):
    with pytest.raises(EngineError):
        measure_overhead(tiny_llama, CPU, prompt(), new_tokens, rounds=rounds)


def test_per_token_time_subtracts_one_prefill_over_n_minus_one_steps():
    assert per_token_s(1.0, 0.4, 4) == pytest.approx(0.2)
    assert per_token_s(1.0, 0.4, 1) is None
    assert per_token_s(0.3, 0.4, 4) is None  # decode drowned in noise: no figure, not a clamp


def test_ratio_is_none_without_a_usable_denominator():
    assert ratio(2.0, 4.0) == 0.5
    assert ratio(None, 4.0) is None
    assert ratio(2.0, 0.0) is None
