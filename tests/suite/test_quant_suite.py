"""Quantized cells through the whole suite (a subprocess, tiny models): weight and KV bytes
asserted, accuracy against the dense model recorded, unavailable methods skipped with reasons."""

from __future__ import annotations

import pytest

from tests.suite_run import run_suite

pytest.importorskip("torchao")
pytest.importorskip("bitsandbytes")
pytest.importorskip("hqq")

MATRIX = """\
schema: 1
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [20]
new_tokens: [6]
quant: [none, int8wo, int4wo-g32, nf4, fp8dq]
measurements: [prefill, decode, generate]
kv_group_size: 32
kv_residual: 4
include:
  - {model: tiny-llama, device: cpu, dtype: float32, batch: 1, prompt_len: 20, new_tokens: 6,
     quant: [none, int8wo], kv_quant: hqq4}
warmup: 1
rounds: 2
"""


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict]]:
    return run_suite(tmp_path_factory.mktemp("quant"), MATRIX, timeout_s=900)


def test_fp8dq_is_skipped_at_collection_with_the_reason(history):
    stdout, benchmarks = history
    assert "float8 dynamic activation needs a CUDA GPU with sm89+" in stdout
    assert not [b for b in benchmarks if b["params"].get("quant") == "fp8dq"]


def test_every_cell_asserted_its_weight_and_kv_bytes(history):
    stdout, benchmarks = history
    assert "test_kv_cache" in stdout or "passed" in stdout
    ids = {b["extra_info"]["cell_id"] for b in benchmarks}
    assert "tiny-llama-cpu-float32-b1-p20-n6-q_int8wo-kvq_hqq4-g32-r4" in ids
    for bench in benchmarks:
        info = bench["extra_info"]
        assert info["weights_bytes"] == info["weights_analytic_bytes"]
        if bench["params"]["quant"] != "none":
            assert info["weights_bytes"] < 0.7 * info["weights_dense_bytes"]
        else:
            assert info["weights_bytes"] == info["weights_dense_bytes"]


def test_quantized_cells_record_accuracy_against_the_dense_model(history):
    _, benchmarks = history
    quantized = [
        b for b in benchmarks
        if b["params"]["quant"] != "none" or b["params"].get("kv_quant", "none") != "none"
    ]  # fmt: skip
    assert quantized
    for bench in quantized:
        info = bench["extra_info"]
        assert info["accuracy_tokens"] == 6
        assert 0.0 <= info["accuracy_top1_agreement_ratio"] <= 1.0
        assert (
            0.0 < info["accuracy_max_abs_logit_delta"] < info["accuracy_bound_max_abs_logit_delta"]
        )
        assert info["accuracy_flag"] is False
    dense = [
        b for b in benchmarks if b["params"]["quant"] == "none" and "kv_quant" not in b["params"]
    ]
    assert dense
    assert all("accuracy_flag" not in b["extra_info"] for b in dense)


def test_quantized_kv_cells_record_packed_bytes_and_the_read_estimate(history):
    _, benchmarks = history
    kv = [b for b in benchmarks if b["params"].get("kv_quant") == "hqq4"]
    assert kv
    for bench in kv:
        info = bench["extra_info"]
        assert 0 < info["kv_quant_bytes_per_token"] < info["kv_bytes_per_token"]
        if bench["group"] == "decode":
            # The roofline's KV is the stored (quantized) cache, below the dense estimate read.
            assert (
                info["kv_measured_after_prefill_bytes"] == info["kv_analytic_after_prefill_bytes"]
            )
            assert info["kv_dequant_read_bytes_estimate"] > info["kv_measured_after_prefill_bytes"]
