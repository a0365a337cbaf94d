"""Spec of benchmarks/harness/engine.py: the owned prefill/decode loop on tiny real models (CPU).

N new tokens = 1 prefill + (N - 1) decode steps; the final cache holds P + N - 1 positions.
Runs under transformers 4.46.3 (legacy tuples for GPT-2) and 5.24 (`cache` kwarg) alike.
"""

from __future__ import annotations

import time
from typing import ClassVar

import pytest
import torch
import transformers
from packaging.version import Version

from benchmarks.harness import engine
from benchmarks.harness.cache.kv import analytic_kv
from benchmarks.harness.cache.measure import measure_kv
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.errors import EngineError
from benchmarks.harness.model import compat
from tests.engine_fakes import (
    CACHE_KWARG_RENAMED,
    MAX_POSITIONS,
    TRANSFORMERS_VERSION,
    VOCAB,
    no_deprecation_messages,
    tiny_model,
)

CPU = torch.device("cpu")

# Each case: model type, config overrides, prompt length. Mistral with a window of 8 and P = 12
# has its sliding layers already past the window after prefill (they cannot be cropped back).
CASES = {
    "llama": ("llama", {}, 4),
    "gpt2": ("gpt2", {}, 4),
    "mistral-sw8": ("mistral", {"sliding_window": 8}, 12),
    # transformers < 4.56 decodes Gemma-2 correctly only with a HybridCache: the engine refuses
    # it there (compat.unsupported_reason) and these cases skip with that reason.
    "gemma2-sw8": ("gemma2", {"sliding_window": 8, "head_dim": 16}, 12),
}


@pytest.fixture(scope="module")
def models():
    return {name: tiny_model(kind, **overrides) for name, (kind, overrides, _) in CASES.items()}


def engine_for(model) -> Engine:
    """The engine for `model`, or a skip with the reason this transformers cannot run it."""
    reason = compat.unsupported_reason(model.config)
    if reason is not None:
        pytest.skip(reason)
    return Engine(model, CPU)


@pytest.fixture(scope="module")
def llama(models):
    return models["llama"]


def _first_keys(cache) -> torch.Tensor:
    """Layer 0's K tensor `[B, kv_heads, positions, head_dim]`, whatever the cache's form."""
    if isinstance(cache, tuple | list):
        return cache[0][0]
    layers = getattr(cache, "layers", None)
    return layers[0].keys if layers is not None else cache.key_cache[0]


# --- prompts ----------------------------------------------------------------------------------


def test_make_prompt_is_seeded_int64_ids_in_the_vocabulary():
    ids = make_prompt(batch=2, prompt_len=50, vocab_size=VOCAB, seed=7)
    assert ids.shape == (2, 50)
    assert ids.dtype == torch.int64
    assert ids.device == CPU
    assert int(ids.min()) >= 0
    assert int(ids.max()) < VOCAB
    assert torch.equal(ids, make_prompt(2, 50, VOCAB, 7))
    assert not torch.equal(ids, make_prompt(2, 50, VOCAB, 8))


def test_make_prompt_ignores_the_global_torch_seed():
    torch.manual_seed(1)
    first = make_prompt(1, 16, VOCAB, 0)
    torch.manual_seed(2)
    assert torch.equal(first, make_prompt(1, 16, VOCAB, 0))


@pytest.mark.parametrize(("batch", "prompt_len", "vocab"), [(0, 4, 8), (1, 0, 8), (1, 4, 0)])
def test_make_prompt_rejects_non_positive_sizes(batch, prompt_len, vocab):
    with pytest.raises(EngineError, match="positive"):
        make_prompt(batch, prompt_len, vocab, seed=0)


# --- the loop ---------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 2])
def test_generate_returns_b_by_n_ids_and_n_minus_1_steps(llama, batch):
    result = Engine(llama, CPU).generate(make_prompt(batch, 4, VOCAB, 0), new_tokens=5)
    assert result.generated_ids.shape == (batch, 5)
    assert result.generated_ids.device == CPU
    assert len(result.step_s) == 4
    assert len(result.gap_s) == 4
    assert len(result.kv_bytes_per_step) == 4
    assert compat.cache_seq_length(result.cache) == 4 + 5 - 1


