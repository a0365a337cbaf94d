"""Tensor-parallel cells in the suite (issue 32), without starting any rank: the collection-time
reasons, the replay timer and the record built from a fake rank-0 result.

The real runs (torchrun, two gloo ranks) are `test_tp_suite.py`'s.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from benchmarks.harness.device.freemem import FreeMemory
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.tp.skips import too_old_reason, tp_loading
from benchmarks.suite.tp import cells as tp_cells
from benchmarks.suite.tp.cells import (
    accelerate_reason,
    injected_failure,
    measurement_reason,
    run_mode_reason,
    save_fit_reason,
    tp_cell_reason,
)
from benchmarks.suite.tp.record import ReplayTimer, allreduce_bytes_estimate

pytest_plugins = ["pytester"]
LOADS_TP = tp_loading() is not None
CELL = Cell("tiny-llama", "cpu", "float32", 1, 24, 8, warmup=1, rounds=3, seed=0, tp=2)


def test_tp1_cells_have_no_tp_reason():
    assert tp_cells.tp_cell_reason(Cell("tiny-llama", "cpu", "float32", 1, 24, 8, 1, 3, 0)) is None
    assert (
        tp_cells.tp_cell_reason(Cell("tiny-llama", "cpu", "float32", 1, 24, 8, 1, 3, 0, tp=1))
        is None
    )


@pytest.mark.parametrize(
    ("mode", "named"),
    [
        ({"compile": "default"}, "compile=default"),
        ({"cache": "static"}, "cache=static"),
        ({"quant": "int8wo"}, "quant=int8wo"),
        ({"kv_quant": "hqq4"}, "kv_quant=hqq4"),
        ({"attention": "eager"}, "attention=eager"),
    ],
)
def test_run_modes_the_worker_does_not_run_are_skipped(mode, named):
    cell = Cell(**{**CELL.to_params(), **mode})  # type: ignore[arg-type]
    reason = tp_cells.tp_cell_reason(cell)
    assert reason is not None
    assert named in reason
    assert "not supported tensor-parallel" in reason
    # The default kernel, a dynamic cache and no compile are what the worker runs.
    plain = Cell(**{**CELL.to_params(), "attention": "sdpa", "cache": "dynamic", "compile": "none"})  # type: ignore[arg-type]
    assert run_mode_reason(plain) is None


@pytest.mark.skipif(LOADS_TP, reason="this transformers loads tensor-parallel")
def test_an_old_transformers_skips_with_the_too_old_reason():
    assert tp_cells.tp_cell_reason(CELL) == too_old_reason()
    assert transformers.__version__ in too_old_reason()


@pytest.mark.skipif(not LOADS_TP, reason=too_old_reason())
def test_devices_and_memory_decide_the_skip(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)  # a Mac has its own
    monkeypatch.setattr(tp_cells, "device_count", lambda device_type: 2)
    assert tp_cells.tp_cell_reason(CELL) is None
    monkeypatch.setattr(tp_cells, "device_count", lambda device_type: 1)
    assert "gives each rank 1 // 2 = 0 threads" in (tp_cells.tp_cell_reason(CELL) or "")
    monkeypatch.setattr(tp_cells, "device_count", lambda device_type: 8)
    tiny = FreeMemory("cpu", 2_000, "test")
    monkeypatch.setattr(tp_cells, "free_memory", lambda device: tiny)
    reason = tp_cells.tp_cell_reason(CELL) or ""
    # On CPU the ranks share the host: each gets free / tp.
    assert reason.startswith("per rank of tp 2:")
    assert "> 0.0 MB free on cpu / 2 ranks (test, shared by 2 ranks)" in reason
    monkeypatch.setenv("PHASEBENCH_IGNORE_FIT", "1")
    assert tp_cells.tp_cell_reason(CELL) is None


@pytest.mark.skipif(not LOADS_TP, reason=too_old_reason())
def test_a_cpu_tp_cell_runs_on_a_cuda_host_and_is_skipped_on_an_mps_host(
    monkeypatch: pytest.MonkeyPatch,
):
    """The smoke matrix's tp-2 CPU cell on the hosts the project is for (simulated: what the
    collection consults). On a CUDA box it runs (its ranks hide the GPU); on a Mac it is
    skipped with the reason, not crashed in transformers' MPS refusal."""
    monkeypatch.delenv("PHASEBENCH_CPU_TP_ON_MAC", raising=False)
    monkeypatch.setattr(tp_cells, "device_count", lambda device_type: 8)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert tp_cells.tp_cell_reason(CELL) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    reason = tp_cells.tp_cell_reason(CELL)
    assert reason is not None
    assert reason.startswith("tp 2 on CPU on an MPS host")
    monkeypatch.setenv("PHASEBENCH_CPU_TP_ON_MAC", "1")
    assert tp_cells.tp_cell_reason(CELL) is None


