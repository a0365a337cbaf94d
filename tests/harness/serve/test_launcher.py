"""The server's lifecycle: ready, stopped, and never left behind (crash, timeout, kill, Ctrl-C)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from benchmarks.harness.errors import ServeError
from benchmarks.harness.serve.client import LoadSpec, run_load
from benchmarks.harness.serve.fake import MODEL_ID
from benchmarks.harness.serve.launcher import (
    Server,
    ServerCommand,
    fake_command,
    listens_on,
    ready_timeout_s,
    vllm_command,
)
from benchmarks.harness.serve.metrics import calculate_metrics
from benchmarks.harness.serve.models import list_models

ROOT = Path(__file__).resolve().parents[3]


def _gone(pids, within_s=10.0):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and _not_zombie(p)]
        if not alive:
            return True
        time.sleep(0.1)
    return False


def _not_zombie(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_server_answers_then_stops_with_its_whole_tree(tmp_path):
    log = tmp_path / "server.log"
    with Server(fake_command(["--ttft-s", "0.01"]), log, ready_timeout_s=30) as server:
        assert list_models(server.base_url) == [MODEL_ID]
        assert server.base_url.startswith("http://127.0.0.1:")
        pids = server.pids
        assert len(pids) >= 2  # the guard and the server
        assert server.ready_s is not None
    assert server.survivors == ()
    assert _gone(pids, 1.0)
    assert "fake server" in log.read_text()  # the command line heads the log


def test_a_server_that_crashes_before_it_answers_is_a_clear_error_and_leaves_nothing(tmp_path):
    crash = ServerCommand((sys.executable, "-c", "print('no such model'); raise SystemExit(3)"))
    server = Server(crash, tmp_path / "crash.log", ready_timeout_s=30)
    with pytest.raises(ServeError, match=r"exited with code 3 .*no such model"):
        server.start()
    assert _gone(server.pids, 1.0)


def test_a_server_that_never_answers_is_stopped_at_the_deadline(tmp_path):
    silent = ServerCommand((sys.executable, "-c", "import time; time.sleep(120)"), label="silent")
    server = Server(silent, tmp_path / "silent.log", ready_timeout_s=1.0, grace_s=1.0)
    started = time.monotonic()
    with pytest.raises(ServeError, match=r"silent did not answer GET /v1/models within 1 s"):
        server.start()
    assert time.monotonic() - started < 10
    assert _gone(server.pids, 1.0)


def test_a_server_killed_mid_run_gives_error_rows_and_stop_still_cleans_up(tmp_path):
    with Server(fake_command(), tmp_path / "k.log", ready_timeout_s=30) as server:
        spec = LoadSpec(server.base_url, MODEL_ID, ("w1",) * 2, 3, request_timeout_s=5)
        server_pid = server.pids[-1]
        os.kill(server_pid, signal.SIGKILL)
        assert _gone([server_pid], 5)
        result = run_load(spec)
        assert calculate_metrics(result.records, new_tokens=3, duration_s=1.0)["errors"] == 2
    assert server.survivors == ()


_PARENT = textwrap.dedent(
    """
    import json, signal, sys, time
    from pathlib import Path
    from benchmarks.harness.serve.launcher import Server, fake_command
    # Ctrl-C as a terminal delivers it, even where this test runs under a non-interactive
    # shell's background job, which starts its children with SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with Server(fake_command(), Path(sys.argv[1]), ready_timeout_s=30) as server:
        print(json.dumps(list(server.pids)), flush=True)
        time.sleep(120)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
def test_the_server_goes_when_the_process_that_started_it_is_killed_or_interrupted(tmp_path, sig):
    """SIGKILL: no `finally` runs, the guard notices it was orphaned; SIGINT (Ctrl-C) and
    SIGTERM: the launcher's own stop, or the guard's."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(tmp_path / "p.log")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert parent.stdout is not None
    pids = json.loads(parent.stdout.readline())
    assert all(psutil.pid_exists(p) for p in pids)
    parent.send_signal(sig)
    parent.wait(30)
    assert _gone(pids, 15), f"left behind: {[p for p in pids if psutil.pid_exists(p)]}"


def test_the_ready_timeout_comes_from_the_environment_and_a_bad_value_is_refused():
    assert ready_timeout_s({}) == 300.0
    assert ready_timeout_s({"PHASEBENCH_SERVE_READY_TIMEOUT_S": "900"}) == 900.0
    with pytest.raises(ServeError, match="PHASEBENCH_SERVE_READY_TIMEOUT_S"):
        ready_timeout_s({"PHASEBENCH_SERVE_READY_TIMEOUT_S": "soon"})


def test_readiness_is_our_own_server_not_another_on_the_port_and_never_a_proxy(
    tmp_path, monkeypatch
):
    # A proxy that does not exist: a poll sent through it would never reach the server.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    with Server(fake_command([]), tmp_path / "a.log", ready_timeout_s=30) as ours:
        assert ours.ready_s is not None
        assert listens_on(ours.alive(), ours.port) is True
        # Another process's tree does not hold our port: its 200 would not count as its own.
        stranger = psutil.Process(os.getpid())
        assert listens_on([stranger], ours.port) is False
        assert ours.dead_reason() is None


def test_a_server_that_died_after_it_was_ready_is_named_with_its_exit_code_and_log(tmp_path):
    with Server(fake_command(["--crash-after-requests", "0"]), tmp_path / "c.log") as server:
        run_load(LoadSpec(server.base_url, MODEL_ID, ("w1",), 2, request_timeout_s=5.0))
        deadline = time.monotonic() + 10
        while (reason := server.dead_reason(timeout_s=1.0)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
    assert reason is not None
    assert "exited with code 3 during the run" in reason
    assert "c.log" in reason


def test_vllm_is_started_without_the_removed_disable_log_requests_flag(tmp_path):
    command = vllm_command(tmp_path, dtype="float16", continuous_batching=False, positions=96)
    assert "--disable-log-requests" not in command.argv
    assert command.argv[command.argv.index("--max-num-seqs") + 1] == "1"
