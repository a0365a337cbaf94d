"""Roofline arithmetic: analytic FLOPs match torch's FLOP counter, bytes match an independent sum.

Reference FLOPs come from `torch.utils.flop_counter.FlopCounterMode`, which counts matmul-family
ops (mm, addmm, bmm, baddbmm, SDPA kernels) at 2 FLOPs per multiply-add and nothing elementwise.
torch 2.13 has no formula for the CPU fused SDPA kernel, so references run SDPA on the MATH
backend (which decomposes into counted bmm ops) and Gemma-2 with eager attention. With that,
the analytic count matches **exactly** on transformers 5.x once the masked (query, key) pairs
the dense MATH/eager kernels also score are added to it (the analytic count holds the pairs the
causal mask allows, `flops.causal_attention_pairs`): both count the same matrices and neither
counts norms, activations, softmax or residual adds. Stated tolerance: 0.1 % (relative),
and the analytic figure never exceeds the counted one. The slack exists for transformers 4.x,
whose rotary embedding computes its angles as a matmul (`inv_freq` x positions, d/2 x P
multiply-adds per sequence) that FlopCounterMode counts although it is not model arithmetic
(192 FLOPs of 3.7 MFLOPs for the tiny Llama prefill on 4.46).
"""

from __future__ import annotations

import math

import pytest
import torch
import transformers
from packaging.version import Version
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

from benchmarks.harness.cache.kv import SLIDING_TRIM_SINCE, analytic_kv, kv_bytes_per_token
from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.model import compat
from benchmarks.harness.roofline.flops import (
    ModelShape,
    UnsupportedArchitectureError,
    attention_windows,
    causal_attention_pairs,
    decode_step_flops,
    prefill_flops,
    prefill_logits_positions,
)
from benchmarks.harness.roofline.peaks import Peaks
from benchmarks.harness.roofline.roofline import (
    RooflineError,
    achieved_fraction,
    roofline_extra_info,
)
from benchmarks.harness.roofline.traffic import (
    DecodeBytes,
    PrefillBytes,
    decode_step_bytes,
    prefill_bytes,
    weights_read_bytes,
)

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 128}
TINY_CONFIGS = {
    "llama": {**TINY, "num_attention_heads": 4, "num_key_value_heads": 2},
    "qwen2": {**TINY, "num_attention_heads": 4, "num_key_value_heads": 2},
    "qwen3": {**TINY, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32},
    "mistral": {**TINY, "num_attention_heads": 4, "num_key_value_heads": 2, "sliding_window": 8},
    "gemma": {**TINY, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32},
    "gemma2": {
        **TINY,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "sliding_window": 8,
    },
    "phi3": {**TINY, "num_attention_heads": 4, "num_key_value_heads": 2, "pad_token_id": 0},
    "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 128, "n_positions": 256},
}
TRANSFORMERS_VERSION = Version(transformers.__version__)
BATCH, PROMPT = 2, 12  # P = 12 > W - 1 = 7: sliding layers are trimmed during decode


# transformers < 4.56 keeps all T positions in sliding layers (kv.SLIDING_TRIM_SINCE).
TRIMS_SLIDING = TRANSFORMERS_VERSION >= SLIDING_TRIM_SINCE


def tiny_config(model_type: str):
    try:
        return AutoConfig.for_model(model_type, **TINY_CONFIGS[model_type])
    except ValueError:  # e.g. qwen3 on transformers 4.46
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")


def tiny_model(model_type: str, dtype: torch.dtype = torch.float32):
    config = tiny_config(model_type)
    # Gemma-2 has no SDPA path; eager attention is counted as plain bmm.
    attn = "eager" if model_type == "gemma2" else "sdpa"
    torch.manual_seed(0)
    # `.to(dtype)` rather than `dtype=`: transformers 4.46 only knows `torch_dtype=`.
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    return model.to(dtype).eval()