def test_cache_grows_4_to_5_to_6_for_p4_and_n3(llama):
    """The worked example: P = 4, N = 3 -> prefill (4), decode step 1 (5), decode step 2 (6)."""
    eng = Engine(llama, CPU)
    prefill = eng.prefill(make_prompt(1, 4, VOCAB, 0))
    lengths = [compat.cache_seq_length(prefill.cache)]
    shapes = [tuple(_first_keys(prefill.cache).shape)]
    token, cache = prefill.next_token, prefill.cache
    for step in range(2):
        token, cache = eng.decode_step(token, cache, 4 + step)
        lengths.append(compat.cache_seq_length(cache))
        shapes.append(tuple(_first_keys(cache).shape))
    assert lengths == [4, 5, 6]
    assert [s[2] for s in shapes] == [4, 5, 6]  # K is [B, kv_heads, positions, head_dim]
    assert shapes[0] == (1, 2, 4, 16)
    assert prefill.next_token.shape == token.shape == (1, 1)

    result = eng.generate(make_prompt(1, 4, VOCAB, 0), new_tokens=3)
    assert compat.cache_seq_length(result.cache) == 6
    per_position = result.kv_bytes_after_prefill // 4
    assert result.kv_bytes_per_step == (5 * per_position, 6 * per_position)


def test_one_new_token_is_prefill_alone(llama):
    result = Engine(llama, CPU).generate(make_prompt(1, 4, VOCAB, 0), new_tokens=1)
    assert result.generated_ids.shape == (1, 1)
    assert result.step_s == result.gap_s == result.kv_bytes_per_step == ()
    assert result.e2e_s >= result.ttft_s
    assert compat.cache_seq_length(result.cache) == 4


def test_greedy_decoding_is_deterministic_for_the_same_seed(llama):
    eng = Engine(llama, CPU)
    first = eng.generate(make_prompt(2, 6, VOCAB, 3), new_tokens=6).generated_ids
    second = eng.generate(make_prompt(2, 6, VOCAB, 3), new_tokens=6).generated_ids
    assert torch.equal(first, second)


@pytest.mark.parametrize("case", list(CASES))
def test_generated_ids_equal_hf_generate_greedy(models, case):
    model, prompt_len = models[case], CASES[case][2]
    ids = make_prompt(2, prompt_len, VOCAB, 0)
    ours = engine_for(model).generate(ids, new_tokens=6).generated_ids
    with torch.inference_mode():
        theirs = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=0,
        )
    assert torch.equal(ours, theirs[:, prompt_len:])


@pytest.mark.parametrize("case", list(CASES))
def test_kv_bytes_after_prefill_and_every_step_match_the_analytic_formula(models, case):
    model, prompt_len = models[case], CASES[case][2]
    result = engine_for(model).generate(make_prompt(2, prompt_len, VOCAB, 0), new_tokens=4)

    def analytic(seq_len: int) -> int:
        return analytic_kv(model.config, dtype=torch.float32, batch=2, seq_len=seq_len).total_bytes

    assert result.kv_bytes_after_prefill == analytic(prompt_len)
    assert result.kv_bytes_per_step == tuple(analytic(prompt_len + i) for i in (1, 2, 3))


@pytest.mark.parametrize("case", list(CASES))
def test_generate_emits_no_deprecation_warnings(models, case):
    model, prompt_len = models[case], CASES[case][2]
    eng = engine_for(model)
    with no_deprecation_messages():
        prefill = eng.prefill(make_prompt(1, prompt_len, VOCAB, 0))
        snapshot = eng.snapshot(prefill.cache)
        eng.decode_step(prefill.next_token, eng.restore(snapshot), snapshot.seq_len)
        eng.generate(make_prompt(1, prompt_len, VOCAB, 0), new_tokens=3)


def test_prefill_asks_for_last_position_logits_and_decode_passes_the_cache_by_its_name(
    llama, monkeypatch
):
    eng = Engine(llama, CPU)
    logits_kwarg = compat.logits_kwarg(llama)
    cache_kwarg = "cache" if CACHE_KWARG_RENAMED else "past_key_values"
    calls: list[dict[str, object]] = []
    forward = llama.forward

    def recording_forward(*args, **kwargs):
        calls.append(kwargs)
        return forward(*args, **kwargs)

    monkeypatch.setattr(llama, "forward", recording_forward)
    prefill = eng.prefill(make_prompt(1, 4, VOCAB, 0))
    eng.decode_step(prefill.next_token, prefill.cache, 4)
    assert logits_kwarg is not None
    assert calls[0][logits_kwarg] == 1
    assert calls[0]["use_cache"] is True
    assert calls[1][cache_kwarg] is prefill.cache
    assert set(calls[1]) & {"cache", "past_key_values"} == {cache_kwarg}


