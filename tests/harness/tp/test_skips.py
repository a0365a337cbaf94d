"""Collection-time skip reasons of a tp cell, each with what to change.

`tp_skip_reason` is a pure function of the config, tp, the device type and count and the
installed transformers' loading form, so every reason is reached on a CPU with either version.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import transformers

from benchmarks.harness.device.cpustate import allowed_cpus
from benchmarks.harness.tp.skips import (
    TPLoading,
    device_count,
    too_old_reason,
    tp_loading,
    tp_plan_for,
    tp_skip_reason,
)
from tests.kv_configs import config_for, gpt2, llama

LLAMA_PLAN = {
    "layers.*.self_attn.q_proj": "colwise",
    "layers.*.self_attn.k_proj": "colwise",
    "layers.*.self_attn.v_proj": "colwise",
    "layers.*.self_attn.o_proj": "rowwise",
}
LOADS = TPLoading("tp_plan", transformers.__version__)  # a transformers that loads TP


def _with_plan(config: object) -> object:
    # 4.46's configs carry no plan; an instance attribute stands in for the class one.
    if tp_plan_for(config) is None:
        config.base_model_tp_plan = LLAMA_PLAN  # type: ignore[attr-defined]
    return config


def _reason(config: object, tp: int, device_type: str = "cpu", count: int = 2) -> str | None:
    return tp_skip_reason(config, tp=tp, device_type=device_type, loading=LOADS, count=count)


def test_tp_1_never_skips() -> None:
    assert tp_skip_reason(gpt2(), tp=1, device_type="mps", loading=None, count=0) is None


def test_a_transformers_too_old_for_tp_skips_with_how_to_fix() -> None:
    reason = tp_skip_reason(_with_plan(llama()), tp=2, device_type="cpu", loading=None, count=2)
    assert reason == too_old_reason()
    assert f"transformers {transformers.__version__} cannot load a model tensor-parallel" in reason
    assert "install a newer transformers" in reason


def test_the_installed_transformers_loading_form() -> None:
    loading = tp_loading()
    fields = set()
    try:
        from transformers.distributed import DistributedConfig  # noqa: PLC0415

        fields = {f.name for f in dataclasses.fields(DistributedConfig)}
    except ImportError:
        pass
    if "tp_size" in fields:  # 5.x
        assert loading is not None
        assert loading.kwarg == "distributed_config"
        kwargs = loading.from_pretrained_kwargs(2, torch.bfloat16)
        assert kwargs["distributed_config"].tp_size == 2
        assert kwargs["dtype"] is torch.bfloat16
        assert "tp_plan" not in kwargs  # the deprecated form warns on 5.24
    elif hasattr(transformers.PretrainedConfig, "base_model_tp_plan"):  # 4.5x
        assert loading is not None
        assert loading.kwarg == "tp_plan"
        assert loading.from_pretrained_kwargs(2, torch.float32)["tp_plan"] == "auto"
    else:  # 4.46: every tp cell skips
        assert loading is None


def test_a_model_type_without_a_plan_skips() -> None:
    config = gpt2()
    assert tp_plan_for(config) is None
    reason = _reason(config, 2)
    assert reason is not None
    assert "model type 'gpt2' has no tensor-parallel plan (`base_model_tp_plan`)" in reason
    assert "run it at tp 1" in reason


def test_the_plan_comes_from_the_config_class_when_transformers_has_one() -> None:
    plan = tp_plan_for(llama())
    if not hasattr(transformers.PretrainedConfig, "base_model_tp_plan"):
        assert plan is None
    else:
        assert plan is not None
        assert plan["layers.*.self_attn.k_proj"] == "colwise"


def test_fewer_cuda_devices_than_tp_skips() -> None:
    reason = _reason(_with_plan(llama()), 2, device_type="cuda", count=1)
    assert reason == (
        "tp 2 needs 2 CUDA devices (one rank each), 1 visible; lower tp or run on a machine "
        "with more GPUs"
    )
    assert _reason(_with_plan(llama()), 2, device_type="cuda", count=2) is None


def test_fewer_cpu_cores_than_tp_skips() -> None:
    config = config_for(
        "llama",
        hidden_size=64,
        intermediate_size=32,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=1,
        vocab_size=64,
    )
    reason = _reason(_with_plan(config), 4, device_type="cpu", count=2)
    assert reason is not None
    assert "gives each rank 2 // 4 = 0 threads" in reason
    assert _reason(_with_plan(config), 2, device_type="cpu", count=2) is None


def test_a_device_without_a_backend_skips() -> None:
    reason = _reason(_with_plan(llama()), 2, device_type="mps", count=1)
    assert reason is not None
    assert "cuda (NCCL) or cpu (gloo) only" in reason


def test_kv_heads_the_plan_cannot_split_skip() -> None:
    # 4 query heads, 2 KV heads: tp 4 splits the queries but not the KV heads.
    reason = _reason(_with_plan(llama()), 4, count=4)
    assert reason is not None
    assert "2 KV head(s) per layer < tp 4" in reason


def test_query_heads_the_plan_cannot_split_skip() -> None:
    config = config_for(
        "llama",
        hidden_size=96,
        intermediate_size=32,
        num_attention_heads=6,
        num_key_value_heads=2,
        num_hidden_layers=1,
        vocab_size=64,
    )
    reason = _reason(_with_plan(config), 4, count=8)
    assert reason is not None
    assert reason.startswith("num_attention_heads 6 is not a multiple of tp 4")


def test_a_non_positive_tp_is_a_reason() -> None:
    assert _reason(llama(), 0) == "tp is 0; use 1, 2, 4 or 8"


def test_device_count() -> None:
    assert device_count("cpu") == len(allowed_cpus())
    assert device_count("mps") == 0
    if not torch.cuda.is_available():
        assert device_count("cuda") == 0


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_the_70b_config_runs_at_2_4_8_on_enough_gpus(tp: int) -> None:
    config = config_for(
        "llama",
        hidden_size=8192,
        intermediate_size=28672,
        num_attention_heads=64,
        num_key_value_heads=8,
        num_hidden_layers=80,
        vocab_size=128256,
    )
    assert _reason(_with_plan(config), tp, device_type="cuda", count=8) is None
    reason = _reason(_with_plan(config), 16, device_type="cuda", count=16)
    assert reason is not None
    assert "8 KV head(s) per layer < tp 16" in reason


def test_cpu_tp_on_an_mps_host_skips_with_the_reason_and_a_cuda_host_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PHASEBENCH_CPU_TP_ON_MAC", raising=False)
    config = _with_plan(llama())
    mac = tp_skip_reason(config, tp=2, device_type="cpu", loading=LOADS, count=8, mps_host=True)
    assert mac is not None
    assert mac.startswith("tp 2 on CPU on an MPS host")
    # A CUDA box: its CPU ranks hide the GPU (cpuranks), so CPU tp runs there.
    assert tp_skip_reason(config, tp=2, device_type="cpu", loading=LOADS, count=8) is None
    monkeypatch.setenv("PHASEBENCH_CPU_TP_ON_MAC", "1")
    assert (
        tp_skip_reason(config, tp=2, device_type="cpu", loading=LOADS, count=8, mps_host=True)
        is None
    )
