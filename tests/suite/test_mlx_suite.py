"""The suite end to end with the `engine` axis (issue 45): torch and MLX cells of one model
through the same test functions into one history file, MLX's KV bytes asserted across the
256-position step, and the report's side-by-side view; without mlx the MLX cells are skipped
at collection with the command that installs it, and the torch cells run as before."""

from __future__ import annotations

import json

from benchmarks.harness.mlx.available import unavailable_reason
from reports.cli import main as reports_main
from tests.suite_run import run_suite

MATRIX = """schema: 1
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [260]
new_tokens: [3]
engine: [torch, mlx]
measurements: [prefill, decode, generate]
warmup: 0
rounds: 1
"""


def test_both_engines_run_the_same_test_functions(tmp_path):
    output, benchmarks = run_suite(tmp_path, MATRIX)
    by_name = {b["name"]: b for b in benchmarks}
    torch_id = "tiny-llama-cpu-float32-b1-p260-n3"
    for test in ("test_prefill_forward", "test_decode", "test_generate"):
        assert f"{test}[{torch_id}]" in by_name  # the torch id is the one it had before
    reason = unavailable_reason()
    if reason is not None:  # no mlx here: skipped at collection, saying how to install it
        assert f"{torch_id}-engine_mlx: engine mlx" in output
        assert "pip install --group mlx" in output
        assert len(benchmarks) == 3
        return
    assert "8 passed" in output  # prefill, decode, generate and the KV check on each engine
    tests = ("test_prefill_forward", "test_decode", "test_generate")
    mlx = {t: by_name[f"{t}[{torch_id}-engine_mlx]"] for t in tests}
    decode = mlx["test_decode"]["extra_info"]
    assert mlx["test_decode"]["params"]["engine"] == "mlx"
    assert decode["engine"] == "mlx"
    assert decode["timer"] == "perf_counter_after_mx.synchronize"
    # 260 positions: whole steps of 256 (512 slots); used: 261 positions after the step
    per_slot = 2 * 2 * 16 * 2 * 4  # K and V of 2 layers x 2 heads x 16 dims, float32
    assert decode["kv_measured_after_prefill_bytes"] == 512 * per_slot
    assert decode["kv_used_measured_bytes"] == 261 * per_slot
    assert decode["memory_labels"]["peak_allocated"].startswith("mx.get_peak_memory")
    generate = mlx["test_generate"]["extra_info"]
    assert generate["kv_bytes_per_step"] == [512 * per_slot, 512 * per_slot]
    history = tmp_path / "history"
    machine = json.loads(next(history.rglob("*.json")).read_text())["machine_info"]
    assert machine["phasebench"]["stack"]["mlx_lm"] == "0.32.2"
    assert reports_main(["engines", str(history)]) == 0