def test_gemma2_past_its_window_matches_generate_or_is_refused_with_the_reason():
    """P = 6, N = 6, W = 8: the last steps run past the window. transformers >= 4.56: the
    engine's tokens equal `generate`'s. Older: a dynamic cache decodes those steps wrongly, so
    the engine refuses Gemma-2 with the reason (and the suite skips its cells with it)."""
    model = tiny_model("gemma2", sliding_window=8, head_dim=16)
    ids = make_prompt(2, 6, VOCAB, 0)
    with torch.inference_mode():
        theirs = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
            pad_token_id=0,
        )[:, 6:]  # fmt: skip
    installed = TRANSFORMERS_VERSION
    if compat.unsupported_reason(model.config) is None:
        assert installed >= Version("4.56")
        ours = Engine(model, CPU).generate(ids, new_tokens=6).generated_ids
        assert torch.equal(ours, theirs)
        return
    assert installed < Version("4.56")
    with pytest.raises(EngineError, match="HybridCache"):
        Engine(model, CPU)
    # The premise of the refusal: the loop with a dynamic cache differs from generate.
    cache_kwarg = compat.cache_kwarg(model)
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True, past_key_values=transformers.DynamicCache())
        tokens = [out.logits[:, -1:].argmax(-1)]
        cache = out.past_key_values
        for _ in range(5):
            out = model(input_ids=tokens[-1], use_cache=True, **{cache_kwarg: cache})
            cache = out.past_key_values
            tokens.append(out.logits[:, -1:].argmax(-1))
    assert not torch.equal(torch.cat(tokens, dim=-1), theirs)


# --- requests the engine refuses --------------------------------------------------------------


@pytest.mark.parametrize("new_tokens", [0, -3])
def test_non_positive_new_tokens_is_an_engine_error(llama, new_tokens):
    with pytest.raises(EngineError, match="new_tokens must be at least 1"):
        Engine(llama, CPU).generate(make_prompt(1, 4, VOCAB, 0), new_tokens)


def test_prompt_plus_new_tokens_beyond_max_positions_is_an_engine_error_naming_the_fix(llama):
    eng = Engine(llama, CPU)
    with pytest.raises(EngineError, match=r"prompt_len \+ new_tokens - 1 = 60 \+ 6 - 1") as info:
        eng.generate(make_prompt(1, 60, VOCAB, 0), new_tokens=6)
    assert f"65 positions exceed the model's {MAX_POSITIONS}" in str(info.value)
    assert "lower prompt_len or new_tokens" in str(info.value)


def test_a_generation_whose_final_cache_fills_every_position_runs(llama):
    # P + N - 1 = 64 = max positions: the last token is produced but never fed back.
    result = Engine(llama, CPU).generate(make_prompt(1, 60, VOCAB, 0), new_tokens=5)
    assert compat.cache_seq_length(result.cache) == MAX_POSITIONS


def test_a_model_in_training_mode_is_refused():
    model = tiny_model("llama").train()
    with pytest.raises(EngineError, match=r"model\.eval\(\)"):
        Engine(model, CPU)


def test_a_model_on_another_device_is_refused(llama):
    with pytest.raises(EngineError, match=r"model\.to\(device\)"):
        Engine(llama, torch.device("meta"))


def test_a_prompt_that_is_not_batch_by_length_is_refused(llama):
    with pytest.raises(EngineError, match=r"\[batch, prompt_len\]"):
        Engine(llama, CPU).generate(torch.zeros(4, dtype=torch.long), new_tokens=2)


# --- snapshot / restore -----------------------------------------------------------------------


@pytest.mark.parametrize("case", list(CASES))
def test_restore_gives_a_fresh_cache_of_exactly_p_positions_that_reproduces_the_next_token(
    models, case
):
    model, prompt_len = models[case], CASES[case][2]
    eng = engine_for(model)
    prefill = eng.prefill(make_prompt(2, prompt_len, VOCAB, 0))
    bytes_after_prefill = measure_kv(prefill.cache).logical_bytes
    snapshot = eng.snapshot(prefill.cache)

    # The original path: two decode steps from the prefill cache.
    first, cache = eng.decode_step(prefill.next_token, prefill.cache, prompt_len)
    second, _ = eng.decode_step(first, cache, prompt_len + 1)

    for _ in range(2):  # every round starts from the same P positions
        restored = eng.restore(snapshot)
        assert compat.cache_seq_length(restored) == prompt_len
        assert measure_kv(restored).logical_bytes == bytes_after_prefill == snapshot.kv_bytes
        again, restored = eng.decode_step(prefill.next_token, restored, prompt_len)
        assert torch.equal(again, first)
        again, _ = eng.decode_step(again, restored, prompt_len + 1)
        assert torch.equal(again, second)


