"""Accuracy against the dense model: zero for the dense model itself, non-zero for every quantized
path (weights, and a quantized KV cache read back by the decode steps), flagged when broken."""

from __future__ import annotations

import pytest
import torch

from benchmarks.harness.engine import make_prompt
from benchmarks.harness.model.models import build_model, load_model_spec
from benchmarks.harness.quant.accuracy import (
    LOGIT_POSITIONS,
    Bound,
    bound_for,
    measure_accuracy,
    reference_outputs,
)
from benchmarks.harness.quant.methods import apply_quant

CPU = torch.device("cpu")


def _model(seed: int = 0):
    return build_model(load_model_spec("tiny-llama"), CPU, torch.float32, seed=seed)


def _reference(model, new_tokens: int = 20):
    prompt = make_prompt(2, 12, 256, seed=3)
    return reference_outputs(model, CPU, prompt, new_tokens)


def test_the_reference_keeps_a_bounded_number_of_logit_positions():
    reference = _reference(_model())
    assert reference.tokens.shape == (2, 20)
    assert reference.logits.shape == (2, LOGIT_POSITIONS, 256)
    assert reference.logits.dtype == torch.float32


def test_the_dense_model_against_itself_is_exact():
    model = _model()
    accuracy = measure_accuracy(model, _reference(model), CPU, None, Bound(0.5, 0.5))
    assert accuracy.max_abs_logit_delta == 0.0
    assert accuracy.top1_agreement_ratio == 1.0
    assert not accuracy.flagged


def test_int8_weights_deviate_a_little_and_pass_their_bound():
    pytest.importorskip("torchao")
    reference = _reference(_model())
    model = apply_quant(_model(), "int8wo", CPU)
    accuracy = measure_accuracy(model, reference, CPU, None, bound_for("int8wo", None))
    assert 0.0 < accuracy.max_abs_logit_delta < accuracy.bound_max_abs_logit_delta
    assert not accuracy.flagged


def test_a_broken_path_is_flagged():
    reference = _reference(_model())
    broken = _model()
    with torch.no_grad():  # a kernel applying its scale twice: every quantized Linear doubled
        for module in broken.model.layers.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.mul_(2.0)
    accuracy = measure_accuracy(broken, reference, CPU, None, bound_for("int8wo", None))
    assert accuracy.flagged
    assert accuracy.fields()["accuracy_flag"] is True


def test_a_quantized_cache_shows_in_the_decode_steps_not_the_prefill():
    pytest.importorskip("hqq")
    from benchmarks.harness.kvquant.backends import (  # noqa: PLC0415
        kv_quant_unsupported_reason,
        make_quantized_cache,
    )

    model = _model()
    if kv_quant_unsupported_reason("hqq2", model.config, "cpu") is not None:
        pytest.skip(kv_quant_unsupported_reason("hqq2", model.config, "cpu"))
    reference = _reference(model)
    cache = make_quantized_cache(model, "hqq2", group_size=32, residual=4, batch=2)
    accuracy = measure_accuracy(model, reference, CPU, cache, bound_for("none", "hqq2"))
    assert accuracy.max_abs_logit_delta > 0.0


def test_the_looser_of_two_bounds_applies():
    both = bound_for("int8wo", "hqq2")
    assert both.logit_delta_std == max(bound_for("int8wo", None).logit_delta_std,
                                       bound_for("none", "hqq2").logit_delta_std)  # fmt: skip
    assert bound_for("none", None) == Bound(0.0, 1.0)
