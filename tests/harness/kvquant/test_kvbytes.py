"""Quantized KV caches: analytic bytes == measured bytes after the prefill and after every step.

A tiny Llama (hidden 64, 2 layers, 2 KV heads of 16) runs a prefill of P = 9 positions (not a
multiple of the group size 16, and 18 groups per tensor: quanto's 2-bit rows need padding) and
9 decode steps with a residual window of R = 4 (flushes after steps 4 and 8), for every backend
and float32 / bfloat16 / float16, on the installed transformers (both versions under nox).
After each point the measured bytes of every layer equal `analytic_quantized_kv`, and the
residual each layer holds equals `residual_positions`. Backends this transformers refuses skip
with the reason, and a separate test asserts which those are and that they really fail.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from packaging.version import Version

from benchmarks.harness.cache.measure import measure_kv
from benchmarks.harness.errors import KVError
from benchmarks.harness.kvquant.backends import (
    FP8_KV_SINCE,
    KV_QUANT,
    QUANTO_KV_FIXED_SINCE,
    RESIDUAL_PERIOD_R_SINCE,
    kv_quant_unsupported_reason,
    layered_api,
    make_quantized_cache,
    residual_positions,
)
from benchmarks.harness.kvquant.kvbytes import (
    analytic_quantized_kv,
    kv_dequant_read_bytes_estimate,
    quantized_kv_bytes_per_token,
)
from benchmarks.harness.model import compat
from tests.kv_configs import VOCAB, build_tiny, llama, qwen2_sliding

VERSION = Version(transformers.__version__)
PROMPT_LEN = 9
STEPS = 9
GROUP = 16
RESIDUAL = 4
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _skip_unless_supported(kv_quant, config):
    reason = kv_quant_unsupported_reason(kv_quant, config, "cpu")
    if reason is not None:
        pytest.skip(reason)


def points(model, cache, *, batch, prompt_len, steps):
    """Prefill, then `steps` greedy steps on `cache`; yields (positions, cache) at each point."""
    kwarg = compat.cache_kwarg(model)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (batch, prompt_len), generator=generator)
    with torch.inference_mode():
        outputs = model(input_ids=ids, use_cache=True, **{kwarg: cache})
        yield prompt_len, compat.output_cache(outputs)
        for step in range(1, steps + 1):
            token = outputs.logits[:, -1:, :].argmax(dim=-1)
            outputs = model(input_ids=token, use_cache=True, **{kwarg: cache})
            yield prompt_len + step, compat.output_cache(outputs)


def held_residual(cache, index):
    """Positions layer `index` holds unquantized (its residual keys; a 1-D tensor is empty)."""
    keys = cache.layers[index].keys if layered_api() else cache.key_cache[index]
    return int(keys.shape[-2]) if keys.dim() == 4 else 0


def check_every_point(model, kv_quant, *, dtype, batch, prompt_len, steps, group, residual):
    cache = make_quantized_cache(model, kv_quant, group_size=group, residual=residual, batch=batch)
    seen = []
    for positions, current in points(model, cache, batch=batch, prompt_len=prompt_len, steps=steps):
        expected = analytic_quantized_kv(
            model.config,
            dtype=dtype,
            batch=batch,
            prompt_len=prompt_len,
            seq_len=positions,
            kv_quant=kv_quant,
            group_size=group,
            residual=residual,
        )
        measured = measure_kv(current)
        where = (kv_quant, dtype, positions)
        assert measured.per_layer_bytes == tuple(lay.bytes for lay in expected.layers), where
        assert measured.logical_bytes == expected.total_bytes, where
        held = residual_positions(kv_quant, positions - prompt_len, residual)
        assert [held_residual(current, i) for i in range(2)] == [held, held], where
        assert compat.cache_seq_length(current) == positions, where
        seen.append(held)
    return seen


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("kv_quant", sorted(KV_QUANT))
def test_analytic_equals_measured_after_prefill_and_every_step_across_two_flushes(kv_quant, dtype):
    config = llama()
    _skip_unless_supported(kv_quant, config)
    model = build_tiny(config).to(dtype)
    seen = check_every_point(
        model,
        kv_quant,
        dtype=dtype,
        batch=1,
        prompt_len=PROMPT_LEN,
        steps=STEPS,
        group=GROUP,
        residual=RESIDUAL,
    )
    if kv_quant == "fp8":  # no residual: every position is stored in fp8 at once
        assert seen == [0] * (STEPS + 1)
    else:  # empty after the prefill, then j mod R: flushed after steps 4 and 8
        assert seen == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]


@pytest.mark.parametrize("kv_quant", ["hqq2", "hqq8", "quanto4"])
def test_a_group_size_that_does_not_divide_head_dim_batch_2(kv_quant):
    # G = 24 does not divide head_dim 16 (nor H*D = 32); with P = 9 and R = 3 every quantized
    # length is a multiple of 3, so 24 divides H*T*D = 32*T at every flush.
    config = llama()
    _skip_unless_supported(kv_quant, config)
    model = build_tiny(config)
    seen = check_every_point(
        model, kv_quant, dtype=torch.float32, batch=2, prompt_len=9, steps=7, group=24, residual=3
    )
    assert seen == [0, 1, 2, 0, 1, 2, 0, 1]


def test_a_residual_window_of_one_follows_the_version_s_flush_rule():
    # From 5.20 R = 1 flushes at every step; before, an emptied residual is 1-D and fails the
    # flush test's `dim() == 4`, so the residual alternates 1, 0, 1, 0.
    config = llama()
    _skip_unless_supported("hqq4", config)
    seen = check_every_point(
        build_tiny(config),
        "hqq4",
        dtype=torch.float32,
        batch=1,
        prompt_len=8,
        steps=4,
        group=GROUP,
        residual=1,
    )
    assert seen == ([0] * 5 if VERSION >= RESIDUAL_PERIOD_R_SINCE else [0, 1, 0, 1, 0])


def test_hand_computed_bytes_pin_the_formulas():
    # One K tensor of the tiny Llama: B = 1, H = 2, T = 9, D = 16 -> N = 288, G = 16 -> 18
    # groups. float32 scales and zero points: 18 * 4 bytes each.
    config = llama()

    def layer_bytes(kv_quant, dtype=torch.float32, seq_len=9):
        layout = analytic_quantized_kv(
            config,
            dtype=dtype,
            batch=1,
            prompt_len=9,
            seq_len=seq_len,
            kv_quant=kv_quant,
            group_size=16,
            residual=4,
        )
        return layout.layers[0].bytes // 2  # K alone (V has the same shape)

    assert layer_bytes("hqq4") == 144 + 72 + 72  # N * 4/8 packed
    assert layer_bytes("hqq2") == 72 + 72 + 72
    assert layer_bytes("hqq8") == 288 + 72 + 72
    assert layer_bytes("quanto4") == 9 * 16 + 72 + 72  # 18 rows -> 9 byte rows of 16
    assert layer_bytes("quanto2") == 5 * 16 + 72 + 72  # 18 rows -> 5 byte rows (padded)
    assert layer_bytes("fp8") == 288 + 4
    assert layer_bytes("hqq4", torch.bfloat16) == 144 + 36 + 36
    # Two steps later: 9 quantized positions and 2 residual ones of 2*16 float32 elements.
    assert layer_bytes("hqq4", seq_len=11) == 144 + 72 + 72 + 2 * 32 * 4
    assert layer_bytes("fp8", seq_len=11) == 11 * 32 + 4


def test_bytes_per_token_and_the_dequantization_estimate():
    config = llama()  # 2 layers x (K + V) x 32 elements per position = 128 elements
    per_token = quantized_kv_bytes_per_token
    assert per_token(config, dtype=torch.float32, kv_quant="hqq4", group_size=16) == 128.0
    assert per_token(config, dtype=torch.bfloat16, kv_quant="quanto2", group_size=64) == 40.0
    assert per_token(config, dtype=torch.float16, kv_quant="fp8", group_size=64, batch=2) == 256.0
    # Step from 11 positions (9 quantized, 2 residual), float32 hqq4: per tensor the 288
    # quantized bytes plus the dequantized 9 * 32 * 4 = 1152 dense bytes; 4 tensors.
    estimate = kv_dequant_read_bytes_estimate(
        config,
        dtype=torch.float32,
        batch=1,
        prompt_len=9,
        seq_len=11,
        kv_quant="hqq4",
        group_size=16,
        residual=4,
    )
    assert estimate == 4 * (288 + 1152)


def test_a_group_size_that_cannot_divide_the_prefill_is_a_kv_error():
    with pytest.raises(KVError, match="group size 24 does not divide"):
        analytic_quantized_kv(
            llama(),
            dtype=torch.float32,
            batch=1,
            prompt_len=5,
            seq_len=5,
            kv_quant="hqq4",
            group_size=24,
            residual=4,
        )


def test_which_backends_this_transformers_refuses_and_that_they_really_fail():
    config = llama()
    reasons = {
        kv_quant: kv_quant_unsupported_reason(kv_quant, config, "cpu") for kv_quant in KV_QUANT
    }
    assert all(reasons[k] is None for k in ("hqq2", "hqq4", "hqq8")), reasons
    if layered_api() and VERSION >= FP8_KV_SINCE:
        assert all(reason is None for reason in reasons.values()), reasons
        return
    assert "needs transformers >= 5.21.0" in str(reasons["fp8"])
    with pytest.raises(KVError, match="fp8 needs transformers"):
        make_quantized_cache(build_tiny(config), "fp8", group_size=64, residual=4, batch=1)
    if VERSION < QUANTO_KV_FIXED_SINCE:
        assert "raises; use transformers >= 4.47.0" in str(reasons["quanto4"])
        model = build_tiny(config)
        cache = make_quantized_cache(model, "quanto4", group_size=16, residual=4, batch=1)
        with pytest.raises(ValueError, match="shift must be specified"):
            next(points(model, cache, batch=1, prompt_len=8, steps=0))


def test_sliding_window_layers_on_this_version():
    config = qwen2_sliding()  # layer 0 full, layers 1-2 sliding, window 8
    reason = kv_quant_unsupported_reason("hqq4", config, "cpu")
    if layered_api():
        assert "full-attention layers only; qwen2 has sliding_attention layers" in str(reason)
        with pytest.raises(ValueError, match="only full attention layers"):
            transformers.QuantizedCache(backend="hqq", config=config)
        return
    # 4.4x: the quantized cache (like the dynamic one) keeps every position of a sliding
    # layer, past the window of 8 too: modelled exactly.
    assert reason is None
    model = build_tiny(config)
    cache = make_quantized_cache(model, "hqq4", group_size=16, residual=4, batch=1)
    for positions, current in points(model, cache, batch=1, prompt_len=10, steps=3):
        expected = analytic_quantized_kv(
            config,
            dtype=torch.float32,
            batch=1,
            prompt_len=10,
            seq_len=positions,
            kv_quant="hqq4",
            group_size=16,
            residual=4,
        )
        assert measure_kv(current).per_layer_bytes == tuple(x.bytes for x in expected.layers)