def counted_prefill_and_decode(model) -> tuple[int, int]:
    """FlopCounterMode totals of a [B, P] prefill (last logits) and one decode step after it."""
    ids = torch.randint(0, 128, (BATCH, PROMPT), generator=torch.Generator().manual_seed(0))
    logits_kwarg = compat.logits_kwarg(model)
    prefill_kwargs = {} if logits_kwarg is None else {logits_kwarg: 1}
    with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH):
        counter = FlopCounterMode(display=False)
        with counter:
            out = model(input_ids=ids, use_cache=True, **prefill_kwargs)
        prefill = counter.get_total_flops()
        token = out.logits[:, -1:].argmax(-1)
        cache = compat.output_cache(out)
        counter = FlopCounterMode(display=False)
        with counter:
            model(input_ids=token, use_cache=True, **{compat.cache_kwarg(model): cache})
        decode = counter.get_total_flops()
    return prefill, decode


def masked_flops(model, *, queries: int, context: int) -> int:
    """FLOPs a dense kernel spends on masked pairs: it scores every key it is handed (P in a
    prefill from empty, what the layer's cache holds plus the new one at decode), the analytic
    count only the pairs the mask allows."""
    config = model.config
    windows = attention_windows(config)
    if context == 0:
        handed = [queries * queries] * len(windows)
    else:
        layout = analytic_kv(config, dtype=torch.float32, batch=1, seq_len=context)
        held = [layer.k_shape[2] for layer in layout.layers if layer.k_shape]
        handed = [h + 1 for h in held]
    allowed = [causal_attention_pairs(queries, cached=context, window=w) for w in windows]
    per_pair = ModelShape.from_config(config).attention_flops_per_query_key()
    return BATCH * (sum(handed) - sum(allowed)) * per_pair


@pytest.mark.parametrize("model_type", sorted(TINY_CONFIGS))
def test_analytic_flops_equal_flop_counter_for_prefill_and_decode(model_type):
    """Prefill over [2, 12] and a decode step at context 12 count what torch counts, less the
    masked pairs its dense kernels score."""
    if model_type == "gemma2" and not TRIMS_SLIDING:
        pytest.skip("transformers < 4.56 sizes Gemma-2's HybridCache to the prompt (FACTS 1.1)")
    model = tiny_model(model_type)
    counted_prefill, counted_decode = counted_prefill_and_decode(model)
    analytic_prefill = prefill_flops(
        model.config,
        batch=BATCH,
        prompt_len=PROMPT,
        logits_positions=prefill_logits_positions(model, PROMPT),
    ).total_flops
    analytic_decode = decode_step_flops(model.config, batch=BATCH, context_len=PROMPT).total_flops
    masked_prefill = masked_flops(model, queries=PROMPT, context=0)
    masked_decode = masked_flops(model, queries=1, context=PROMPT)
    assert masked_prefill > 0  # the count is below what a dense kernel computes
    assert analytic_prefill + masked_prefill == pytest.approx(counted_prefill, rel=1e-3)
    assert analytic_decode + masked_decode == pytest.approx(counted_decode, rel=1e-3)
    assert analytic_prefill + masked_prefill <= counted_prefill
    assert analytic_decode + masked_decode <= counted_decode


def test_sliding_window_limits_decode_attention_to_the_window():
    """Mistral (W = 8, every layer sliding) at T = 100 attends over W - 1 cached + 1 = 8 keys,
    on every transformers version (before 4.56 the cache keeps all 100 and the mask all but 8)."""
    config = tiny_config("mistral")
    flops = decode_step_flops(config, batch=1, context_len=100)
    shape = ModelShape.from_config(config)
    assert flops.attention_flops == 2 * 8 * shape.attention_flops_per_query_key()
    full = AutoConfig.for_model("llama", **TINY_CONFIGS["llama"])
    full_flops = decode_step_flops(full, batch=1, context_len=100)
    assert (
        full_flops.attention_flops
        == 2 * 101 * ModelShape.from_config(full).attention_flops_per_query_key()
    )


def test_prefill_lm_head_counts_the_last_position_only():
    config = AutoConfig.for_model("llama", **TINY_CONFIGS["llama"])
    flops = prefill_flops(config, batch=3, prompt_len=50)
    assert flops.lm_head_flops == 3 * 2 * 64 * 128