def test_other_modules_name_why_they_skip_tp_cells():
    assert "KV bytes are asserted on every rank" in measurement_reason("benchmarks.test_kv_cache")
    assert measurement_reason("benchmarks.test_generate").startswith(
        "test_generate does not run tensor-parallel cells"
    )


def test_the_replay_timer_reads_each_round_exactly():
    durations = [0.1, 0.2 + 1e-17, 1e-9, 123.456]
    timer = ReplayTimer(durations)
    got = []
    for _ in durations:  # pytest-benchmark's runner: one read before the call, one after
        start = timer()
        got.append(timer() - start)
    assert got == durations  # bit for bit: no cumulative sum's rounding
    with pytest.raises(RuntimeError, match="holds 4 measured rounds"):
        timer()


def test_the_allreduce_estimate():
    config = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2)
    plan = {
        "model.embed_tokens": "embedding_rowwise",
        "model.layers.*.self_attn.o_proj": "rowwise",
        "model.layers.*.mlp.down_proj": "rowwise",
        "model.layers.*.mlp.up_proj": "colwise",
        "lm_head": "colwise_gather_output",
    }
    # 5 all-reduces (2 per layer + the embedding) of 1 token x 64 x 4 B, ring 2 x (2 - 1) / 2.
    assert allreduce_bytes_estimate(config, plan, dtype="float32", tokens=1, world=2) == 5 * 256
    assert allreduce_bytes_estimate(config, plan, dtype="bfloat16", tokens=24, world=4) == (
        2 * 3 * 5 * 24 * 64 * 2 // 4
    )


def test_the_injected_failure_is_parsed_or_refused():
    assert injected_failure(None) == {}
    assert injected_failure("1:kill:generate") == {
        "fail_rank": 1,
        "fail_mode": "kill",
        "fail_at": "generate",
    }
    for bad in ("1:kill", "x:kill:load", "1:boom:load", "1:kill:nowhere"):
        with pytest.raises(ValueError, match="PHASEBENCH_TP_FAIL"):
            injected_failure(bad)


# A pytest-benchmark session of its own, in this process (pytester; no xdist there, which would
# disable benchmarks): a fake rank-0 result through `tp_measurement`, the saved JSON read back.
FAKE_TEST = """
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.tp.launch import LaunchResult
from benchmarks.suite.tp.cells import TPRun
from benchmarks.harness.roofline.peaks import Peaks
from benchmarks.suite.tp.record import tp_measurement
import transformers

DECODE = [0.25, 0.125, 0.5 + 1e-12]
RESULT = {
    "tp_size": 2, "backend": "gloo", "prefill_s": [1.0, 2.0, 3.0], "decode_step_s": DECODE,
    "round_clock": "one_clock", "prefill_start_skew_s": [0.01, 0.02, 0.03],
    "decode_start_skew_s": [0.003, 0.001, 0.002],
    "weights_per_rank_bytes": [10, 10], "weights_global_bytes": 18,
    "kv_per_rank_after_prefill_bytes": [6, 6], "kv_per_rank_final_bytes": [8, 8],
    "kv_tp1_after_prefill_bytes": 12, "load_peak_per_rank_bytes": [300, 301],
    "load_peak_label": "peak RSS, loading", "run_peak_per_rank_bytes": [100, 101],
    "run_peak_label": "peak RSS, running", "plan": {"model.layers.*.o_proj": "rowwise"},
}


def test_fake(benchmark):
    cell = Cell("tiny-llama", "cpu", "float32", 2, 24, 8, warmup=1, rounds=3, seed=0, tp=2)
    launched = LaunchResult(0, False, 12.5, RESULT, ({"threads": 1}, {"threads": 1}), None, "")
    config = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2)
    run = TPRun(cell.id, launched, None, None, config)
    peaks = Peaks(1e11, 1e10, "measured:copy/linear", "float32")
    tp_measurement(benchmark, cell, run, "decode", lambda line: None, peaks=peaks)
"""


