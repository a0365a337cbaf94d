"""Overhead: bare vs engine vs instrumented loop vs HF generate, interleaved, N = 1/2 edges.

The figures are measured, not constructed: a known delay injected into the per-step bookkeeping
moves the instrumented loop and `bookkeeping_per_step_s` by the expected amount and leaves the
client loop that the suite times (`engine_generate_token_s`, `overhead_vs_bare`) alone.
"""

from __future__ import annotations

import functools
import math
import time

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from benchmarks.harness import engine, overhead
from benchmarks.harness.device import devices
from benchmarks.harness.errors import EngineError
from benchmarks.harness.overhead import (
    BareLoop,
    bookkeeping_per_step_s,
    hf_generate,
    measure_overhead,
    per_token_s,
    ratio,
)

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


class ShiftedClock:
    """`devices.time` (and the engine's) with a perf_counter that a test can move forward: an
    exact, injected delay inside the measured regions, however busy the machine is (no sleep)."""

    offset_s = 0.0
    process_time = staticmethod(time.process_time)

    @classmethod
    def perf_counter(cls) -> float:
        return time.perf_counter() + cls.offset_s

    @classmethod
    def advance(cls, seconds: float) -> None:
        cls.offset_s += seconds


@pytest.fixture
def clock(monkeypatch) -> type[ShiftedClock]:
    monkeypatch.setattr(ShiftedClock, "offset_s", 0.0)
    monkeypatch.setattr(devices, "time", ShiftedClock)
    monkeypatch.setattr(engine, "time", ShiftedClock)  # the engine's client gaps
    return ShiftedClock


@pytest.fixture
def slow_decode(tiny_llama, monkeypatch, clock) -> None:
    """Every decode forward "takes" 1 s more on the measuring clock: the decode part of each
    loop stays far above a busy machine's noise, so no figure drowns (and becomes None)."""
    forward = tiny_llama.forward

    @functools.wraps(forward)  # the engine reads the forward's signature
    def slow(*args, **kwargs):
        if kwargs["input_ids"].shape[-1] == 1:
            clock.advance(1.0)
        return forward(*args, **kwargs)

    monkeypatch.setattr(tiny_llama, "forward", slow)


def prompt(batch: int = 1, length: int = 8) -> torch.Tensor:
    return torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(0))


def test_ratios_on_a_tiny_model_are_finite_and_positive(tiny_llama, slow_decode):
    result = measure_overhead(tiny_llama, CPU, prompt(), 6, rounds=3)
    figures = (
        result.prefill_s,
        result.bare_generate_token_s,
        result.engine_generate_token_s,
        result.instrumented_generate_token_s,
        result.hf_generate_token_s,
        result.overhead_vs_bare,
        result.overhead_vs_hf_generate,
    )
    assert all(f is not None and math.isfinite(f) and f > 0 for f in figures), result
    assert result.overhead_vs_bare == pytest.approx(
        result.engine_generate_token_s / result.bare_generate_token_s
    )
    assert (result.new_tokens, result.rounds) == (6, 3)


def test_a_known_per_step_delay_in_the_bookkeeping_is_measured_and_kept_out_of_the_client_loop(
    tiny_llama, monkeypatch, clock
):
    """A delay d in the KV count, which the instrumented loop runs at N bookkeeping points per
    generation (after token 1 and after each step): its per-token time grows by N * d / (N - 1)
    and `bookkeeping_per_step_s` reads d; the client loop (what the suite times), the ratio to
    the bare loop and HF generate do not move.

    The delay is injected into the clock the measurement reads (`devices.timed`), not slept:
    exact, and large enough (5 s) that a busy machine's scheduling noise cannot hide it.
    """
    new_tokens, delay_s, rounds = 6, 5.0, 5
    points: list[int] = []
    real_measure = engine.measure_kv

    def slow_measure(cache):
        points.append(1)
        clock.advance(delay_s)
        return real_measure(cache)

    monkeypatch.setattr(engine, "measure_kv", slow_measure)
    delayed = measure_overhead(tiny_llama, CPU, prompt(), new_tokens, rounds=rounds)
    generations = 1 + rounds  # the untimed first call and the rounds
    assert len(points) == generations * new_tokens  # N bookkeeping points per generation

    expected_s = new_tokens * delay_s / (new_tokens - 1)
    assert delayed.instrumented_generate_token_s is not None
    assert delayed.instrumented_generate_token_s == pytest.approx(expected_s, rel=0.1)
    assert delayed.bookkeeping_per_step_s == pytest.approx(delay_s, rel=0.02)
    # The tiny model's per-token time is milliseconds: under 1 % of the delay, if measurable
    # at all on a loaded machine (None when the decode part drowned in noise).
    for untouched in (
        delayed.engine_generate_token_s,
        delayed.bare_generate_token_s,
        delayed.hf_generate_token_s,
    ):
        assert untouched is None or untouched < delay_s / 100
    if delayed.overhead_vs_bare is not None:
        assert delayed.overhead_vs_bare < 10  # the delay would make it thousands