def test_gpt2_mlp_uses_n_inner_or_four_times_hidden():
    plain = ModelShape.from_config(AutoConfig.for_model("gpt2", n_embd=64, n_head=4))
    assert (plain.intermediate_size, plain.mlp_matrices) == (256, 2)
    inner = ModelShape.from_config(AutoConfig.for_model("gpt2", n_embd=64, n_head=4, n_inner=100))
    assert inner.intermediate_size == 100


QWEN25_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}


def test_per_token_linear_flops_are_twice_the_matrix_parameters_of_a_public_config():
    """Qwen2.5-0.5B shapes: 2 x (every Linear weight) per token, lm_head included once."""
    config = AutoConfig.for_model("qwen2", **QWEN25_05B)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    matrix_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    shape = ModelShape.from_config(config)
    assert shape.linear_flops_per_token() + shape.lm_head_flops_per_position() == 2 * matrix_params


def test_unsupported_architectures_are_refused_not_guessed():
    config = AutoConfig.for_model(
        "falcon", hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=128
    )
    with pytest.raises(UnsupportedArchitectureError, match="falcon"):
        prefill_flops(config, batch=1, prompt_len=4)


def test_decode_bytes_are_weights_plus_kv_read_plus_one_position_written_untied():
    """Llama (untied head): every parameter once, the embedding table for B rows only."""
    model = tiny_model("llama", torch.bfloat16)
    batch, context = 3, 20
    esize = 2
    embed = model.get_input_embeddings().weight
    all_params = sum(p.numel() for p in model.parameters()) * esize
    expected_weights = all_params - embed.numel() * esize + batch * 64 * esize
    # 2 layers x (K + V) x B x kv_heads x head_dim x positions x bytes
    expected_kv_read = 2 * 2 * batch * 2 * 16 * context * esize
    expected_kv_written = 2 * 2 * batch * 2 * 16 * 1 * esize
    moved = decode_step_bytes(model, batch=batch, context_len=context)
    assert moved == DecodeBytes(expected_weights, expected_kv_read, expected_kv_written)
    assert moved.total_bytes == expected_weights + expected_kv_read + expected_kv_written


def test_prefill_bytes_are_weights_once_plus_the_kv_written_for_every_prompt_position():
    """Llama (untied head): every parameter once, the embedding table for B x P rows."""
    model = tiny_model("llama", torch.bfloat16)
    batch, prompt = 2, 10
    esize = 2
    embed = model.get_input_embeddings().weight
    all_params = sum(p.numel() for p in model.parameters()) * esize
    expected_weights = all_params - embed.numel() * esize + batch * prompt * 64 * esize
    # 2 layers x (K + V) x B x kv_heads x head_dim x P positions x bytes
    expected_kv = 2 * 2 * batch * 2 * 16 * prompt * esize
    moved = prefill_bytes(model, batch=batch, prompt_len=prompt)
    assert moved == PrefillBytes(expected_weights, expected_kv)
    assert moved.total_bytes == expected_weights + expected_kv
    # more tokens than table rows: the whole table, never more
    assert prefill_bytes(model, batch=4, prompt_len=100).weights_bytes == all_params


def test_tied_lm_head_counts_the_full_matrix_once():
    model = tiny_model("qwen2", torch.float32)
    model.config.tie_word_embeddings = True
    model.tie_weights()
    assert model.lm_head.weight is model.get_input_embeddings().weight
    unique = {p.data_ptr(): p.numel() for p in model.parameters()}
    assert weights_read_bytes(model, batch=2) == sum(unique.values()) * 4


def test_gpt2_position_embeddings_are_read_for_batch_rows_only():
    model = tiny_model("gpt2")
    wpe = model.transformer.wpe.weight
    full = sum(p.numel() for p in model.parameters()) * 4  # wte tied to lm_head: counted once
    assert weights_read_bytes(model, batch=2) == full - wpe.numel() * 4 + 2 * 64 * 4


