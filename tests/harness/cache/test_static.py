"""Static caches (DESIGN §9): allocated and used bytes, analytic == measured, every step.

For a tiny model of each family (tests/kv_configs.py), batch 1 and 2, a static cache of 16
positions is filled by a prefill of 10 positions (overflowing the sliding window of 8) and 3
decode steps; after the prefill and after every step the allocated bytes (whole K/V tensors)
and the used bytes (written positions) equal the analytic ones, layer by layer. Families whose
static cache this transformers cannot build, or phasebench does not model, skip with the reason.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from benchmarks.harness.cache.measure import measure_kv
from benchmarks.harness.cache.static import (
    analytic_static_kv,
    is_static_cache,
    make_static_cache,
    measure_static_kv,
    unsupported_reason,
)
from benchmarks.harness.errors import KVError
from benchmarks.harness.model import compat
from tests.kv_configs import FAMILIES, VOCAB, WINDOW, build_tiny

PROMPT_LEN = 10
NEW_TOKENS = 4
CACHE_LEN = 16


def static_loop(model, *, batch, prompt_len, new_tokens, cache_len):
    """Prefill + (new_tokens - 1) greedy steps on a static cache; yields (positions, cache)."""
    kwarg = compat.cache_kwarg(model)
    ids = torch.randint(0, VOCAB, (batch, prompt_len), generator=torch.Generator().manual_seed(0))
    cache = make_static_cache(model, batch=batch, max_cache_len=cache_len)
    with torch.inference_mode():
        outputs = model(input_ids=ids, use_cache=True, **{kwarg: cache})
        assert compat.output_cache(outputs) is cache
        yield prompt_len, cache
        for step in range(1, new_tokens):
            token = outputs.logits[:, -1:, :].argmax(dim=-1)
            outputs = model(input_ids=token, use_cache=True, **{kwarg: cache})
            yield prompt_len + step, compat.output_cache(outputs)


def _model_class(config):
    return transformers.AutoModelForCausalLM._model_mapping[type(config)]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_static_allocated_and_used_bytes_match_after_prefill_and_every_step(family):
    config = FAMILIES[family]()
    reason = unsupported_reason(config, _model_class(config))
    if reason is not None:
        pytest.skip(reason)
    model = build_tiny(config)
    for batch in (1, 2):
        seen = []
        for positions, cache in static_loop(
            model, batch=batch, prompt_len=PROMPT_LEN, new_tokens=NEW_TOKENS, cache_len=CACHE_LEN
        ):
            assert is_static_cache(cache)
            seen.append(positions)
            expected = analytic_static_kv(
                config, dtype=torch.float32, batch=batch, max_cache_len=CACHE_LEN, seq_len=positions
            )
            measured = measure_static_kv(cache)
            assert measured.per_layer() == expected.per_layer(), (family, batch, positions)
            # The allocated figure is what the generic KV reader sees for a static cache.
            assert measure_kv(cache).logical_bytes == expected.allocated_bytes
            assert 0 < expected.used_bytes <= expected.allocated_bytes
        assert seen == [10, 11, 12, 13]


def test_a_full_layer_allocates_the_whole_length_and_uses_what_was_written():
    config = FAMILIES["llama"]()
    layout = analytic_static_kv(config, dtype=torch.float16, batch=2, max_cache_len=64, seq_len=5)
    # 2 layers x (K + V) x batch 2 x 2 KV heads x head_dim 16 x 2 bytes per position.
    per_position = 2 * 2 * 2 * 2 * 16 * 2
    assert layout.allocated_bytes == 64 * per_position
    assert layout.used_bytes == 5 * per_position


def test_sliding_layers_allocate_the_window_itself_not_window_minus_one():
    config = FAMILIES["mistral-sliding"]()
    if unsupported_reason(config) is not None:
        pytest.skip(str(unsupported_reason(config)))
    layout = analytic_static_kv(config, dtype=torch.float32, batch=1, max_cache_len=64, seq_len=20)
    assert {layer.allocated_positions for layer in layout.layers} == {WINDOW}
    assert {layer.used_positions for layer in layout.layers} == {WINDOW}
    short = analytic_static_kv(config, dtype=torch.float32, batch=1, max_cache_len=6, seq_len=5)
    assert {(layer.allocated_positions, layer.used_positions) for layer in short.layers} == {(6, 5)}


def test_more_positions_than_the_cache_holds_is_an_error_naming_the_fix():
    with pytest.raises(KVError, match="raise max_cache_len"):
        analytic_static_kv(
            FAMILIES["llama"](), dtype=torch.float32, batch=1, max_cache_len=4, seq_len=5
        )


def test_a_zero_filled_but_unwritten_cache_measures_allocated_but_no_used_bytes():
    config = FAMILIES["llama"]()
    model = build_tiny(config)
    (_, cache), *_ = static_loop(model, batch=1, prompt_len=3, new_tokens=1, cache_len=8)
    before = measure_static_kv(cache)
    with torch.inference_mode():
        cache.reset()  # zeroes every tensor in place: still allocated, nothing written
    after = measure_static_kv(cache)
    assert after.allocated_bytes == before.allocated_bytes > 0
    assert (before.used_bytes, after.used_bytes) == (before.allocated_bytes * 3 // 8, 0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_make_static_cache_allocates_and_marks_every_layer_before_the_first_forward(family):
    """Allocated ahead of the prefill (not inside it, where a compiled prefill would create the
    buffers as graph outputs), as inference tensors, each marked as a fixed address for
    compiled graphs and CUDA graphs."""
    config = FAMILIES[family]()
    reason = unsupported_reason(config, _model_class(config))
    if reason is not None:
        pytest.skip(reason)
    cache = make_static_cache(build_tiny(config), batch=2, max_cache_len=CACHE_LEN)
    expected = analytic_static_kv(
        config, dtype=torch.float32, batch=2, max_cache_len=CACHE_LEN, seq_len=0
    )
    assert measure_static_kv(cache).allocated_bytes == expected.allocated_bytes > 0
    buffers = [t for t in compat._all_tensors(cache) if t.dim() == 4]
    assert buffers
    assert all(t.is_inference() for t in buffers)
    assert all(hasattr(t, "_dynamo_static_input_type") for t in buffers)
