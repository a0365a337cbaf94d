"""Quantized KV caches in the engine and at collection: snapshot/restore, start cache, reasons.

* `Engine.snapshot` / `restore` of every backend's cache (quanto's tensor subclasses cannot
  be deep-copied) give a cache with the same bytes, positions and next token as the original,
  and stay reusable; the host-copy path (`copy_cache(cache, "cpu")`) too.
* `configure_engine` gives a quantized-KV cell a fresh `QuantizedCache` per prefill (building
  quanto's extension first); `skip_reason` refuses static + kv_quant, a sliding-window model
  on transformers 5.x, a group size that cannot divide the cached tensors, and a missing
  package with its install command.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from benchmarks.harness.cache.measure import measure_kv
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.kvquant import backends as quantized
from benchmarks.harness.kvquant.backends import (
    KV_QUANT,
    kv_quant_unsupported_reason,
    layered_api,
    make_quantized_cache,
)
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model import compat
from benchmarks.harness.runmode import decide
from benchmarks.harness.runmode.kvlayout import analytic_layout
from tests.kv_configs import VOCAB, build_tiny, llama


def engine_for(kv_quant, dtype=torch.float32):
    config = llama()
    reason = kv_quant_unsupported_reason(kv_quant, config, "cpu")
    if reason is not None:
        pytest.skip(reason)
    engine = Engine(build_tiny(config).to(dtype), torch.device("cpu"))
    engine.start_cache = lambda batch: make_quantized_cache(
        engine.model, kv_quant, group_size=16, residual=4, batch=batch
    )
    return engine


def stepped(engine, token, cache, steps):
    for _ in range(steps):
        token, cache = engine.decode_step(token, cache, compat.cache_seq_length(cache))
    return token, cache


@pytest.mark.parametrize("kv_quant", sorted(KV_QUANT))
def test_snapshot_and_restore_give_equal_bytes_and_the_same_next_tokens(kv_quant):
    engine = engine_for(kv_quant, torch.bfloat16)
    prefill = engine.prefill(make_prompt(2, 9, VOCAB, seed=0))
    # Two steps in: a non-empty residual (R = 4) to copy besides the quantized part.
    token, cache = stepped(engine, prefill.next_token, prefill.cache, 2)
    snapshot = engine.snapshot(cache)
    assert snapshot.seq_len == 11
    expected_tokens, after = stepped(engine, token, cache, 3)  # crosses the flush at step 4
    for copy_of in (engine.restore, lambda snap: compat.copy_cache(snap.cache, "cpu")):
        restored = copy_of(snapshot)
        assert restored is not cache
        assert measure_kv(restored).per_layer_bytes == measure_kv(snapshot.cache).per_layer_bytes
        assert measure_kv(restored).logical_bytes == snapshot.kv_bytes
        assert compat.cache_seq_length(restored) == 11
        tokens, restored_after = stepped(engine, token, restored, 3)
        assert torch.equal(tokens, expected_tokens)
        assert measure_kv(restored_after).per_layer_bytes == measure_kv(after).per_layer_bytes
    # Stepping the restored copies changed neither the snapshot nor the original.
    assert compat.cache_seq_length(snapshot.cache) == 11
    assert measure_kv(engine.restore(snapshot)).logical_bytes == snapshot.kv_bytes


def test_a_snapshot_does_not_share_quantized_tensors_with_its_cache():
    engine = engine_for("quanto4")
    prefill = engine.prefill(make_prompt(1, 9, VOCAB, seed=0))
    copied = compat.copy_cache(prefill.cache)
    original = prefill.cache.layers[0]._quantized_keys
    clone = copied.layers[0]._quantized_keys
    assert type(clone) is type(original)
    assert clone._data._data.data_ptr() != original._data._data.data_ptr()
    assert clone._scale.data_ptr() != original._scale.data_ptr()
    assert torch.equal(clone.dequantize(), original.dequantize())


def cell(model="tiny-llama", prompt_len=16, **axes):
    return Cell(model, "cpu", "float32", 1, prompt_len, 4, warmup=0, rounds=1, seed=0, **axes)


def test_configure_engine_gives_each_prefill_a_fresh_quantized_cache(monkeypatch):
    built = []
    monkeypatch.setattr(decide, "ensure_quanto_built", built.append)
    for kv_quant in ("hqq4", "quanto2"):
        engine = Engine(build_tiny(llama()), torch.device("cpu"))
        decide.configure_engine(engine, cell(kv_quant=kv_quant, kv_group_size=32, kv_residual=8))
        first, second = engine.start_cache(1), engine.start_cache(1)
        assert first is not second
        layer = first.layers[0] if layered_api() else first
        backend = "HQQ" if kv_quant == "hqq4" else "Quanto"
        assert backend in type(layer).__name__ or backend in type(first).__name__
        assert (layer.q_group_size, layer.residual_length, layer.nbits) == (
            32,
            8,
            int(kv_quant[-1]),
        )
    assert built == ["cpu"]  # quanto's extension only, before any round
    engine = Engine(build_tiny(llama()), torch.device("cpu"))
    decide.configure_engine(engine, cell(kv_quant="none"))
    assert engine.start_cache is None


@pytest.mark.parametrize("kv_quant", ["fp8", "hqq2", "quanto4"])
def test_the_suite_s_kv_check_holds_for_a_quantized_cell(kv_quant):
    # What benchmarks/test_kv_cache.py asserts: Engine.generate's measured bytes after the
    # prefill and after every step == analytic_layout(cell, ...) at P + step.
    engine = engine_for(kv_quant)
    quantized_cell = cell(prompt_len=9, kv_quant=kv_quant, kv_group_size=16, kv_residual=4)
    quantized_cell = Cell.from_params({**quantized_cell.to_params(), "new_tokens": 10})
    decide.configure_engine(engine, quantized_cell)
    result = engine.generate(make_prompt(1, 9, VOCAB, seed=0), quantized_cell.new_tokens)
    measured = (result.kv_bytes_after_prefill, *result.kv_bytes_per_step)
    analytic = tuple(
        analytic_layout(quantized_cell, llama(), dtype=torch.float32, seq_len=9 + step).total_bytes
        for step in range(quantized_cell.new_tokens)
    )
    assert measured == analytic
    assert len(set(measured)) > 2  # the bytes moved (no constant that matches by luck)


def test_static_plus_kv_quant_is_refused_and_plain_hqq_runs():
    reason = decide.skip_reason(cell(cache="static", kv_quant="hqq4"))
    assert "cannot be a static cache; remove `cache: static`" in str(reason)
    assert decide.skip_reason(cell(cache="dynamic", kv_quant="hqq4")) is None
    assert decide.skip_reason(cell(kv_quant="none")) is None


def test_a_group_size_that_cannot_divide_the_cached_tensors_is_refused():
    # tiny-llama: H*D = 32. G = 48 needs 3 | T: P = 16 is not.
    reason = decide.skip_reason(cell(kv_quant="hqq4", kv_group_size=48))
    assert "group size 48 does not divide B*H*T*D = 512 at T = 16 positions" in str(reason)
    # P = 15 works at the prefill, but the flush after R = 2 steps quantizes T = 17.
    reason = decide.skip_reason(cell(prompt_len=15, kv_quant="quanto4", kv_group_size=48))
    if reason is not None and "group size" not in reason:
        pytest.skip(reason)  # quanto refused by this transformers (another test checks it)
    assert (
        decide.skip_reason(cell(prompt_len=15, kv_quant="quanto4", kv_group_size=48, kv_residual=3))
        is None
    )
    reason = decide.skip_reason(
        cell(prompt_len=15, kv_quant="quanto4", kv_group_size=48, kv_residual=2)
    )
    assert "does not divide H*T*D = 544 at T = 17 positions" in str(reason)
    reason = decide.skip_reason(cell(kv_quant="hqq2", kv_group_size=6))
    assert "group size 6 is not a multiple of 4" in str(reason)


def test_a_sliding_window_model_is_refused_where_transformers_refuses_it():
    reason = decide.skip_reason(cell(model="tiny-mistral-sw", kv_quant="hqq4"))
    if layered_api():  # 5.x: only full-attention layers
        assert "holds full-attention layers only; mistral has sliding_attention" in str(reason)
    else:  # 4.46: MistralForCausalLM does not declare quantized-cache support
        assert "MistralForCausalLM does not support a quantized cache" in str(reason)


@pytest.mark.parametrize(
    ("kv_quant", "module", "command"),
    [
        ("hqq4", "hqq", "pip install hqq==0.2.8.post1"),
        ("quanto2", "optimum.quanto", "pip install optimum-quanto==0.2.7"),
    ],
)
def test_a_missing_package_is_named_with_its_install_command(
    monkeypatch, kv_quant, module, command
):
    real = importlib.util.find_spec

    def find_spec(name, *args):
        if name == module:
            return None
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    reason = kv_quant_unsupported_reason(kv_quant, llama(), "cpu")
    if kv_quant.startswith("quanto") and quantized._version_reason(kv_quant, "quanto"):
        assert "use transformers >= 4.47.0" in str(reason)  # the version is checked first
        return
    assert reason == f"kv_quant {kv_quant}: {module} is not installed ({command})"


def test_devices_each_backend_cannot_run_on():
    assert "fp8 on MPS is not verified" in str(quantized._device_reason("fp8", "fp8", "mps"))
    assert quantized._device_reason("hqq4", "hqq", "cuda") is None
    assert quantized._device_reason("hqq4", "hqq", "mps") is None
    if quantized._ninja_available():  # and g++ (this machine: both; no quanto cell otherwise)
        assert quantized._device_reason("quanto4", "quanto", "cpu") is None
