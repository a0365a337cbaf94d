"""A tensor-parallel cell's per-rank roofline (`benchmarks/suite/tp/roofline.py`): FLOPs per rank
from the single-device count and the applied plan, decode bytes per rank, and which peak
judges them (one device's on CUDA, the host's for the ranks' sum on a CPU)."""

from __future__ import annotations

import pytest
import transformers

from benchmarks.harness.roofline.flops import decode_step_flops, prefill_flops
from benchmarks.harness.roofline.peaks import Peaks
from benchmarks.harness.roofline.roofline import RooflineError
from benchmarks.suite.tp.roofline import (
    PER_DEVICE,
    SHARED_HOST,
    decode_rank_bytes,
    lm_head_sharded,
    rank_flops,
    tp_roofline_fields,
)

CONFIG = transformers.LlamaConfig(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=1000,
)  # fmt: skip
LAYERS_ONLY = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise"}
WITH_HEAD = {**LAYERS_ONLY, "lm_head": "colwise_gather_output"}
RESULT = {
    "tp_size": 2,
    "plan": WITH_HEAD,
    "weights_per_rank_bytes": [1000, 1200],
    "kv_per_rank_after_prefill_bytes": [300, 300],
    "kv_per_rank_final_bytes": [370, 370],
}


def test_a_rank_runs_its_share_of_the_layers_and_the_lm_head_only_where_the_plan_splits_it():
    whole = prefill_flops(CONFIG, batch=2, prompt_len=16)
    layers = whole.linear_flops + whole.attention_flops
    common = {"batch": 2, "prompt_len": 16, "world": 2, "phase": "prefill"}
    assert rank_flops(CONFIG, WITH_HEAD, **common) == layers // 2 + whole.lm_head_flops // 2
    assert rank_flops(CONFIG, LAYERS_ONLY, **common) == layers // 2 + whole.lm_head_flops
    step = decode_step_flops(CONFIG, batch=2, context_len=16)
    assert (
        rank_flops(CONFIG, WITH_HEAD, **{**common, "phase": "decode"})
        == (step.linear_flops + step.attention_flops + step.lm_head_flops) // 2
    )
    assert lm_head_sharded({"model.lm_head": "colwise_rep"})
    assert not lm_head_sharded({"lm_head": "rowwise"})
    assert not lm_head_sharded({"model.layers.*.mlp.lm_head_like": "colwise"})


def test_decode_bytes_per_rank_are_its_shards_its_cache_and_one_steps_growth():
    assert decode_rank_bytes([1000, 1200], [300, 300], [370, 370], new_tokens=8) == [1310, 1510]
    assert decode_rank_bytes([10], [6], [6], new_tokens=1) == [16]  # no step: no growth


def _fields(device_type: str, peaks: Peaks, measurement: str = "decode", median_s: float = 1e-6):
    return tp_roofline_fields(
        RESULT, CONFIG, peaks, device_type=device_type, batch=2, prompt_len=16, new_tokens=8,
        measurement=measurement, median_s=median_s,
    )  # fmt: skip


def test_on_cuda_the_busiest_rank_is_judged_against_one_device():
    fields = _fields("cuda", Peaks(1e15, 4e12, "table:x", "bfloat16"))
    assert fields["tp_roofline_scope"] == PER_DEVICE
    assert fields["tp_decode_rank_bytes"] == [1310, 1510]
    assert fields["tp_decode_pct_of_peak_bandwidth"] == pytest.approx(100 * 1510 / 1e-6 / 4e12)


def test_on_a_cpu_the_ranks_sum_is_judged_against_the_host():
    fields = _fields("cpu", Peaks(1e15, 4e12, "measured:copy/linear", "float32"))
    assert fields["tp_roofline_scope"] == SHARED_HOST
    assert fields["tp_decode_pct_of_peak_bandwidth"] == pytest.approx(100 * 2820 / 1e-6 / 4e12)
    prefill = _fields("cpu", Peaks(1e15, 4e12, "m", "float32"), "prefill", 1e-3)
    flop = rank_flops(CONFIG, WITH_HEAD, batch=2, prompt_len=16, world=2, phase="prefill")
    assert prefill["tp_prefill_rank_flop"] == flop
    assert prefill["tp_prefill_pct_of_peak_flops"] == pytest.approx(100 * 2 * flop / 1e-3 / 1e15)


def test_above_the_peak_is_a_bug_and_a_cache_resident_step_has_no_bandwidth_roofline():
    with pytest.raises(RooflineError):
        _fields("cuda", Peaks(1e15, 1e9, "table:x", "bfloat16"))
    cached = _fields("cpu", Peaks(1e15, 1e9, "m", "float32", cache_bytes=1 << 20))
    assert cached["tp_decode_pct_of_peak_bandwidth"] is None
    assert "last-level cache" in cached["tp_roofline_note"]
    unknown = _fields("cuda", Peaks.unknown("bfloat16"))
    assert unknown["tp_decode_pct_of_peak_bandwidth"] is None


def test_an_architecture_without_a_flop_formula_says_so():
    config = transformers.GPTBigCodeConfig(n_embd=64, n_layer=2, n_head=4)
    fields = _fields("cuda", Peaks(1e15, 4e12, "table:x", "bfloat16"))
    assert fields["tp_roofline_note"] is None
    odd = tp_roofline_fields(
        RESULT, config, Peaks(1e15, 4e12, "t", "bfloat16"), device_type="cuda", batch=1,
        prompt_len=4, new_tokens=2, measurement="decode", median_s=1.0,
    )  # fmt: skip
    assert "no verified FLOP formula" in odd["tp_roofline_note"]
