"""KV accounting (DESIGN §4): the analytic rules from configs, and `measure_kv` on every cache form.

The public configs' figures are the ones in FACTS §3 and the seeds: Qwen2.5-1.5B FP16 adds
28,672 B per token (14,680,064 B after a 512-token prompt, 15,568,896 B after 32 new tokens),
a Llama-2-7B-shaped model 524,288 B per token and 2 GiB at 4,096 tokens.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from packaging.version import Version

from benchmarks.harness.cache import kv
from benchmarks.harness.cache.kv import analytic_kv, kv_bytes_per_token
from benchmarks.harness.cache.measure import KVMeasurement, measure_kv
from benchmarks.harness.errors import KVError
from benchmarks.harness.model.models import load_model_spec
from tests.kv_configs import FAMILIES, build_tiny, config_for, run_loop

RECENT = Version(transformers.__version__) >= kv.SLIDING_TRIM_SINCE
LATENT_MLA = Version(transformers.__version__) >= kv.MLA_LATENT_SINCE

# FACTS §3: fp16 KV bytes per token, batch 1, full-attention growth.
PUBLIC_BYTES_PER_TOKEN = {
    "qwen2.5-0.5b": 12_288,
    "qwen2.5-1.5b": 28_672,
    "qwen3-0.6b": 114_688,
    "llama-3.2-1b": 32_768,
    "llama-3.1-8b": 131_072,
    "llama-2-7b": 524_288,
    "mistral-7b": 131_072,
    "gemma-2-2b": 106_496,
    "phi-3-mini-4k": 393_216,
    "gpt2": 36_864,
    "smollm2-135m": 23_040,
    "tinyllama-1.1b": 22_528,
}


def public_config(name: str):
    spec = load_model_spec(name)
    model_type = spec.config["model_type"] if spec.config else ""
    config_for(model_type)  # skips where this transformers lacks the family
    return spec.hf_config()


# --- analytic ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PUBLIC_BYTES_PER_TOKEN))
def test_public_configs_bytes_per_token(name):
    config = public_config(name)
    assert kv_bytes_per_token(config, dtype=torch.float16) == PUBLIC_BYTES_PER_TOKEN[name]
    assert kv_bytes_per_token(config, dtype=torch.float32, batch=3) == (
        6 * PUBLIC_BYTES_PER_TOKEN[name]
    )


def test_qwen25_15b_seed_figures():
    config = public_config("qwen2.5-1.5b")
    after_prefill = analytic_kv(config, dtype=torch.float16, batch=1, seq_len=512)
    final = analytic_kv(config, dtype=torch.float16, batch=1, seq_len=512 + 32 - 1)
    assert after_prefill.total_bytes == 14_680_064
    assert final.total_bytes == 15_568_896
    assert {layer.k_shape for layer in final.layers} == {(1, 2, 543, 128)}


def test_llama2_7b_is_two_gib_at_4096_tokens():
    config = public_config("llama-2-7b")
    layout = analytic_kv(config, dtype=torch.float16, batch=1, seq_len=4096)
    assert layout.total_bytes == 2 * 1024**3
    assert len(layout.layers) == 32
    assert layout.layers[0].k_shape == layout.layers[0].v_shape == (1, 32, 4096, 128)


def test_gemma2_sliding_layers_cap_at_window_minus_one():
    """FACTS §3: at T >= 4095, 13 global layers hold T and 13 sliding layers hold 4095."""
    config = public_config("gemma-2-2b")
    t = 8000
    layout = analytic_kv(config, dtype=torch.float16, batch=1, seq_len=t)
    per_position_layer = 2 * 4 * 256 * 2
    held = 4095 if RECENT else t
    assert layout.total_bytes == 13 * per_position_layer * t + 13 * per_position_layer * held
    kinds = [layer.kind for layer in layout.layers]
    assert kinds[:4] == ["sliding_attention", "full_attention"] * 2
    assert layout.layers[0].k_shape == (1, 4, held, 256)  # explicit head_dim 256, not 2304 / 8


def test_mistral_and_phi3_windows_apply_to_every_layer():
    mistral = analytic_kv(public_config("mistral-7b"), dtype=torch.float16, batch=1, seq_len=5000)
    phi3 = analytic_kv(public_config("phi-3-mini-4k"), dtype=torch.float16, batch=1, seq_len=3000)
    assert {layer.k_shape[2] for layer in mistral.layers} == ({4095} if RECENT else {5000})
    assert {layer.k_shape[2] for layer in phi3.layers} == ({2046} if RECENT else {3000})


def test_qwen25_sliding_window_is_off_when_use_sliding_window_is_false():
    layout = analytic_kv(
        public_config("qwen2.5-0.5b"), dtype=torch.float16, batch=1, seq_len=40_000
    )
    assert {layer.kind for layer in layout.layers} == {"full_attention"}


def test_head_dim_none_falls_back_to_hidden_over_heads():
    config = config_for(
        "phi3", hidden_size=96, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=1, intermediate_size=32, vocab_size=128, pad_token_id=0,
    )  # fmt: skip
    assert getattr(config, "head_dim", None) is None
    layout = analytic_kv(config, dtype=torch.float32, batch=1, seq_len=5)
    assert layout.layers[0].k_shape == (1, 2, 5, 24)


def test_explicit_head_dim_wins_over_hidden_over_heads():
    config = FAMILIES["qwen3"]()
    layout = analytic_kv(config, dtype=torch.float32, batch=1, seq_len=5)
    assert layout.layers[0].k_shape == (1, 2, 5, 32)


def test_gpt2_without_num_key_value_heads_is_multi_head():
    config = FAMILIES["gpt2"]()
    assert analytic_kv(config, dtype=torch.float32, batch=1, seq_len=3).layers[0].k_shape == (
        1, 4, 3, 16,
    )  # fmt: skip


def test_falcon_layouts():
    new = analytic_kv(
        FAMILIES["falcon-new-architecture"](), dtype=torch.float32, batch=1, seq_len=3
    )
    multi = analytic_kv(FAMILIES["falcon-multi-query"](), dtype=torch.float32, batch=1, seq_len=3)
    assert new.layers[0].k_shape == (1, 4, 3, 16)  # all query heads, not num_kv_heads = 2
    assert multi.layers[0].k_shape == (1, 1, 3, 16)


def test_gpt_bigcode_multi_query_caches_one_head():
    layout = analytic_kv(FAMILIES["gpt_bigcode"](), dtype=torch.float32, batch=2, seq_len=3)
    assert layout.layers[0].k_shape == layout.layers[0].v_shape == (2, 1, 3, 16)


def test_deepseek_mla_k_and_v_dims_differ_by_version():
    layout = analytic_kv(FAMILIES["deepseek_v3"](), dtype=torch.float32, batch=1, seq_len=7)
    layer = layout.layers[0]
    if LATENT_MLA:  # compressed latent: K = kv_lora_rank, V = qk_rope_head_dim, one head
        assert (layer.k_shape, layer.v_shape) == ((1, 1, 7, 32), (1, 1, 7, 8))
    else:  # expanded: K = qk_nope + qk_rope per head, V = v_head_dim per head
        assert (layer.k_shape, layer.v_shape) == ((1, 4, 7, 24), (1, 4, 7, 20))
    assert layer.bytes == 4 * 7 * (32 + 8 if LATENT_MLA else 4 * (24 + 20))


def test_deepseek_v3_public_figure():
    """FACTS §3: 61 layers x (512 + 64) x 2 B = 70,272 B/token bf16 with latents (5.15+)."""
    config = config_for(
        "deepseek_v3", num_hidden_layers=61, num_attention_heads=128, kv_lora_rank=512,
        qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, hidden_size=7168,
    )  # fmt: skip
    expected = 70_272 if LATENT_MLA else 4_997_120
    assert kv_bytes_per_token(config, dtype=torch.bfloat16) == expected


def test_hybrid_and_shared_layers_hold_no_kv():
    jamba = analytic_kv(FAMILIES["jamba"](), dtype=torch.float32, batch=1, seq_len=9)
    assert [layer.bytes > 0 for layer in jamba.layers] == [False, True, False, True]
    assert jamba.layers[0].k_shape == ()
    config = FAMILIES["llama"]()
    config.num_kv_shared_layers = 1  # Gemma-3n style: the last layer reuses another's K/V
    shared = analytic_kv(config, dtype=torch.float32, batch=1, seq_len=9)
    assert [layer.kind for layer in shared.layers] == ["full_attention", "dummy"]
    assert shared.total_bytes == shared.layers[0].bytes


def test_multimodal_configs_use_their_text_decoder():
    config = config_for("llava", text_config={
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 1, "intermediate_size": 128,
    })  # fmt: skip
    layout = analytic_kv(config, dtype=torch.float16, batch=1, seq_len=10)
    assert [layer.k_shape for layer in layout.layers] == [(1, 1, 10, 16)] * 3


def test_unknown_layer_type_and_bad_arguments_raise_kv_error():
    config = FAMILIES["llama"]()
    config.layer_types = ["full_attention", "heavily_compressed_attention"]
    with pytest.raises(KVError, match="heavily_compressed_attention"):
        analytic_kv(config, dtype=torch.float16, batch=1, seq_len=4)
    config.layer_types = ["full_attention"]
    with pytest.raises(KVError, match="layer_types"):
        analytic_kv(config, dtype=torch.float16, batch=1, seq_len=4)
    with pytest.raises(KVError, match="batch"):
        kv_bytes_per_token(FAMILIES["llama"](), dtype=torch.float16, batch=0)


def test_mla_models_without_a_verified_layout_are_refused():
    config = FAMILIES["llama"]()
    config.kv_lora_rank = 32  # an MLA model type phasebench has not checked
    with pytest.raises(KVError, match="kv_lora_rank"):
        analytic_kv(config, dtype=torch.float16, batch=1, seq_len=4)


# --- measured ---------------------------------------------------------------------------------


def kv_pair(batch: int, heads: int, seq: int, dim: int, dtype=torch.float16):
    return torch.zeros(batch, heads, seq, dim, dtype=dtype), torch.zeros(
        batch, heads, seq, dim, dtype=dtype
    )


def test_measure_legacy_tuple_cache():
    cache = (kv_pair(1, 2, 5, 4), kv_pair(1, 2, 5, 4))
    measured = measure_kv(cache)
    assert measured == KVMeasurement(320, 320, (160, 160), 0)


def test_measure_fused_gpt_bigcode_tensor_per_layer():
    cache = [torch.zeros(2, 5, 2 * 8), torch.zeros(2, 5, 2 * 8)]  # [B, T, K|V] float32
    assert measure_kv(cache).per_layer_bytes == (640, 640)


class KeyValueLists:
    """transformers <= 4.53 DynamicCache: `key_cache` / `value_cache` lists."""

    def __init__(self, pairs):
        self.key_cache = [k for k, _ in pairs]
        self.value_cache = [v for _, v in pairs]


def test_measure_key_cache_lists_and_skipped_layers():
    pairs = [kv_pair(1, 2, 3, 4), (torch.tensor([]), torch.tensor([]))]
    assert measure_kv(KeyValueLists(pairs)).per_layer_bytes == (96, 0)


class Layer:
    def __init__(self, keys=None, values=None, **extra):
        self.keys, self.values = keys, values
        self.__dict__.update(extra)


class LayeredCache:
    def __init__(self, layers):
        self.layers = layers


def test_measure_layers_dummy_linear_attention_and_fp8():
    k, v = kv_pair(1, 2, 3, 4)
    fp8 = torch.zeros(1, 2, 3, 4, dtype=torch.float8_e4m3fn)
    layers = [
        Layer(k, v),
        Layer(),  # DummyLayer: keys = values = None
        Layer(conv_states={0: torch.zeros(1, 8, 4)}, recurrent_states={0: torch.zeros(1, 8, 2)}),
        Layer(torch.tensor([]), torch.tensor([]), _quantized_keys=(fp8, torch.tensor(1.0)),
              _quantized_values=(fp8.clone(), torch.tensor(1.0))),
    ]  # fmt: skip
    measured = measure_kv(LayeredCache(layers))
    # The fp8 layer: 24 float8 elements and one 4-byte float32 scale, for K and for V.
    assert measured.per_layer_bytes == (96, 0, 0, 2 * (24 + 4))
    assert measured.state_bytes == (32 + 16) * 4


def test_storage_bytes_count_shared_buffers_once_and_views_fully():
    base = torch.zeros(1, 2, 10, 4)  # 320 bytes
    view = base[:, :, 3:, :]  # a sliding layer's view: 224 logical bytes, 320 storage bytes
    measured = measure_kv(LayeredCache([Layer(view, view)]))
    assert measured.logical_bytes == 448
    assert measured.storage_bytes == 320


def test_measure_encoder_decoder_cache_reads_self_attention():
    if not hasattr(transformers, "EncoderDecoderCache"):
        pytest.skip("no EncoderDecoderCache in this transformers")
    self_attention = transformers.DynamicCache()
    self_attention.update(*kv_pair(1, 1, 6, 4), 0)
    cache = transformers.EncoderDecoderCache(self_attention, transformers.DynamicCache())
    assert measure_kv(cache).logical_bytes == 96


def test_measure_none_is_empty_and_unknown_objects_raise():
    assert measure_kv(None) == KVMeasurement(0, 0, (), 0)
    with pytest.raises(KVError, match="cannot read K/V tensors from a object"):
        measure_kv(object())


def test_measure_fp8_quantized_cache_of_a_real_model():
    if getattr(transformers.cache_utils, "Fp8QuantizedLayer", None) is None:
        pytest.skip("QuantizedCache(backend='fp8') needs transformers >= 5.21")
    config = FAMILIES["llama"]()
    model = build_tiny(config)
    cache = transformers.QuantizedCache(backend="fp8", config=config)
    with torch.inference_mode():
        out = model(input_ids=torch.zeros(2, 10, dtype=torch.long), use_cache=True, cache=cache)
    expected = analytic_kv(config, dtype=torch.float8_e4m3fn, batch=2, seq_len=10)
    # One byte per element plus a float32 scale per K and per V tensor of each layer.
    scales = 4 * 2 * len(expected.layers)
    assert measure_kv(out.cache).logical_bytes == expected.total_bytes + scales


def test_measured_tiny_llama_matches_through_a_real_loop():
    """A smoke check of the pieces together (the per-family matrix is in test_kv_families)."""
    config = FAMILIES["llama"]()
    steps = list(run_loop(build_tiny(config), batch=1, prompt_len=4, new_tokens=3))
    expected = [analytic_kv(config, dtype=torch.float32, batch=1, seq_len=t).total_bytes
                for t in (4, 5, 6)]  # fmt: skip
    assert [s.measurement.logical_bytes for s in steps] == expected
