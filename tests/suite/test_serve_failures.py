"""A serving cell against a server that fails: the reason in minutes, never a traceback or an hour.

`serve: url` cells against the scripted fake (`benchmarks/harness/serve/fake.py`), each run a
real `pytest benchmarks` process as a user's: a refused port names the URL; a 200 that is not an
event stream says so; a server that never answers fails on its first request's timeout; one that
crashes after a round fails that cell and its sibling at once (no second wait); a server that
fails one request in eight fails its cell with the reasons counted, the record stays in the
history, and the gate fails it on `errors` at an unchanged speed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness.serve.launcher import Server, fake_command

ROOT = Path(__file__).resolve().parents[2]

URL = """schema: 1
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [8]
new_tokens: [6]
warmup: 0
rounds: 2
serve: [url]
request_rate: [inf]
max_concurrency: [2, 4]
num_prompts: [8]
"""


def _pytest(
    tmp_path: Path, url: str, *extra: str, matrix_text: str = URL
) -> tuple[subprocess.CompletedProcess, float]:
    matrix = tmp_path / "url.yaml"
    matrix.write_text(matrix_text)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks", "-q", "-rf", "-p", "no:cacheprovider",
         f"--matrix={matrix}", f"--benchmark-storage=file://{tmp_path / 'history'}",
         f"--serve-url={url}", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "COLUMNS": "1000"},  # the summary lines keep their reasons
    )  # fmt: skip
    return done, time.monotonic() - started


def _fake(tmp_path: Path, *script: str) -> Server:
    return Server(fake_command(list(script)), tmp_path / "fake.log", ready_timeout_s=60)


def _failures(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith("FAILED")]


def test_a_refused_port_fails_each_cell_naming_the_url_without_a_traceback(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done, took_s = _pytest(tmp_path, f"http://127.0.0.1:{port}")
    assert done.returncode == 1
    assert took_s < 60
    failed = _failures(done)
    assert len(failed) == 2
    assert all(f"nothing answers at http://127.0.0.1:{port}/v1/models" in f for f in failed)
    assert "Traceback" not in done.stdout
    assert "ClientConnectorError" not in done.stdout


def test_a_200_that_is_not_an_event_stream_says_so_within_a_minute(tmp_path):
    with _fake(tmp_path, "--non-sse") as fake:
        done, took_s = _pytest(tmp_path, fake.base_url)
    assert done.returncode == 1
    assert took_s < 60
    failed = _failures(done)
    assert len(failed) == 2
    assert all(
        "not an event stream: HTTP 200 with Content-Type application/json" in f for f in failed
    )


def test_a_server_that_never_answers_fails_on_its_timeout_and_the_sibling_does_not_wait(tmp_path):
    with _fake(tmp_path, "--never-answer") as fake:
        done, took_s = _pytest(tmp_path, fake.base_url, "--serve-timeout-s=5")
    assert done.returncode == 1
    failed = _failures(done)
    assert len(failed) == 2
    assert all("timeout: no response within 5 s" in f for f in failed)
    assert took_s < 5 + 45  # one timeout, then the sibling fails at once


def test_a_server_that_crashes_after_a_round_fails_its_cells_at_once(tmp_path):
    # request 1 alone, round 0's 8, then the crash as round 1 begins
    with _fake(tmp_path, "--ttft-s=0.01", "--itl-s=0.002", "--crash-after-requests=9") as fake:
        done, took_s = _pytest(tmp_path, fake.base_url)
    assert done.returncode == 1
    assert took_s < 60
    failed = _failures(done)
    assert len(failed) == 2
    assert "every request of a pass was refused" in failed[0]
    assert "url server for tiny-llama" in failed[1]


def test_a_server_failing_one_request_in_eight_fails_its_cell_and_the_gate(tmp_path):
    matrix_cells = URL.replace("max_concurrency: [2, 4]", "max_concurrency: [4]")
    history = tmp_path / "history"
    for seed in range(2):
        with _fake(tmp_path, "--ttft-s=0.01", "--itl-s=0.004", f"--seed={seed}") as fake:
            done, _ = _pytest(tmp_path, fake.base_url, matrix_text=matrix_cells)
        assert done.returncode == 0, done.stdout[-3000:]
        time.sleep(1.1)  # autosave names carry the second
    with _fake(tmp_path, "--ttft-s=0.01", "--itl-s=0.004", "--fail-every=8") as fake:
        done, _ = _pytest(tmp_path, fake.base_url, matrix_text=matrix_cells)
    assert done.returncode == 1
    (failed,) = _failures(done)
    assert "2 of 16 requests failed: 2 x HTTP 500" in failed
    records = json.loads(sorted(history.rglob("*.json"))[-1].read_text())["benchmarks"]
    (serve,) = [b for b in records if b["extra_info"].get("measurement") == "serve"]
    assert serve["extra_info"]["errors"] == 2
    rows = Path(serve["extra_info"]["serve_requests_file"]).read_text().splitlines()
    assert sum('"HTTP 500' in row for row in rows) == 2
    out = tmp_path / "gate.json"
    gate = subprocess.run(
        [sys.executable, "-m", "reports", "gate", "--history", str(history), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert gate.returncode == 1, gate.stdout[-2000:]
    verdicts = json.loads(out.read_text())["benchmarks"]
    errors = next(v for v in verdicts if v["metric"] == "errors")
    assert errors["verdict"] == "fail"
