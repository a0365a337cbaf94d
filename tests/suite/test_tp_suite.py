"""Tensor-parallel cells end to end: `pytest benchmarks --matrix` with a tp-2 cell and its tp-1
twin, in a subprocess as a user runs it (two gloo ranks under torchrun, ~12 s a run here).

* Where transformers loads TP (5.x): exit 0; the tp-2 records say `tp_size: 2`, hold the ranks'
  own rounds and, per rank, half the tp-1 twin's KV bytes.
* A rank SIGKILLed mid-generate (`PHASEBENCH_TP_FAIL`): the tp cell's two tests fail with the
  launcher's reason within 60 s, the twin still runs, and no process of the run is left.
* Where it does not (4.46): the tp cell is skipped at collection with the too-old reason.

On an MPS host the suite skips CPU tp cells (`cpuranks.mac_host_reason`), and so does this module.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from benchmarks.harness.records import median
from benchmarks.harness.tp.cpuranks import mac_host_reason
from benchmarks.harness.tp.launch import CACHE_ENV
from benchmarks.harness.tp.skips import too_old_reason, tp_loading
from tests.suite_run import ROOT, run_suite

LOADS_TP = tp_loading() is not None
_MAC = mac_host_reason(torch.backends.mps.is_available(), 2)
pytestmark = pytest.mark.skipif(_MAC is not None, reason=_MAC or "")
TP2 = "tiny-llama-cpu-float32-b1-p16-n4-tp2"
TP1 = "tiny-llama-cpu-float32-b1-p16-n4-tp1"
# The tp-2 cell first (matrix order), so "the next cell runs" is the twin after it.
MATRIX = """schema: 1
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [16]
new_tokens: [4]
tp: [2, 1]
warmup: 1
rounds: 3
"""


@pytest.fixture
def model_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "tp-models"
    monkeypatch.setenv(CACHE_ENV, str(root))  # the subprocess inherits it: no home cache
    return root


def _by_name(benchmarks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {b["name"]: b for b in benchmarks}


@pytest.mark.skipif(not LOADS_TP, reason=too_old_reason())
def test_a_tp2_cell_records_half_the_kv_of_its_tp1_twin(tmp_path: Path, model_cache: Path):
    output, benchmarks = run_suite(tmp_path, MATRIX)
    records = _by_name(benchmarks)
    twin = records[f"test_prefill_forward[{TP1}]"]["extra_info"]
    tp1_kv = twin["kv_measured_after_prefill_bytes"]
    for name in (f"test_prefill_forward_tp[{TP2}]", f"test_decode_tp[{TP2}]"):
        bench = records[name]
        info = bench["extra_info"]
        assert info["tp_size"] == 2
        assert info["tp_backend"] == "gloo"
        assert info["tp_kv_rank_after_prefill_bytes"] == [tp1_kv // 2, tp1_kv // 2]
        assert info["tp_kv_tp1_after_prefill_bytes"] == tp1_kv
        assert sum(info["tp_weights_rank_bytes"]) > info["tp_weights_global_bytes"] // 2 * 2 - 1
        # Loading and running apart, every rank's: the run's peak holds the resident shards.
        assert len(info["tp_load_peak_rank_bytes"]) == len(info["tp_run_peak_rank_bytes"]) == 2
        assert all(b > 0 for b in info["tp_load_peak_rank_bytes"] + info["tp_run_peak_rank_bytes"])
        assert "loading" in info["tp_load_peak_label"]
        assert "from the end of loading" in info["tp_run_peak_label"]  # Linux: VmHWM is reset
        assert info["tp_round_clock"] == "one_clock"
        assert 0 <= info["tp_start_skew_s"] < min(bench["stats"]["data"])
        assert info["tp_allreduce_bytes_per_step_estimate"] > 0
        # The ranks' rounds, not the parent's wall time: each a fraction of the launch.
        data = bench["stats"]["data"]
        assert len(data) == 3
        assert max(data) < info["tp_launch_s"]
        assert bench["options"]["timer"] == "tp_replay_round_one_clock"
        assert "weights_bytes" not in info
        assert bench["params"]["tp"] == 2
    prefill = records[f"test_prefill_forward_tp[{TP2}]"]
    assert prefill["extra_info"]["prefill_s"] == median(prefill["stats"]["data"])
    decode = records[f"test_decode_tp[{TP2}]"]["extra_info"]
    # The final KV per rank is at P + N - 1 positions: half the tp-1 bytes at that length.
    assert decode["tp_kv_rank_final_bytes"][0] * 16 == tp1_kv // 2 * 19
    assert "torchrun ended in" in output
    # One torchrun for both records: the model saved once, into the test's cache.
    assert len(list(model_cache.iterdir())) == 1


def _suite(base: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (base / "m.yaml").write_text(MATRIX, encoding="utf-8")
    command = [
        sys.executable, "-m", "pytest", str(ROOT / "benchmarks"),
        "-c", str(ROOT / "pyproject.toml"),
        "-p", "no:cacheprovider", "-rs", "--peaks", "none", "--matrix", str(base / "m.yaml"),
        f"--basetemp={base / 'bt'}", f"--benchmark-storage=file://{base / 'history'}",
    ]  # fmt: skip
    return subprocess.run(
        command, check=False, cwd=base, capture_output=True, text=True, timeout=600,
        env={**os.environ, **env},
    )  # fmt: skip


def _left_behind(marker: str) -> list[str]:
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        info: dict[str, Any] = process.info
        if info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(info["cmdline"] or []):
            found.append(f"{process.pid}: {' '.join(info['cmdline'])}")
    return found


@pytest.mark.skipif(not LOADS_TP, reason=too_old_reason())
def test_a_killed_rank_fails_its_cell_and_the_next_cell_runs(tmp_path: Path, model_cache: Path):
    env = {"PHASEBENCH_TP_FAIL": "1:kill:generate", "PHASEBENCH_TP_TIMEOUT_S": "60"}
    start = time.perf_counter()
    done = _suite(tmp_path, env)
    wall_s = time.perf_counter() - start
    out = done.stdout
    assert done.returncode == 1, out[-4000:] + done.stderr[-2000:]
    # 3 skipped cells plus test_interleaved's two tests on both cells (not in `measurements`)
    assert re.search(r"2 failed, 5 passed, 7 skipped", out), out[-3000:]
    reason = "tensor-parallel run failed: rank 1: last seen at stage 'generate'"
    assert out.count(reason) == 2  # both tests, one launch
    assert "rank 1 exit code -9" in out
    ended = re.search(rf"{TP2}: torchrun ended in ([\d.]+) s", out)
    assert ended is not None
    assert float(ended.group(1)) <= 60
    assert f"{TP1}: decode step median" in out  # the next cell ran
    assert wall_s < 300
    assert _left_behind(str(tmp_path / "bt")) == []


@pytest.mark.skipif(LOADS_TP, reason="this transformers loads tensor-parallel")
def test_an_old_transformers_skips_the_tp_cell_with_the_reason(tmp_path: Path):
    output, benchmarks = run_suite(tmp_path, MATRIX)
    assert f"{TP2}: {too_old_reason()}" in output.replace("\n", "")
    names = {b["name"] for b in benchmarks}
    assert f"test_prefill_forward[{TP1}]" in names
    assert not any(TP2 in name for name in names)
