"""Quantized cells through the whole suite (a subprocess, tiny models): weight and KV bytes
asserted, accuracy against the dense model recorded, unavailable methods skipped with reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.suite_run import ROOT, run_suite

pytest.importorskip("torchao")
pytest.importorskip("bitsandbytes")
pytest.importorskip("hqq")

MATRIX = """\
schema: 1
models: [tiny-llama]
devices: [cpu]
dtypes: [bfloat16]
batch: [1]
prompt_len: [20]
new_tokens: [6]
quant: [none, int8wo, int4wo-g32, nf4, fp8dq]
measurements: [prefill, decode, generate, interleaved]
kv_group_size: 32
kv_residual: 4
include:
  - {model: tiny-llama, device: cpu, dtype: bfloat16, batch: 1, prompt_len: 20, new_tokens: 6,
     quant: [none, int8wo], kv_quant: hqq4}
  - {model: tiny-llama, device: cpu, dtype: float32, batch: 1, prompt_len: 20, new_tokens: 6,
     quant: int4wo-g32}
warmup: 1
rounds: 2
"""


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict], Path]:
    base = tmp_path_factory.mktemp("quant")
    return (*run_suite(base, MATRIX, timeout_s=900), base)


def test_fp8dq_and_float32_cpu_int4_are_skipped_at_collection_with_the_reason(history):
    stdout, benchmarks, _ = history
    assert "float8 dynamic activation needs a CUDA GPU with sm89+" in stdout
    assert not [b for b in benchmarks if b["params"].get("quant") == "fp8dq"]
    assert "bfloat16 activations only" in stdout
    assert not [b for b in benchmarks if b["params"]["dtype"] == "float32"]


def test_every_cell_asserted_its_weight_and_kv_bytes(history):
    stdout, benchmarks, _ = history
    assert "test_kv_cache" in stdout or "passed" in stdout
    ids = {b["extra_info"]["cell_id"] for b in benchmarks}
    assert "tiny-llama-cpu-bfloat16-b1-p20-n6-q_int8wo-kvq_hqq4-g32-r4" in ids
    for bench in benchmarks:
        info = bench["extra_info"]
        assert info["weights_bytes"] == info["weights_analytic_bytes"]
        if bench["params"]["quant"] != "none":
            assert info["weights_bytes"] < 0.7 * info["weights_dense_bytes"]
        else:
            assert info["weights_bytes"] == info["weights_dense_bytes"]


def test_quantized_cells_record_accuracy_against_the_dense_model(history):
    _, benchmarks, _ = history
    quantized = [
        b for b in benchmarks
        if b["params"]["quant"] != "none" or b["params"].get("kv_quant", "none") != "none"
    ]  # fmt: skip
    assert quantized
    for bench in quantized:  # every record, the interleaved ones included
        info = bench["extra_info"]
        assert info["accuracy_tokens"] == 6
        assert 0.0 <= info["accuracy_top1_agreement_ratio"] <= 1.0
        assert (
            0.0 < info["accuracy_max_abs_logit_delta"] < info["accuracy_bound_max_abs_logit_delta"]
        )
        assert info["accuracy_flag"] is False
        assert info["quant_logits_kl"] > 0.0
        assert info["quant_sqnr_db_min"] < 200.0
        for part in ("weights", "kv"):  # each part inside its own method's bound
            least, bound = info[f"quant_sqnr_db_{part}_min"], info[f"quant_sqnr_db_{part}_bound"]
            assert (least is None) == (bound is None)
            assert least is None or least > bound
        if bench["params"]["quant"] != "none":
            assert any("LM head" in d["reason"] for d in info["weights_left_dense"])
    dense = [
        b for b in benchmarks if b["params"]["quant"] == "none" and "kv_quant" not in b["params"]
    ]
    assert dense
    assert all("accuracy_flag" not in b["extra_info"] for b in dense)


def test_quantized_kv_cells_record_packed_bytes_and_the_read_estimate(history):
    _, benchmarks, _ = history
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


def test_the_group_is_timed_in_turn_and_every_cell_carries_its_pairs(history):
    """The bfloat16 cells are one comparison group (quant and kv_quant aside, they are the same
    cell): timed in interleaved rounds, each record with as many rounds as the dense cell's
    rounds it is paired with."""
    stdout, benchmarks, _ = history
    interleaved = [b for b in benchmarks if b["group"].startswith("interleaved_")]
    cells = {b["extra_info"]["cell_id"] for b in interleaved}
    assert len(cells) == 6  # none, int8wo, int4wo-g32, nf4, and the two hqq4 cells
    assert len(interleaved) == 2 * len(cells)  # prefill and decode
    dense_id = "tiny-llama-cpu-bfloat16-b1-p20-n6-q_none"
    for bench in interleaved:
        info = bench["extra_info"]
        rounds = bench["stats"]["data"]
        assert len(rounds) == info["interleaved_pairs"] >= 16
        assert info["interleaved_dense_cell_id"] == dense_id
        assert sorted(info["interleaved_order"]) == sorted(cells)
        dense = info["interleaved_dense_rounds_s"]
        assert len(dense) == len(rounds)
        if info["cell_id"] == dense_id:
            assert dense == rounds  # the dense cell: its own rounds
        if bench["group"] == "interleaved_decode":
            assert info["decode_top_ops"]
            assert info["decode_bytes_per_s"] == pytest.approx(
                info["decode_bytes"] / info["decode_step_s"]
            )
    assert "interleaved group done" in stdout


def test_the_quant_command_prints_paired_ratios_with_their_intervals(history):
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    done = subprocess.run(
        [sys.executable, "-m", "reports", "quant", str(history[2] / "history")],
        capture_output=True, text=True, check=False, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "| int4wo-g32 / none | " in done.stdout
    assert "\u00d7 [" in done.stdout  # a paired ratio and its interval