# --- measurements -----------------------------------------------------------------------------


def test_resource_samples_have_the_documented_phases_and_counts(llama):
    result = Engine(llama, CPU).generate(make_prompt(1, 4, VOCAB, 0), new_tokens=4)
    assert [(s.phase, s.step) for s in result.samples] == [
        ("before_prefill", 0),
        ("after_prefill", 0),
        ("after_decode", 1),
        ("after_decode", 2),
        ("after_decode", 3),
    ]
    assert {s.phase for s in result.samples} == set(engine.PHASES)
    assert [s.kv_bytes for s in result.samples] == [
        0,
        result.kv_bytes_after_prefill,
        *result.kv_bytes_per_step,
    ]
    assert result.samples[0].cpu_percent is None  # it closes no phase
    assert all(s.cpu_percent is not None and s.cpu_percent >= 0 for s in result.samples[1:])
    assert all(s.rss_bytes > 0 for s in result.samples)
    assert all(s.allocated_bytes is None and s.reserved_bytes is None for s in result.samples)
    assert result.peak_allocated_bytes is None
    assert result.peak_rss_bytes == max(s.rss_bytes for s in result.samples)
    assert set(result.memory_labels) == {
        "allocated",
        "reserved",
        "peak_allocated",
        "peak_reserved",
        "rss",
    }


def test_times_nest_model_side_inside_client_observed(llama):
    result = Engine(llama, CPU).generate(make_prompt(1, 8, VOCAB, 0), new_tokens=5)
    assert 0 < result.prefill_s <= result.ttft_s
    assert all(0 < step <= gap for step, gap in zip(result.step_s, result.gap_s, strict=True))
    # e2e is the whole call: the client's chain of token arrivals plus the bookkeeping before
    # the first H2D and after the last token.
    assert result.e2e_s >= result.ttft_s + sum(result.gap_s)


def test_bookkeeping_is_excluded_from_model_side_steps_and_included_in_client_gaps(
    llama, monkeypatch
):
    """The engine's KV measurement runs between tokens: a delay there lands in every client
    gap and in e2e (as in any client's loop), never in the model-side step times or TTFT.

    The delay (10 s) is injected into the clock the engine reads, not slept: exact, and far
    above a busy machine's scheduling noise.
    """
    pause_s = 10.0

    class ShiftedClock:
        offset_s = 0.0
        process_time = staticmethod(time.process_time)

        @classmethod
        def perf_counter(cls) -> float:
            return time.perf_counter() + cls.offset_s

    real_measure = engine.measure_kv

    def slow_measure(cache):
        ShiftedClock.offset_s += pause_s
        return real_measure(cache)

    from benchmarks.harness.device import devices  # noqa: PLC0415

    monkeypatch.setattr(engine, "time", ShiftedClock)
    monkeypatch.setattr(devices, "time", ShiftedClock)
    monkeypatch.setattr(engine, "measure_kv", slow_measure)
    result = Engine(llama, CPU).generate(make_prompt(1, 4, VOCAB, 0), new_tokens=4)
    assert max(result.step_s) < pause_s
    assert min(result.gap_s) >= pause_s  # one bookkeeping point before each next token
    assert result.ttft_s < pause_s  # nothing is measured before token 1 reaches the host
    assert result.e2e_s >= 4 * pause_s  # after token 1 and after each of the 3 steps


def test_generate_resets_the_peak_before_its_first_sample(llama, monkeypatch):
    """The before_prefill sample is read after the peak reset: a peak left by earlier work
    never shows up in it (fake CUDA-style counters, on the CPU engine)."""
    from benchmarks.harness.device import memory  # noqa: PLC0415

    events: list[str] = []

    class Counters:
        labels: ClassVar[dict[str, str]] = {
            "allocated": "a",
            "reserved": "r",
            "peak_allocated": "pa",
            "peak_reserved": "pr",
        }

        def __init__(self, device):
            self.peak = 10**9  # left over from whatever ran before

        def reset_peak(self):
            events.append("reset")
            self.peak = 100

        def read(self):
            events.append("read")
            return 100, 200, self.peak, 200

    monkeypatch.setitem(memory._COUNTERS, "cpu", Counters)
    result = Engine(llama, CPU).generate(make_prompt(1, 4, VOCAB, 0), new_tokens=3)
    assert events[:2] == ["reset", "read"]
    assert result.samples[0].peak_allocated_bytes == 100
    assert result.peak_allocated_bytes == 100


