"""Serving cells end to end: the real tiny-model server, the gate on a slowed server, no orphan.

* The real smoke: `transformers serve` on the tiny Llama, continuous batching off and on, one
  pass each; every request returns exactly N tokens (the server's usage), P-token prompts, and
  the record holds DESIGN §13's fields; no server process is left after the run.
* The gate: `serve: url` cells against the fake server (scripted token times with a seeded
  jitter, so runs differ as real ones do): four baseline runs, then a current run whose server
  is 30 % slower per token (the fake's server-side knob, `--slowdown 0.3`) fails the gate on
  `tpot_p50_s`; the same current run without the knob (A/A) passes.
* A killed run (SIGKILL to pytest mid-pass) leaves no server behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import transformers
from packaging.version import Version

from benchmarks.harness.serve.launcher import Server, fake_command

ROOT = Path(__file__).resolve().parents[2]
TOO_OLD = Version(transformers.__version__).major < 5
needs_serve = pytest.mark.skipif(
    TOO_OLD,
    reason=f"transformers serve needs transformers 5.x (this is {transformers.__version__})",
)

SMOKE = """schema: 1
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [12]
new_tokens: [6]
warmup: 1
rounds: 2
serve: [transformers]
continuous_batching: [false, true]
max_concurrency: [2]
num_prompts: [3]
"""

URL = """schema: 1
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [8]
new_tokens: [12]
warmup: 0
rounds: 5
serve: [url]
request_rate: [inf]
max_concurrency: [4]
num_prompts: [4]
"""


def _pytest(matrix: Path, history: Path, *extra: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks", "-q", "-p", "no:cacheprovider",
         f"--matrix={matrix}", f"--benchmark-storage=file://{history}", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def _serve_records(history: Path) -> list[dict]:
    files = sorted(history.rglob("*.json"))
    data = json.loads(files[-1].read_text())
    return [b for b in data["benchmarks"] if b["extra_info"].get("measurement") == "serve"]


@needs_serve
@pytest.mark.serve
def test_the_tiny_model_serves_exactly_n_tokens_with_continuous_batching_off_and_on(tmp_path):
    matrix = tmp_path / "smoke.yaml"
    matrix.write_text(SMOKE)
    done = _pytest(
        matrix, tmp_path / "history", env={"PHASEBENCH_SERVE_MODEL_CACHE": str(tmp_path / "m")}
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    records = _serve_records(tmp_path / "history")
    assert sorted(r["params"]["continuous_batching"] for r in records) == [False, True]
    for record in records:
        info = record["extra_info"]
        assert info["errors"] == 0, info["error_reasons"]
        assert info["requests_completed"] == 6  # 2 rounds x 3 prompts
        assert info["output_tokens"] == 6 * 6  # exactly N each, by the server's usage
        assert info["prompt_len_mismatches"] == 0  # P words are P tokens
        for name in (
            "ttft_p50_s",
            "ttft_p90_s",
            "ttft_p99_s",
            "tpot_p50_s",
            "e2el_p99_s",
            "ttft_from_schedule_p50_s",
            "e2el_from_schedule_p50_s",
            "request_throughput_req_per_s",
            "output_throughput_tok_per_s",
            "goodput_req_per_s",
            "client_overhead_s",
        ):
            assert isinstance(info[name], float), name
            assert info[name] > 0, name
        # A server that joins queued events sends k tokens in one chunk: its extra tokens came
        # with the first (gaps of 0), so on a busy host most per-token gaps may be 0
        # (tests/harness/serve/test_metrics.py checks the figures on known chunks).
        for name in ("itl_p50_s", "itl_p99_s", "itl_chunk_p50_s"):
            assert info[name] is None or info[name] >= 0, name
        assert info["itl_p99_s"] is not None
        assert len(info["round_series"]["tpot_p50_s"]) == 2
        assert len(record["stats"]["data"]) == 2  # one load pass per round
        assert Path(info["serve_log"]).is_file()
        assert "transformers serve" in Path(info["serve_log"]).read_text()
    assert not [p for p in psutil.process_iter(["cmdline"])
                if "benchmarks.harness.serve.tserve" in " ".join(p.info["cmdline"] or [])
                and str(tmp_path) in " ".join(p.info["cmdline"] or [])]  # fmt: skip


def _url_run(matrix: Path, history: Path, slowdown: float, seed: int) -> None:
    script = ["--ttft-s", "0.03", "--itl-s", "0.012", "--jitter", "0.05", "--seed", str(seed),
              "--slowdown", str(slowdown)]  # fmt: skip
    with Server(fake_command(script), history.parent / f"fake-{seed}.log", ready_timeout_s=30) as s:
        done = _pytest(matrix, history, f"--serve-url={s.base_url}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def _gate(history: Path) -> tuple[int, dict]:
    out = history.parent / f"{history.name}-gate.json"
    done = subprocess.run(
        [sys.executable, "-m", "reports", "gate", "--history", str(history), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return done.returncode, json.loads(out.read_text())


def _fails(verdict: dict) -> bool:
    """Failed, would have failed on a quiet machine, or (few baseline runs on a loaded machine,
    Holm over five metrics) its 95 % interval lies wholly beyond the threshold."""
    beyond = (verdict.get("ci_low") or 0.0) > 1.0 + (verdict.get("threshold") or 0.05)
    return verdict["verdict"] == "fail" or "would be fail" in (verdict.get("note") or "") or beyond


def test_the_gate_fails_a_30_percent_slower_server_and_passes_an_unchanged_one(tmp_path):
    matrix = tmp_path / "url.yaml"
    matrix.write_text(URL)
    base = tmp_path / "base"
    for seed in range(4):
        _url_run(matrix, base, 0.0, seed)
        time.sleep(1.1)  # autosave names carry the second
    slowed, same = tmp_path / "slowed", tmp_path / "same"
    shutil.copytree(base, slowed)
    shutil.copytree(base, same)
    _url_run(matrix, slowed, 0.3, 10)
    _url_run(matrix, same, 0.0, 10)
    # On a loaded machine (this one, shared) the gate names the run busy and decides nothing:
    # then the verdict it would have given is in the note ("would be fail"), and that is what
    # is checked; on a quiet one the verdict itself.
    code, verdicts = _gate(slowed)
    tpot = next(b for b in verdicts["benchmarks"] if b["metric"] == "tpot_p50_s")
    assert _fails(tpot), (verdicts.get("status_reason"), tpot)
    assert code in (1, 3), verdicts.get("status")
    assert code == 1 or "busy" in verdicts["status_reason"]
    code, verdicts = _gate(same)
    failed = [b["metric"] for b in verdicts["benchmarks"] if _fails(b)]
    assert failed == []
    assert code in (0, 3), verdicts.get("status")


@needs_serve
@pytest.mark.serve
def test_a_killed_run_leaves_no_server_behind(tmp_path):
    """SIGKILL to pytest while its transformers server is up: no `finally` runs; the guard
    notices its parent is gone and ends the server's group."""
    matrix = tmp_path / "smoke.yaml"
    matrix.write_text(SMOKE.replace("rounds: 2", "rounds: 200"))
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "benchmarks", "-q", "-p", "no:cacheprovider",
         f"--matrix={matrix}", f"--benchmark-storage=file://{tmp_path / 'h'}"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PHASEBENCH_SERVE_MODEL_CACHE": str(tmp_path / "m")},
    )  # fmt: skip
    deadline = time.monotonic() + 300
    tree: list[psutil.Process] = []
    while time.monotonic() < deadline and run.poll() is None:
        tree = psutil.Process(run.pid).children(recursive=True)
        if any("benchmarks.harness.serve.tserve" in " ".join(p.cmdline()) for p in tree):
            break
        time.sleep(0.5)
    assert any("tserve" in " ".join(p.cmdline()) for p in tree), "the server never started"
    time.sleep(3)  # into its load
    tree = psutil.Process(run.pid).children(recursive=True)
    run.send_signal(signal.SIGKILL)
    run.wait(30)
    _, alive = psutil.wait_procs(tree, timeout=20)
    assert alive == [], [" ".join(p.cmdline())[:120] for p in alive]