@pytest.mark.skipif(not TRIMS_SLIDING, reason="this transformers keeps all T positions")
def test_sliding_layers_read_at_most_window_minus_one_positions():
    model = tiny_model("gemma2")
    moved = decode_step_bytes(model, batch=1, context_len=100)
    # layer 0 sliding (W - 1 = 7 positions), layer 1 full (100); K + V, 2 kv heads x 32, fp32
    assert moved.kv_read_bytes == 2 * 2 * 32 * (7 + 100) * 4
    assert moved.kv_written_bytes == 2 * 2 * 32 * 2 * 4


def test_above_one_hundred_percent_of_peak_raises_as_a_measurement_bug():
    assert achieved_fraction(50.0, 100.0, what="x") == 50.0
    assert achieved_fraction(100.0, 100.0, what="x") == 100.0
    assert achieved_fraction(5.0, None, what="x") is None
    with pytest.raises(RooflineError, match="measurement bug"):
        achieved_fraction(100.5, 100.0, what="decode bytes/s")


def test_roofline_error_is_not_a_user_error():
    assert not issubclass(RooflineError, PhasebenchError)


def known_peaks(**overrides) -> Peaks:
    fields = {
        "flop_per_s": 1e15,
        "bandwidth_bytes_per_s": 1e13,
        "source": "measured:copy/matmul",
        "dtype": "float32",
        "cache_bytes": None,
    }
    fields.update(overrides)
    return Peaks(**fields)


def test_extra_info_has_every_roofline_field_with_percentages():
    model = tiny_model("llama")
    info = roofline_extra_info(
        model, batch=1, prompt_len=8, peaks=known_peaks(), prefill_s=1e-3, decode_step_s=1e-3
    )
    flops = prefill_flops(model.config, batch=1, prompt_len=8).total_flops
    moved = decode_step_bytes(model, batch=1, context_len=8).total_bytes
    assert info["prefill_flop"] == flops
    assert info["prefill_bytes"] == prefill_bytes(model, batch=1, prompt_len=8).total_bytes
    step_flops = decode_step_flops(model.config, batch=1, context_len=8).total_flops
    assert info["decode_flop"] == step_flops
    assert info["decode_bytes"] == moved
    # the rates are exactly the recorded counts over the phase's median time
    assert info["prefill_flop_per_s"] == info["prefill_flop"] / 1e-3
    assert info["decode_bytes_per_s"] == info["decode_bytes"] / 1e-3
    assert info["prefill_flop_per_s"] == pytest.approx(flops / 1e-3)
    assert info["prefill_pct_of_peak_flops"] == pytest.approx(flops / 1e-3 / 1e15 * 100)
    assert info["decode_bytes_per_s"] == pytest.approx(moved / 1e-3)
    assert info["decode_pct_of_peak_bandwidth"] == pytest.approx(moved / 1e-3 / 1e13 * 100)
    assert info["peak_source"] == "measured:copy/matmul"
    assert all(
        v is None
        or isinstance(v, str)
        or (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v))
        for v in info.values()
    )


def test_extra_info_with_unknown_peak_is_na_not_a_guess():
    model = tiny_model("llama")
    info = roofline_extra_info(
        model, batch=1, prompt_len=8, peaks=Peaks.unknown(torch.float32), prefill_s=1e-3
    )
    assert info["peak_source"] == "n/a"
    assert info["prefill_flop_per_s"] is not None
    assert info["prefill_pct_of_peak_flops"] is None
    assert info["prefill_flop"] is not None
    assert info["prefill_bytes"] is not None
    # the phase that was not measured has no figures, not even its counts
    assert info["decode_bytes_per_s"] is None
    assert info["decode_flop"] is None
    assert info["decode_bytes"] is None


def test_cache_resident_decode_has_no_bandwidth_percentage():
    model = tiny_model("llama")
    info = roofline_extra_info(
        model, batch=1, prompt_len=8, peaks=known_peaks(cache_bytes=1 << 30), decode_step_s=1e-9
    )
    assert info["decode_pct_of_peak_bandwidth"] is None
    assert "last-level cache" in str(info["roofline_note"])


def test_extra_info_raises_when_a_figure_beats_the_peak():
    model = tiny_model("llama")
    with pytest.raises(RooflineError):
        roofline_extra_info(
            model, batch=1, prompt_len=8, peaks=known_peaks(flop_per_s=1.0), prefill_s=1e-3
        )


