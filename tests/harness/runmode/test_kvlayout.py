"""KV expectations per cache implementation, as the suite and `kv --cache static` use them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from benchmarks.harness.cache.kv import analytic_kv
from benchmarks.harness.cache.static import _layer_tensors, analytic_static_kv, measure_static_kv
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import build_model, load_model_spec
from benchmarks.harness.runmode.decide import configure_engine
from benchmarks.harness.runmode.kvlayout import expected_logical_bytes, static_check, static_report

CPU = torch.device("cpu")
SPEC = load_model_spec("tiny-llama")


def cell(**run_mode):
    return Cell("tiny-llama", "cpu", "float32", 2, 12, 5, 0, 1, 0, **run_mode)


def test_dynamic_cells_expect_the_dynamic_layout_and_static_cells_the_allocation():
    config = SPEC.hf_config()
    dynamic = analytic_kv(config, dtype=torch.float32, batch=2, seq_len=13).total_bytes
    assert expected_logical_bytes(cell(), config, torch.float32, 13) == dynamic
    assert expected_logical_bytes(cell(cache="dynamic"), config, torch.float32, 13) == dynamic
    static = analytic_static_kv(config, dtype=torch.float32, batch=2, max_cache_len=16, seq_len=13)
    assert expected_logical_bytes(cell(cache="static"), config, torch.float32, 13) == (
        static.allocated_bytes
    )
    assert static.allocated_bytes == dynamic * 16 // 13  # 16 = P + N - 1 positions allocated


def _static_pass(model, prompt, static_cell):
    """The engine's asserting pass on the cell's own static cache, read at every point."""
    engine = Engine(model, CPU)
    configure_engine(engine, static_cell)
    return engine.generate(prompt, static_cell.new_tokens, probe=measure_static_kv)


def test_the_static_check_of_a_cell_finds_no_mismatch_and_would_see_one():
    model = build_model(SPEC, CPU, torch.float32).eval()
    prompt = make_prompt(2, 12, 256, seed=0)
    static = cell(cache="static")
    result = _static_pass(model, prompt, static)
    assert len(result.probed) == static.new_tokens  # after the prefill and after each step
    config = model.config
    assert static_check(config, static, torch.float32, result.probed) == []
    with pytest.raises(ValueError, match="has no static cache"):
        static_check(config, cell(), torch.float32, result.probed)
    # A wrong expectation (bfloat16 bytes for a float32 cache) is reported, not hidden.
    assert static_check(config, static, torch.bfloat16, result.probed)
    # A pass that read nothing (run without the probe) cannot pass for a checked one.
    (missing,) = static_check(config, static, torch.float32, ())
    assert "0 static-cache readings for 5 points" in missing


def test_the_static_check_reads_the_used_positions_of_the_cells_own_cache():
    """A cache whose reset left a stale position written shows up in the used bytes."""
    model = build_model(SPEC, CPU, torch.float32).eval()
    prompt = make_prompt(2, 12, 256, seed=0)
    static = cell(cache="static")
    engine = Engine(model, CPU)
    configure_engine(engine, static)
    engine.generate(prompt, static.new_tokens)  # fills the slot's cache; the next reset zeroes it
    slot = engine.start_cache
    reset = slot.__call__

    def stale_reset(batch):
        cache = reset(batch)
        with torch.inference_mode():  # the cache's buffers are inference tensors
            for keys, _ in _layer_tensors(cache):
                keys[:, :, -1, :] = 1.0  # the last position stays "written"
        return cache

    engine.start_cache = stale_reset
    result = engine.generate(prompt, static.new_tokens, probe=measure_static_kv)
    wrong = static_check(model.config, static, torch.float32, result.probed)
    assert len(wrong) == static.new_tokens - 1  # every point but the last, where it is used


def request(device):
    return SimpleNamespace(
        spec=SPEC, config=SPEC.hf_config(), dtype_name="float32", dtype=torch.float32,
        prompt_len=12, new_tokens=5, batch=1, device=device, seed=0,
    )  # fmt: skip


def test_the_cli_report_gives_allocated_and_used_bytes_per_step():
    report, match = static_report(request(None), max_cache_len=None)
    assert match
    assert "measured" not in report
    # tiny-llama: 2 layers x (K + V) x 2 KV heads x head_dim 16 x 4 bytes = 512 B per position.
    assert report["max_cache_len"] == 16
    assert report["allocated_bytes"] == 16 * 512
    assert report["per_step_used_bytes"] == [p * 512 for p in (12, 13, 14, 15, 16)]
    assert [layer["allocated_positions"] for layer in report["layers"]] == [16, 16]


def test_the_cli_report_measures_on_a_device_and_matches():
    report, match = static_report(request(CPU), max_cache_len=32)
    assert match
    assert report["match"]
    assert report["measured"]["per_step_allocated_bytes"] == [32 * 512] * 5
    assert report["measured"]["per_step_used_bytes"] == report["per_step_used_bytes"]


def test_a_static_layout_holds_the_allocated_tensors_and_measures_equal():
    from benchmarks.harness.cache.measure import measure_kv  # noqa: PLC0415
    from benchmarks.harness.cache.static import make_static_cache  # noqa: PLC0415
    from benchmarks.harness.model import compat  # noqa: PLC0415
    from benchmarks.harness.runmode.kvlayout import (  # noqa: PLC0415
        analytic_layout,
        static_fields,
        static_fields_mismatch,
    )

    static = cell(cache="static")
    model = build_model(SPEC, CPU, torch.float32)
    layout = analytic_layout(static, model.config, dtype=torch.float32, seq_len=12)
    assert [layer.k_shape for layer in layout.layers] == [(2, 2, 16, 16)] * 2
    cache = make_static_cache(model, batch=2, max_cache_len=16)
    with torch.inference_mode():
        model(input_ids=make_prompt(2, 12, 256, seed=0), use_cache=True,
              **{compat.cache_kwarg(model): cache})  # fmt: skip
    assert measure_kv(cache).logical_bytes == layout.total_bytes
    info = static_fields(static, model.config, torch.float32, cache, seq_len=12)
    assert info["kv_static_measured_used_bytes"] == 12 * 2 * 512
    assert static_fields_mismatch(info) is None
    assert "used: analytic" in str(
        static_fields_mismatch({**info, "kv_static_measured_used_bytes": 1})
    )
    assert static_fields(cell(), model.config, torch.float32, cache, seq_len=12) == {}
