"""The model probes: the engine's greedy tokens against `generate` on this CPU (real), and the
FA2 comparison's verdict with fakes standing in for flash-attn (not installed here)."""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.harness.doctor.selfcheck import model as sm
from benchmarks.harness.model.models import build_model

CPU = torch.device("cpu")


def test_the_engines_tokens_equal_generates_on_this_cpu_with_both_caches():
    found = sm.probe_greedy_tokens("tiny-llama", CPU)
    assert found.level == "ok", found.message
    assert "dynamic cache: 16 token(s) equal" in found.message
    assert "static cache: 16 token(s) equal" in found.message


def test_tokens_that_differ_from_generates_are_bad_and_say_where(monkeypatch):
    real = sm.engine_tokens

    def off_by_one(engine: Any, prompt: torch.Tensor) -> torch.Tensor:
        tokens = real(engine, prompt).clone()
        tokens[1, 4] += 1
        return tokens

    monkeypatch.setattr(sm, "engine_tokens", off_by_one)
    found = sm.probe_greedy_tokens("tiny-llama", CPU)
    assert found.level == "bad"
    assert "1 of 16 token(s) differ, first at sequence 1 token 5" in found.message
    assert found.data["tokens_equal"] is False


def test_flash_attention_off_cuda_or_uninstalled_is_skipped_with_the_reason():
    found = sm.probe_fa2("tiny-llama", CPU)
    assert found.level == "skip"
    assert "flash_attention_2" in found.message


def _fake_fa2(monkeypatch, perturb: float) -> None:
    """FA2 played by sdpa on the CPU; `perturb` shifts the 'FA2' model's LM head."""
    monkeypatch.setattr(sm, "fa2_skip_reason", lambda *_: None)

    def build(spec: Any, device: torch.device, dtype: torch.dtype, **kwargs: Any) -> Any:
        fa2 = kwargs.pop("attention") == "flash_attention_2"
        model = build_model(spec, CPU, torch.float32, attention="sdpa", **kwargs)
        if fa2 and perturb:
            with torch.no_grad():
                model.lm_head.weight.add_(perturb)
        return model

    monkeypatch.setattr(sm, "build_model", build)


def test_fa2_logits_that_match_sdpas_and_tokens_that_match_generates_are_ok(monkeypatch):
    _fake_fa2(monkeypatch, perturb=0.0)
    found = sm.probe_fa2("tiny-llama", CPU)
    assert found.level == "ok", found.message
    assert found.data["fa2_max_abs_logit_diff"] == 0.0
    assert "FA2 with a static cache is skipped by the suite" in found.message


def test_fa2_logits_far_from_sdpas_are_bad(monkeypatch):
    _fake_fa2(monkeypatch, perturb=0.5)
    found = sm.probe_fa2("tiny-llama", CPU)
    assert found.level == "bad"
    assert found.data["fa2_max_abs_logit_diff"] > sm.FA2_LOGITS_TOLERANCE * float(
        found.data["fa2_max_abs_logit"]
    )


def test_judge_tokens_counts_differences():
    same = torch.tensor([[1, 2], [3, 4]])
    assert sm.judge_tokens("x", same, same.clone()) == (True, "x: 4 token(s) equal")
    equal, text = sm.judge_tokens("x", same, torch.tensor([[1, 2, 3]]))
    assert not equal
    assert "shapes differ" in text
