"""Tiny configs of every architecture family the KV accounting covers, and a minimal owned loop.

Each factory returns a transformers config small enough to build and run on a CPU in well under
a second (hidden 64, 2-6 layers, vocab 128). Families that the installed transformers lacks
(qwen3, gemma3, deepseek_v3, qwen3_next on 4.46) skip with the reason via `config_for`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import transformers
from packaging.version import Version
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from benchmarks.harness.cache.measure import KVMeasurement, measure_kv
from benchmarks.harness.model import compat

TRANSFORMERS_VERSION = Version(transformers.__version__)
DYNAMIC_CACHE_BY_DEFAULT_SINCE = Version("4.56.0")
VOCAB = 128
WINDOW = 8  # sliding window for the sliding families: prompts of 10+ positions overflow it

_COMMON = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": VOCAB,
    "max_position_embeddings": 512,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


def config_for(model_type: str, **fields: Any) -> Any:
    """A config of `model_type`, or a skip when this transformers does not have the family."""
    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"transformers {transformers.__version__} has no `{model_type}` architecture")
    return CONFIG_MAPPING[model_type](**fields)


def _common(**overrides: Any) -> dict[str, Any]:
    return {**_COMMON, **overrides}


def llama() -> Any:
    return config_for("llama", **_common(num_hidden_layers=2))


def qwen2() -> Any:
    return config_for("qwen2", **_common(num_hidden_layers=2, use_sliding_window=False))


def qwen2_sliding() -> Any:
    # Layer 0 full, layers 1-2 sliding (max_window_layers = 1).
    return config_for(
        "qwen2",
        **_common(
            num_hidden_layers=3, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1
        ),
    )


def qwen3() -> Any:
    # Explicit head_dim 32 != hidden / heads = 16: the analytic side must not derive it.
    return config_for("qwen3", **_common(num_hidden_layers=2, head_dim=32))


def mistral() -> Any:
    return config_for("mistral", **_common(num_hidden_layers=2, sliding_window=WINDOW))


def gemma() -> Any:
    return config_for("gemma", **_common(num_hidden_layers=2, head_dim=32))


def gemma2() -> Any:
    return config_for(
        "gemma2",
        **_common(
            num_hidden_layers=4, head_dim=32, sliding_window=WINDOW, query_pre_attn_scalar=32
        ),
    )


def gemma3() -> Any:
    return config_for(
        "gemma3_text",
        **_common(
            num_hidden_layers=6, head_dim=32, sliding_window=WINDOW, query_pre_attn_scalar=32
        ),
    )


def phi3() -> Any:
    return config_for(
        "phi3", **_common(num_hidden_layers=2, num_key_value_heads=4, sliding_window=WINDOW)
    )


def gpt2() -> Any:
    return config_for(
        "gpt2", n_embd=64, n_layer=2, n_head=4, n_positions=512, vocab_size=VOCAB,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip


def falcon_new_architecture() -> Any:
    # K/V are broadcast to all 4 query heads before caching, although num_kv_heads = 2.
    fields = {k: v for k, v in _COMMON.items() if k != "num_key_value_heads"}
    return config_for(
        "falcon", **fields, num_hidden_layers=2, new_decoder_architecture=True, num_kv_heads=2
    )


def falcon_multi_query() -> Any:
    fields = {k: v for k, v in _COMMON.items() if k != "num_key_value_heads"}
    return config_for(
        "falcon", **fields, num_hidden_layers=2, new_decoder_architecture=False, multi_query=True
    )


def gpt_bigcode() -> Any:
    return config_for(
        "gpt_bigcode", n_embd=64, n_layer=2, n_head=4, n_positions=512, vocab_size=VOCAB,
        multi_query=True, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip


def _deepseek(model_type: str) -> Any:
    # MLA: latent cache (K = kv_lora_rank 32, V = qk_rope_head_dim 8, one head) in
    # transformers >= 5.15; expanded heads (K = 16 + 8, V = v_head_dim 20) before.
    return config_for(
        model_type,
        **_common(
            num_hidden_layers=3, num_key_value_heads=4, moe_intermediate_size=32,
            n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
            first_k_dense_replace=1, n_group=1, topk_group=1, kv_lora_rank=32, q_lora_rank=48,
            qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=20,
        ),
    )  # fmt: skip


def deepseek_v2() -> Any:
    return _deepseek("deepseek_v2")


def deepseek_v3() -> Any:
    return _deepseek("deepseek_v3")


def jamba() -> Any:
    # Mamba, attention, Mamba, attention: only layers 1 and 3 hold per-token K/V.
    return config_for(
        "jamba",
        **_common(
            num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=1, num_experts=2,
            expert_layer_period=2, expert_layer_offset=1, mamba_d_state=8, mamba_d_conv=4,
            mamba_expand=2, mamba_dt_rank=8, use_mamba_kernels=False,
        ),
    )  # fmt: skip


def qwen3_next() -> Any:
    # Gated DeltaNet (linear attention) on layers 0 and 2, full attention on 1 and 3.
    return config_for(
        "qwen3_next",
        **_common(
            num_hidden_layers=4, head_dim=32, full_attention_interval=2, num_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
            linear_value_head_dim=16, linear_conv_kernel_dim=4,
        ),
    )  # fmt: skip


def gemma3n() -> Any:
    # KV sharing: the last 2 of 6 layers reuse earlier layers' K/V and hold none of their own.
    return config_for(
        "gemma3n_text",
        **_common(
            num_hidden_layers=6, head_dim=32, sliding_window=WINDOW, num_kv_shared_layers=2,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
            vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=16, laurel_rank=8,
            activation_sparsity_pattern=[0.0] * 6, altup_num_inputs=2,
        ),
    )  # fmt: skip


FAMILIES: dict[str, Callable[[], Any]] = {
    "llama": llama,
    "qwen2": qwen2,
    "qwen2-sliding": qwen2_sliding,
    "qwen3": qwen3,
    "mistral-sliding": mistral,
    "gemma": gemma,
    "gemma2": gemma2,
    "gemma3_text": gemma3,
    "gemma3n_text": gemma3n,
    "phi3-sliding": phi3,
    "gpt2": gpt2,
    "falcon-new-architecture": falcon_new_architecture,
    "falcon-multi-query": falcon_multi_query,
    "gpt_bigcode": gpt_bigcode,
    "deepseek_v2": deepseek_v2,
    "deepseek_v3": deepseek_v3,
    "jamba": jamba,
    "qwen3_next": qwen3_next,
}


def build_tiny(config: Any, seed: int = 0) -> Any:
    """The model of `config` with standard transformers init, float32, eval mode, on the CPU."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    return model.eval()