def test_the_record_holds_exactly_the_ranks_rounds(pytester: pytest.Pytester):
    pytester.makepyfile(test_fake=FAKE_TEST)
    out = pytester.path / "out.json"
    done = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--benchmark-json={out}")
    done.assert_outcomes(passed=1)
    bench = json.loads(out.read_text())["benchmarks"][0]
    assert bench["stats"]["data"] == [0.25, 0.125, 0.5 + 1e-12]
    assert bench["stats"]["rounds"] == 3
    assert bench["options"]["timer"] == "tp_replay_round_one_clock"
    info = bench["extra_info"]
    assert info["decode_step_s"] == 0.25
    assert info["decode_tok_per_s"] == 2 / 0.25
    assert info["tp_size"] == 2
    assert "tp_slowest_rank_counts" not in info  # barrier-exit skew, not a rank's slowness
    assert (info["tp_round_clock"], info["tp_start_skew_s"]) == ("one_clock", 0.002)
    assert info["tp_kv_rank_after_prefill_bytes"] == [6, 6]
    assert info["tp_load_peak_rank_bytes"] == [300, 301]
    assert info["tp_run_peak_rank_bytes"] == [100, 101]
    assert info["memory_labels"] == {
        "tp_load_peak_rank": "peak RSS, loading",
        "tp_run_peak_rank": "peak RSS, running",
    }
    assert info["tp_launch_s"] == 12.5
    # One all-reduce per layer of 2 x 1 token x 64 x 4 B, ring factor 2 x (2 - 1) / 2.
    assert info["tp_allreduce_bytes_per_step_estimate"] == 2 * 2 * 64 * 4
    assert "weights_bytes" not in info
    assert "kv_measured_after_prefill_bytes" not in info
    assert info["decode_pct_of_peak_bandwidth"] is None  # the whole-model field: per rank below
    # Per rank: 10 B of weights + 6 B of KV + (8 - 6) / 7 steps' growth, rounded down: 16 B each;
    # on a CPU the ranks' sum (32 B) per 0.25 s against the host's 1e10 B/s.
    assert info["tp_decode_rank_bytes"] == [16, 16]
    assert info["tp_decode_pct_of_peak_bandwidth"] == pytest.approx(100 * 32 / 0.25 / 1e10)
    assert info["tp_roofline_scope"].startswith("shared host")
    assert bench["params"]["tp"] == 2


def test_a_model_too_big_to_save_here_is_skipped_at_collection_not_killed_mid_run(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("PHASEBENCH_TP_MODEL_CACHE", str(tmp_path))
    cell = Cell("llama-3.1-70b", "cuda", "bfloat16", 1, 512, 128, warmup=1, rounds=3, seed=0, tp=8)
    weights = 141 * 10**9
    ram = save_fit_reason(
        cell, key="k", weights_bytes=weights, available_bytes=64 * 10**9, disk_free_bytes=10**12
    )
    assert ram is not None
    assert "builds the whole model in host memory, ~143.1 GB" in ram
    assert "64.0 GB is available" in ram
    assert "PHASEBENCH_TP_MODEL_CACHE (folder k)" in ram
    disk = save_fit_reason(
        cell, key="k", weights_bytes=weights, available_bytes=10**12, disk_free_bytes=10**11
    )
    assert disk is not None
    assert "141.0 GB of disk" in disk
    assert (
        save_fit_reason(
            cell, key="k", weights_bytes=weights, available_bytes=10**12, disk_free_bytes=10**12
        )
        is None
    )
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "phasebench-tp.json").write_text("{}")  # saved already: nothing to build
    assert (
        save_fit_reason(cell, key="k", weights_bytes=weights, available_bytes=1, disk_free_bytes=1)
        is None
    )


def test_without_accelerate_a_tp_cell_is_skipped_with_the_install_command(monkeypatch):
    import importlib.util  # noqa: PLC0415 - the function under test reads it at call time

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "accelerate" else real(name)
    )
    reason = accelerate_reason()
    assert reason is not None
    assert "pip install accelerate" in reason
    assert tp_cell_reason(CELL) == reason
    monkeypatch.setattr(importlib.util, "find_spec", real)
    assert accelerate_reason() is None  # installed here (the test group has it)
