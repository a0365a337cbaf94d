"""Per-rank bytes: KV by the TP plan's split of the heads, weights from the local shards.

The plans are written out here (the Llama plan of transformers 5.24), so the rules are tested
on transformers 4.46 too, whose configs carry no plan. The real 2-rank run (test_runs.py)
checks the same rules against measured caches and shards.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml
from packaging.version import Version
from torch import nn
from torch.distributed.tensor.placement_types import Replicate, Shard

from benchmarks.harness.cache.kv import analytic_kv
from benchmarks.harness.device.freemem import FreeMemory
from benchmarks.harness.model.models import ModelSpec
from benchmarks.harness.roofline.fit import model_facts
from benchmarks.harness.tp import bytes as tp_bytes
from benchmarks.harness.tp.bytes import (
    RankWeights,
    TPError,
    keys_sharded,
    per_rank_kv,
    rank_fit_estimate,
    rank_fit_reason,
    rank_weights,
    shard_errors,
)
from tests.kv_configs import config_for, deepseek_v2, deepseek_v3, jamba, llama, mistral

ROOT = Path(__file__).resolve().parents[3]
LLAMA_PLAN = {
    "layers.*.self_attn.q_proj": "colwise",
    "layers.*.self_attn.k_proj": "colwise",
    "layers.*.self_attn.v_proj": "colwise",
    "layers.*.self_attn.o_proj": "rowwise",
    "layers.*.mlp.gate_proj": "colwise",
    "layers.*.mlp.up_proj": "colwise",
    "layers.*.mlp.down_proj": "rowwise",
}
MLP_ONLY_PLAN = {k: v for k, v in LLAMA_PLAN.items() if ".mlp." in k}
F32 = torch.float32


def _kv(config: object, plan: dict[str, str], world: int, seq_len: int = 10) -> int:
    return per_rank_kv(config, plan, world=world, dtype=F32, batch=2, seq_len=seq_len).total_bytes


def _tp1(config: object, seq_len: int = 10) -> int:
    return analytic_kv(config, dtype=F32, batch=2, seq_len=seq_len).total_bytes


def test_gqa_each_rank_holds_hkv_over_world_heads() -> None:
    config = llama()  # 4 query heads, 2 KV heads, head_dim 16, 2 layers
    layout = per_rank_kv(config, LLAMA_PLAN, world=2, dtype=F32, batch=2, seq_len=10)
    assert [layer.k_shape for layer in layout.layers] == [(2, 1, 10, 16)] * 2
    assert [layer.v_shape for layer in layout.layers] == [(2, 1, 10, 16)] * 2
    assert layout.total_bytes == _tp1(config) // 2 == 2 * 2 * (2 * 1 * 10 * 16) * 4
    assert _kv(config, LLAMA_PLAN, 1) == _tp1(config)


def test_sliding_layers_split_their_heads_too() -> None:
    config = mistral()  # every layer sliding: the window is per position, not per head
    for seq_len in (4, 30):  # inside and past the window
        assert _kv(config, LLAMA_PLAN, 2, seq_len) * 2 == _tp1(config, seq_len)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_a_70b_shaped_config_splits_8_kv_heads_over_2_4_8(world: int) -> None:
    config = config_for(
        "llama",
        hidden_size=128,
        intermediate_size=64,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=16,
        num_hidden_layers=2,
        vocab_size=64,
    )
    assert _kv(config, LLAMA_PLAN, world) * world == _tp1(config)


def test_more_ranks_than_kv_heads_is_refused_mqa_included() -> None:
    mqa = config_for("llama", **{**_small(), "num_key_value_heads": 1})
    with pytest.raises(TPError, match=r"1 KV head\(s\) per layer < tp 2.*use tp <= 1"):
        _kv(mqa, LLAMA_PLAN, 2)
    with pytest.raises(TPError, match=r"2 KV head\(s\) per layer < tp 4"):
        _kv(llama(), LLAMA_PLAN, 4)


def test_kv_heads_not_a_multiple_of_tp_are_refused() -> None:
    config = config_for(
        "llama",
        **{**_small(), "hidden_size": 96, "num_attention_heads": 12, "num_key_value_heads": 6},
    )
    with pytest.raises(TPError, match="num_key_value_heads 6 is not a multiple of tp 4"):
        _kv(config, LLAMA_PLAN, 4)
    assert _kv(config, LLAMA_PLAN, 3) * 3 == _tp1(config)


def test_a_plan_that_leaves_the_keys_whole_leaves_the_kv_whole_on_every_rank() -> None:
    config = llama()
    assert not keys_sharded(MLP_ONLY_PLAN)
    assert _kv(config, MLP_ONLY_PLAN, 2) == _tp1(config)
    # Only "colwise" on a key projection splits, as transformers' own rule says (below).
    assert keys_sharded({"layers.*.self_attn.qkv_proj": "colwise"})
    assert keys_sharded({"model.layers.*.attention.query_key_value": "colwise"})
    assert not keys_sharded({"layers.*.self_attn.k_proj": "colwise_rep"})


def test_keys_sharded_agrees_with_transformers_own_rule() -> None:
    module = pytest.importorskip("transformers.distributed.tensor_parallel")
    rule = getattr(module, "get_kv_heads_per_rank", None)
    if rule is None:
        pytest.skip("this transformers has no get_kv_heads_per_rank")
    plans = [
        LLAMA_PLAN,
        MLP_ONLY_PLAN,
        {"layers.*.self_attn.qkv_proj": "colwise"},
        {"layers.*.self_attn.k_proj": "local_colwise"},
        {"layers.*.self_attn.k_proj": "colwise_rep"},
    ]
    for plan in plans:
        assert (rule(plan, 4, 2) == 2) is keys_sharded(plan), plan


def test_mla_latent_is_whole_on_every_rank_with_the_v2_and_v3_plans() -> None:
    if Version(tp_bytes.transformers.__version__) < tp_bytes.MLA_LATENT_SINCE:
        pytest.skip("MLA caches the latent from transformers 5.15; refusal tested below")
    v2_plan = {
        "layers.*.self_attn.q_b_proj": "colwise",
        "layers.*.self_attn.kv_a_proj_with_mqa": "mla_kv_a_proj",
        "layers.*.self_attn.kv_b_proj": "colwise",
        "layers.*.self_attn.o_proj": "rowwise",
    }
    for config, plan in ((deepseek_v2(), v2_plan), (deepseek_v3(), MLP_ONLY_PLAN)):
        layout = per_rank_kv(config, plan, world=2, dtype=F32, batch=1, seq_len=5)
        assert layout == analytic_kv(config, dtype=F32, batch=1, seq_len=5)
        assert {layer.k_shape for layer in layout.layers} == {(1, 1, 5, 32)}
    sharded_latent = {"layers.*.self_attn.kv_a_proj_with_mqa": "colwise"}
    with pytest.raises(TPError, match="shards kv_a_proj_with_mqa as 'colwise'"):
        per_rank_kv(deepseek_v3(), sharded_latent, world=2, dtype=F32, batch=1, seq_len=5)


def test_mla_before_the_latent_cache_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    config = deepseek_v3()  # skips on transformers without DeepSeek-V3 (4.46)
    monkeypatch.setattr(tp_bytes, "_TRANSFORMERS_VERSION", Version("5.14.0"))
    with pytest.raises(TPError, match="caches MLA as expanded heads"):
        per_rank_kv(config, MLP_ONLY_PLAN, world=2, dtype=F32, batch=1, seq_len=5)


def test_layers_with_fixed_recurrent_state_are_refused() -> None:
    with pytest.raises(TPError, match=r"layer 0 is (mamba|linear_attention), whose fixed state"):
        per_rank_kv(jamba(), LLAMA_PLAN, world=2, dtype=F32, batch=1, seq_len=5)


def test_a_non_positive_tp_is_refused() -> None:
    with pytest.raises(TPError, match="tp is 0"):
        _kv(llama(), LLAMA_PLAN, 0)


def _small() -> dict[str, int]:
    return {
        "hidden_size": 64,
        "intermediate_size": 32,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 64,
    }


# --- weights per rank -------------------------------------------------------------------------


class FakeDTensor(torch.Tensor):
    """A stand-in for a DTensor parameter: `numel()` is the global size, `to_local()` the shard.

    A real DTensor needs a device mesh of `world` processes; this keeps the counting rule
    testable in one process (the 2-rank run checks real DTensors)."""

    local: torch.Tensor
    placements: tuple[object, ...]

    @staticmethod
    def wrap(whole: torch.Tensor, local: torch.Tensor, placement: object) -> FakeDTensor:
        fake = torch.Tensor._make_subclass(FakeDTensor, whole)
        fake.local = local
        fake.placements = (placement,)
        return fake

    def to_local(self) -> torch.Tensor:
        return self.local


def _sharded_model(world: int) -> nn.Module:
    model = nn.Sequential(nn.Linear(8, 16, bias=False), nn.LayerNorm(16), nn.Linear(16, 4))
    col = model[0].weight.detach()  # [16, 8]: rows split over the ranks
    model[0]._parameters["weight"] = FakeDTensor.wrap(col, col[: 16 // world].clone(), Shard(0))
    bias = model[2].bias.detach()  # a DTensor replicated on every rank: whole everywhere
    model[2]._parameters["bias"] = FakeDTensor.wrap(bias, bias.clone(), Replicate())
    return model


def test_weights_per_rank_come_from_the_local_shards_never_numel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tp_bytes, "_dtensor_type", lambda: FakeDTensor)
    weights = rank_weights(_sharded_model(world=2))
    norm = 2 * 16 * 4
    head = 16 * 4 * 4
    bias = 4 * 4
    assert weights.sharded_local_bytes == 8 * 8 * 4  # half of the [16, 8] weight
    assert weights.sharded_global_bytes == 16 * 8 * 4
    assert weights.replicated_bytes == norm + head + bias  # the replicated DTensor included
    assert weights.local_bytes == 8 * 8 * 4 + norm + head + bias
    assert weights.global_bytes == 16 * 8 * 4 + norm + head + bias
    assert weights.sharded_count == 1


def test_without_dtensors_every_parameter_is_replicated_and_tied_ones_count_once() -> None:
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight  # tied, as an embedding and lm_head
    weights = rank_weights(model)
    assert weights.local_bytes == weights.global_bytes == weights.replicated_bytes == 10 * 4 * 4
    assert weights.sharded_count == 0


def _rank(local: int, glob: int = 1000, replicated: int = 100) -> RankWeights:
    return RankWeights(
        local_bytes=local + replicated,
        global_bytes=glob + replicated,
        sharded_local_bytes=local,
        sharded_global_bytes=glob,
        replicated_bytes=replicated,
        sharded_count=3,
    )


def test_shards_that_add_up_pass_and_each_way_of_not_adding_up_is_named() -> None:
    assert shard_errors([_rank(500), _rank(500)]) == []
    assert shard_errors([_rank(400), _rank(500)]) == [
        "the ranks' shards add up to 900 B, the sharded parameters are 1000 B"
    ]
    assert "rank 1 sees a 1300 B model" in shard_errors([_rank(500), _rank(500, glob=1200)])[0]
    whole = shard_errors([_rank(1000), _rank(1000)])
    assert "rank 0 stores 1100 B, not less than the global 1100 B" in whole
    assert shard_errors([]) == ["no rank reported its weights"]


# --- memory fit per rank ----------------------------------------------------------------------


def test_a_70b_bf16_cell_fits_8x80gb_and_is_skipped_on_2x24gb_with_figures() -> None:
    data = yaml.safe_load((ROOT / "matrix/models/llama-3.1-70b.yaml").read_text(encoding="utf-8"))
    spec = ModelSpec.from_mapping(data)
    kwargs = {"dtype": torch.bfloat16, "batch": 1, "prompt_len": 512, "new_tokens": 128}
    at8 = rank_fit_estimate(spec, LLAMA_PLAN, tp=8, device_type="cuda", **kwargs)
    at2 = rank_fit_estimate(spec, LLAMA_PLAN, tp=2, device_type="cuda", **kwargs)
    # 70.6 B parameters in bf16, split over the ranks; KV 80 layers x 8 heads x 128 x 2 x 2 B
    # per token, 639 tokens, over the ranks.
    whole = model_facts(spec, torch.bfloat16, device_type="cuda").weights_bytes
    assert 141.0e9 < whole < 141.5e9
    assert (at8.weights_bytes, at2.weights_bytes) == (math.ceil(whole / 8), math.ceil(whole / 2))
    assert at8.cache_bytes == 80 * 8 * 128 * 2 * 2 * 639 // 8
    assert at2.cache_bytes == 4 * at8.cache_bytes
    assert rank_fit_reason(at8, FreeMemory("cuda:0", 80 * 10**9, "test"), 8) is None
    reason = rank_fit_reason(at2, FreeMemory("cuda:0", 24 * 10**9, "test"), 2)
    assert reason is not None
    assert reason.startswith("per rank of tp 2: needs 70.")
    assert "weights 70." in reason
    assert "> 24.0 GB free on cuda:0" in reason
    assert "PHASEBENCH_IGNORE_FIT=1" in reason
