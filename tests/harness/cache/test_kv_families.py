"""DESIGN §4 across architectures: measured KV bytes equal the analytic ones, every step.

For a tiny model of each family, after the prefill and after every decode step, batch 1 and 2,
the logical bytes of the returned cache equal `analytic_kv(config, seq_len=positions)`, layer by
layer. Prompts (10 positions) overflow the sliding windows (8), so trimming is exercised.
Families (tests/kv_configs.py): llama, qwen2 with and without a sliding window, qwen3, mistral,
gemma, gemma2, gemma3_text, gemma3n_text (KV sharing), phi3, gpt2, falcon (both cache layouts),
gpt_bigcode, deepseek_v2/v3 (MLA), jamba and qwen3_next (hybrids). Families missing from the
installed transformers (on 4.46: qwen3, gemma3_text, gemma3n_text, deepseek_v2/v3, qwen3_next)
skip with the reason.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from packaging.version import Version

from benchmarks.harness.cache.kv import SLIDING_TRIM_SINCE, analytic_kv, kv_bytes_per_token
from benchmarks.harness.cache.state import analytic_state
from benchmarks.harness.errors import KVError
from tests.kv_configs import FAMILIES, WINDOW, build_tiny, config_for, run_loop

PROMPT_LEN = 10
NEW_TOKENS = 4


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_measured_kv_equals_analytic_after_prefill_and_every_step(family):
    """Per layer and in total, for batch 1 and batch 2."""
    config = FAMILIES[family]()
    model = build_tiny(config)
    for batch in (1, 2):
        steps = list(run_loop(model, batch=batch, prompt_len=PROMPT_LEN, new_tokens=NEW_TOKENS))
        assert [s.positions for s in steps] == [10, 11, 12, 13]
        for step in steps:
            layout = analytic_kv(config, dtype=torch.float32, batch=batch, seq_len=step.positions)
            measured = step.measurement
            assert measured.logical_bytes == layout.total_bytes, (family, batch, step.positions)
            expected = tuple(layer.bytes for layer in layout.layers)
            assert measured.per_layer_bytes == expected[: len(measured.per_layer_bytes)]
            assert sum(expected[len(measured.per_layer_bytes) :]) == 0  # absent = empty layers
            assert measured.storage_bytes >= measured.logical_bytes > 0


@pytest.mark.parametrize("family", ["llama", "gpt2", "falcon-new-architecture"])
def test_cache_grows_by_bytes_per_token_each_step(family):
    """Without sliding layers, every decode step adds exactly `kv_bytes_per_token`."""
    config = FAMILIES[family]()
    model = build_tiny(config)
    per_token = kv_bytes_per_token(config, dtype=torch.float32, batch=2)
    sizes = [
        s.measurement.logical_bytes for s in run_loop(model, batch=2, prompt_len=4, new_tokens=3)
    ]
    assert sizes == [4 * per_token, 5 * per_token, 6 * per_token]


def test_hybrid_layers_report_fixed_state_but_no_kv():
    """Jamba's Mamba layers hold conv/SSM state (`state_bytes`) and zero per-token KV bytes."""
    config = FAMILIES["jamba"]()
    model = build_tiny(config)
    steps = list(run_loop(model, batch=1, prompt_len=PROMPT_LEN, new_tokens=3))
    kinds = [
        layer.kind for layer in analytic_kv(config, dtype=torch.float32, batch=1, seq_len=1).layers
    ]
    assert [k == "full_attention" for k in kinds] == [False, True, False, True]
    for step in steps:
        assert step.measurement.state_bytes > 0
        assert [b == 0 for b in step.measurement.per_layer_bytes] == [True, False, True, False]
    assert steps[0].measurement.state_bytes == steps[-1].measurement.state_bytes


def test_sliding_layers_stop_growing_at_window_minus_one_on_recent_transformers():
    """Mistral's layers keep W - 1 positions from 4.56 on; older caches keep all of them."""
    config = FAMILIES["mistral-sliding"]()
    layout = analytic_kv(config, dtype=torch.float32, batch=1, seq_len=3 * WINDOW)
    held = {layer.k_shape[2] for layer in layout.layers}
    trims = Version(transformers.__version__) >= SLIDING_TRIM_SINCE
    assert held == ({WINDOW - 1} if trims else {3 * WINDOW})


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_analytic_state_equals_measured_state_after_prefill_and_every_step(family, dtype):
    """Fixed conv/recurrent state: `kv_state.analytic_state` == measured `state_bytes`, every
    family (0 for pure attention), batch 1 and 2; per layer for the hybrids."""
    config = FAMILIES[family]()
    model = build_tiny(config).to(dtype)
    for batch in (1, 2):
        layout = analytic_state(config, dtype=dtype, batch=batch)
        steps = list(run_loop(model, batch=batch, prompt_len=PROMPT_LEN, new_tokens=3))
        for step in steps:
            assert step.measurement.state_bytes == layout.total_bytes, (family, batch, step)
    hybrid = family in ("jamba", "qwen3_next")
    assert (layout.total_bytes > 0) == hybrid
    if hybrid:
        layers = analytic_kv(config, dtype=dtype, batch=1, seq_len=1).layers
        kinds = [layer.kind for layer in layers]
        assert [layer.index for layer in layout.layers] == [
            i for i, kind in enumerate(kinds) if kind != "full_attention"
        ]


def test_qwen3_next_80b_state_is_the_measured_74_mib_beside_12_mib_of_kv():
    """The public Qwen3-Next-80B-A3B config, bf16, P = 512 (FACTS §7, measured on 5.24):
    12,582,912 B of K/V in 12 attention layers, 77,856,768 B of state in 36 linear ones."""
    config = config_for(
        "qwen3_next",
        hidden_size=2048, num_hidden_layers=48, full_attention_interval=4, num_attention_heads=16,
        num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_key_head_dim=128,
        linear_num_value_heads=32, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        vocab_size=151936, max_position_embeddings=262144,
    )  # fmt: skip
    state = analytic_state(config, dtype=torch.bfloat16, batch=1)
    kv = analytic_kv(config, dtype=torch.bfloat16, batch=1, seq_len=512)
    assert len(state.layers) == 36
    assert kv.total_bytes == 12_582_912
    assert state.total_bytes == 77_856_768


def test_an_unverified_stateful_family_is_refused_not_guessed():
    config = FAMILIES["jamba"]()
    config.model_type = "not_jamba"
    with pytest.raises(KVError, match="has not verified"):
        analytic_state(config, dtype=torch.float32, batch=1)