def test_the_bare_loop_syncs_and_copies_every_token_to_the_host_like_the_client_loop(
    tiny_llama, monkeypatch
):
    """Like with like: a bare loop that kept tokens on the device would let an accelerator run
    ahead of Python while the engine waits for every token, and `overhead_vs_bare` would
    measure that lost overlap, not the engine's cost."""
    copies: list[tuple[int, ...]] = []
    real_to = torch.Tensor.to

    def recording_to(self, *args, **kwargs):
        if args == ("cpu",) and self.dtype == torch.int64:
            copies.append(tuple(self.shape))
        return real_to(self, *args, **kwargs)

    syncs: list[object] = []
    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    monkeypatch.setattr(overhead, "device_sync", syncs.append)
    ids = prompt(batch=2)
    BareLoop(tiny_llama, CPU).generate(ids, 5)
    assert copies == [(2, 1)] * 5  # one host copy per token, none of the whole [B, N] at the end
    assert syncs == [CPU] * 5
    copies.clear()
    engine.Engine(tiny_llama, CPU).client_generate(ids, 5)
    assert copies == [(2, 1)] * 5


def test_bookkeeping_per_step_is_the_difference_of_median_gaps():
    assert bookkeeping_per_step_s([0.3, 0.2, 0.25], [0.1, 0.2, 0.15]) == pytest.approx(0.1)
    assert bookkeeping_per_step_s([], [0.1]) is None
    assert bookkeeping_per_step_s([0.1], []) is None


def test_the_bare_loop_generates_the_engines_tokens(tiny_llama):
    ids = prompt(batch=2)
    ours = engine.Engine(tiny_llama, CPU).generate(ids, 5).generated_ids
    assert torch.equal(BareLoop(tiny_llama, CPU).generate(ids, 5), ours)
    assert torch.equal(engine.Engine(tiny_llama, CPU).client_generate(ids, 5).generated_ids, ours)


def test_one_new_token_has_no_decode_figures(tiny_llama):
    result = measure_overhead(tiny_llama, CPU, prompt(), 1, rounds=2)
    assert result.prefill_s > 0
    assert result.engine_generate_token_s is None
    assert result.bare_generate_token_s is None
    assert result.overhead_vs_bare is None
    assert result.overhead_vs_hf_generate is None
    assert result.bookkeeping_per_step_s is None


def test_two_new_tokens_measure_the_single_decode_step(tiny_llama, slow_decode):
    result = measure_overhead(tiny_llama, CPU, prompt(batch=2), 2, rounds=1, warmup_rounds=0)
    assert result.bare_generate_token_s is not None
    assert result.overhead_vs_bare is not None


def test_extra_info_fields_do_not_collide_with_the_benchmark_fields(tiny_llama):
    info = measure_overhead(tiny_llama, CPU, prompt(), 2, rounds=1).to_extra_info()
    assert {
        "overhead_vs_bare",
        "overhead_vs_hf_generate",
        "overhead_rounds",
        "bookkeeping_per_step_s",
        "instrumented_generate_token_s",
    } <= set(info)
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