def _initial_cache(model: Any, batch: int) -> Any:
    """The cache to pass to the prefill, where the model's own default is not a dynamic cache.

    transformers 4.x: Gemma-2 builds a HybridCache sized to the prompt, and Jamba returns no
    cache unless given its hybrid cache; the DESIGN §4 contract is about the dynamic cache.
    """
    if TRANSFORMERS_VERSION >= DYNAMIC_CACHE_BY_DEFAULT_SINCE:
        return None
    model_type = model.config.model_type
    if model_type == "gemma2":
        return transformers.DynamicCache()
    if model_type == "jamba":
        from transformers.models.jamba import modeling_jamba  # noqa: PLC0415

        return modeling_jamba.HybridMambaAttentionDynamicCache(
            model.config, batch, torch.float32, torch.device("cpu")
        )
    return None


@dataclass(frozen=True)
class LoopStep:
    """The cache after prefill (`positions` = P) or after one decode step."""

    positions: int
    measurement: KVMeasurement


def run_loop(model: Any, *, batch: int, prompt_len: int, new_tokens: int) -> Iterator[LoopStep]:
    """Greedy prefill + (new_tokens - 1) decode steps, yielding the cache after each."""
    kwarg = compat.cache_kwarg(model)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (batch, prompt_len), generator=generator)
    cache = _initial_cache(model, batch)
    extra = {} if cache is None else {kwarg: cache}
    with torch.inference_mode():
        outputs = model(input_ids=ids, use_cache=True, **extra)
        cache = compat.adopt_cache(model, compat.output_cache(outputs))
        yield LoopStep(prompt_len, measure_kv(cache))
        for step in range(1, new_tokens):
            token = outputs.logits[:, -1:, :].argmax(dim=-1)
            outputs = model(input_ids=token, use_cache=True, **{kwarg: cache})
            cache = compat.adopt_cache(model, compat.output_cache(outputs))
            yield LoopStep(prompt_len + step, measure_kv(cache))