def test_extra_info_for_an_unsupported_architecture_is_a_note():
    config = AutoConfig.for_model(
        "falcon", hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=128
    )
    model = AutoModelForCausalLM.from_config(config).eval()
    info = roofline_extra_info(model, batch=1, prompt_len=4, peaks=known_peaks(), prefill_s=1.0)
    assert info["prefill_flop_per_s"] is None
    assert info["prefill_flop"] is None
    assert info["prefill_bytes"] is None
    assert "falcon" in str(info["roofline_note"])


def test_a_forward_without_logits_to_keep_runs_the_lm_head_on_every_prompt_position():
    config = tiny_config("llama")
    one = prefill_flops(config, batch=2, prompt_len=10)
    every = prefill_flops(config, batch=2, prompt_len=10, logits_positions=10)
    assert every.lm_head_flops == 10 * one.lm_head_flops
    assert prefill_logits_positions(tiny_model("llama"), 10) == 1


# --- conventions (issue 12, item 8; issue 30, row 9) ------------------------------------------


@pytest.mark.parametrize("model_type", ["llama", "mistral"])
def test_prefill_attention_counts_the_causal_pairs_not_all_p_squared(model_type):
    """Fused CUDA kernels skip the masked tiles a P^2 count charged them for (~7 % high at an
    8B b8 P4096 prefill): the count is the pairs the mask allows, which every kernel computes.
    Mistral's window (8) is below P (20): its layers see at most 8 keys per query."""
    config = tiny_config(model_type)
    batch, prompt = 2, 20
    heads, head_dim, layers = 4, 16, 2
    counted = prefill_flops(config, batch=batch, prompt_len=prompt).attention_flops
    per_query = [min(q + 1, 8) if model_type == "mistral" else q + 1 for q in range(prompt)]
    assert counted == batch * layers * sum(per_query) * (2 * 2 * heads * head_dim)
    assert counted < batch * layers * prompt * prompt * (2 * 2 * heads * head_dim)


class CatRecorder(TorchDispatchMode):
    """Records every aten.cat along the sequence dimension of 4-D tensors: the cache growing."""

    def __init__(self):
        super().__init__()
        self.read_bytes = 0
        self.written_bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.cat.default and out.dim() == 4:
            dim = args[1] if len(args) > 1 else (kwargs or {}).get("dim", 0)
            if dim in (2, -2):
                self.read_bytes += sum(t.numel() * t.element_size() for t in args[0])
                self.written_bytes += out.numel() * out.element_size()
        return out


def test_decode_bytes_leave_out_the_dynamic_caches_per_step_copy():
    """Measured: DynamicCache's torch.cat re-reads the T cached positions and writes T + 1 every
    step, about twice the KV bytes that `decode_bytes` counts as read; those are not in it."""
    model = tiny_model("llama")
    batch, context = 2, 20
    ids = torch.randint(0, 128, (batch, context), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True)
        cache = compat.adopt_cache(model, compat.output_cache(out))
        token = out.logits[:, -1:].argmax(-1)
        recorder = CatRecorder()
        with recorder:
            model(input_ids=token, use_cache=True, **{compat.cache_kwarg(model): cache})
    kv_at = lambda t: analytic_kv(model.config, dtype=torch.float32, batch=batch, seq_len=t)  # noqa: E731
    per_position = kv_bytes_per_token(model.config, dtype=torch.float32, batch=batch)
    assert recorder.written_bytes == kv_at(context + 1).total_bytes
    assert recorder.read_bytes == kv_at(context).total_bytes + per_position
    moved = decode_step_bytes(model, batch=batch, context_len=context)
    assert moved.kv_read_bytes == kv_at(context).total_bytes
    assert moved.kv_written_bytes == per_position
    copy_bytes = recorder.read_bytes + recorder.written_bytes
    assert moved.total_bytes == moved.weights_bytes + moved.kv_read_bytes + moved.kv_written_bytes
    assert copy_bytes > 2 * moved.kv_read_bytes  # the uncounted part, for the docs' "about 2x"