def test_prefill_forward_is_what_prefill_times(llama, monkeypatch):
    """`prefill_s` times exactly `prefill_forward`: the benchmark that times `prefill_forward`
    measures the quantity of that name."""
    eng = Engine(llama, CPU)
    calls: list[int] = []
    real = eng.prefill_forward

    def counting(ids, start_cache):
        calls.append(int(ids.shape[-1]))
        return real(ids, start_cache)

    monkeypatch.setattr(eng, "prefill_forward", counting)
    result = eng.prefill(make_prompt(1, 6, VOCAB, 0))
    assert calls == [6]
    token, raw = real(make_prompt(1, 6, VOCAB, 0), eng.start_cache_for(1))
    assert torch.equal(token, result.next_token)
    assert (
        measure_kv(compat.adopt_cache(llama, raw)).logical_bytes
        == measure_kv(result.cache).logical_bytes
    )


# --- the client loop: nothing but forward, argmax, sync and the token's host copy ------------


def test_client_generate_runs_no_bookkeeping(llama, monkeypatch):
    """What the suite times reads no KV bytes, memory counter, RSS or CPU meter: each of them
    would land in every client-observed gap (ttft, ITL, tpot, e2e)."""

    def refuse(*args, **kwargs):
        raise AssertionError("bookkeeping inside the timed client loop")

    monkeypatch.setattr(engine, "measure_kv", refuse)
    monkeypatch.setattr(engine, "PhaseRecorder", refuse)
    eng = Engine(llama, CPU)
    result = eng.client_generate(make_prompt(2, 4, VOCAB, 0), new_tokens=5)
    assert result.generated_ids.shape == (2, 5)
    assert len(result.step_s) == len(result.gap_s) == 4
    assert compat.cache_seq_length(result.cache) == 4 + 5 - 1
    assert not hasattr(result, "samples")
    monkeypatch.undo()
    checked = Engine(llama, CPU).generate(make_prompt(2, 4, VOCAB, 0), new_tokens=5)
    assert torch.equal(checked.generated_ids, result.generated_ids)


def test_a_bookkeeping_delay_reaches_the_asserting_pass_and_never_the_client_loop(
    llama, monkeypatch
):
    """The same injected delay (10 s per KV count, on the clock the engine reads) lands in
    every gap of `generate`, and in none of `client_generate`'s figures."""
    pause_s = 10.0

    class ShiftedClock:
        offset_s = 0.0
        process_time = staticmethod(time.process_time)

        @classmethod
        def perf_counter(cls) -> float:
            return time.perf_counter() + cls.offset_s

    real_measure = engine.measure_kv

    def slow_measure(cache):
        ShiftedClock.offset_s += pause_s
        return real_measure(cache)

    from benchmarks.harness.device import devices  # noqa: PLC0415

    monkeypatch.setattr(engine, "time", ShiftedClock)
    monkeypatch.setattr(devices, "time", ShiftedClock)
    monkeypatch.setattr(engine, "measure_kv", slow_measure)
    eng = Engine(llama, CPU)
    client = eng.client_generate(make_prompt(1, 4, VOCAB, 0), new_tokens=4)
    assert client.e2e_s < pause_s
    assert max(client.gap_s) < pause_s
    checked = eng.generate(make_prompt(1, 4, VOCAB, 0), new_tokens=4)
    assert min(checked.gap_s) >= pause_s
    assert checked.ttft_s < pause_s


def test_the_asserting_pass_flags_sampled_peaks_of_a_device_without_a_peak_api(llama, monkeypatch):
    """An MPS-style allocator (no peak API) gives maxima of samples: every resource sample says
    so, and the record names them `peak_*_sampled_bytes`, not `peak_allocated_bytes`."""
    from benchmarks.harness.device import memory  # noqa: PLC0415

    class SampledCounters:
        peak_sampled = True
        labels: ClassVar[dict[str, str]] = dict.fromkeys(
            ("allocated", "reserved", "peak_allocated", "peak_reserved"), "sampled"
        )

        def __init__(self, device):
            self.reads = 0

        def reset_peak(self):
            pass

        def read(self):
            self.reads += 1
            return 100 + self.reads, 200, 100 + self.reads, 200

    monkeypatch.setitem(memory._COUNTERS, "cpu", SampledCounters)
    result = Engine(llama, CPU).generate(make_prompt(1, 4, VOCAB, 0), new_tokens=3)
    assert all(s.peak_sampled for s in result.samples)
    fields = memory.peak_fields(result.samples)
    assert fields["peak_allocated_bytes"] is None
    assert fields["peak_allocated_sampled_bytes"] == 100 + len(result.samples)
