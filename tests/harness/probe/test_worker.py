"""The CPU probes' own process (`benchmarks.harness.probe.worker`, `client`): it answers points,
keeps its own settings whatever the parent sets afterwards, exits with its stdin, and a worker
that hangs or dies raises a `WorkerError` with the reason within the timeout; the suite's
`ProbeLog` then stops probing and keeps what it has (benchmarks/suite/hostprobe.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch

from benchmarks.harness.device.fpstate import pin_fp_state, read_fp_state
from benchmarks.harness.probe import client
from benchmarks.harness.probe import kernels as probe_kernels
from benchmarks.harness.probe.client import ProbeWorker, WorkerError, worker_command
from benchmarks.harness.probe.timing import CALLS
from benchmarks.suite import hostprobe
from benchmarks.suite.hostprobe import WORKER, ProbeLog, start_worker

FAKE = Path(__file__).with_name("fakeworker.py")
ROOT = Path(__file__).resolve().parents[3]


def _fake(mode: str) -> list[str]:
    return [sys.executable, str(FAKE), mode]


@pytest.fixture
def parent_state():
    """Restore what the tests change of this (pytest's) process: threads, default dtype, FTZ."""
    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    yield
    torch.set_num_threads(threads)
    torch.set_default_dtype(dtype)
    pin_fp_state()


def test_the_worker_answers_points_with_every_kind_and_reports_its_settings():
    with ProbeWorker(threads=2) as worker:
        info = worker.info()
        point = worker.point()
    assert info.pid == worker.pid != os.getpid()  # its own process
    assert info.threads == 2
    assert (info.dtype, info.default_dtype, info.flush_denormal) == ("float32", "float32", False)
    assert info.torch == torch.__version__
    assert [k.kind for k in info.kinds] == ["memory", "compute"]
    assert {k.dtype for k in info.kinds} == {"float32"}
    assert set(point) == {"memory", "compute"}
    for calls in point.values():
        assert len(calls) == CALLS
        assert all(c > 0 for c in calls)


def test_the_worker_imports_neither_transformers_nor_the_suite():
    code = (
        "import sys, benchmarks.harness.probe.worker; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers' "
        "or m.startswith(('benchmarks.suite', 'benchmarks.harness.model'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_worker_exits_when_its_stdin_closes():
    with subprocess.Popen(
        worker_command(1),
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        try:
            info = json.loads(process.stdout.readline())  # its start-up line, unasked
            assert info["op"] == "info"
            assert info["threads"] == 1
            process.stdin.close()  # as when the run ends, or dies
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_worker_ends_when_its_parent_is_killed():
    parent_code = (
        "import time; from benchmarks.harness.probe.client import ProbeWorker; "
        "w = ProbeWorker(1); w.info(); print(w.pid, flush=True); time.sleep(600)"
    )
    with subprocess.Popen(
        [sys.executable, "-c", parent_code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    ) as parent:
        worker_pid = int(parent.stdout.readline())
        assert not _gone(worker_pid)
        parent.kill()  # no clean-up of its own: only the closed pipe tells the worker
        parent.wait()
    deadline = time.monotonic() + 30
    while not _gone(worker_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(worker_pid)


def test_what_the_parent_sets_after_the_start_does_not_reach_the_worker(parent_state):
    with ProbeWorker(threads=2) as worker:
        before = worker.info()
        # What code under test may do to its process once the worker runs.
        torch.set_num_threads(1)
        torch.set_default_dtype(torch.float64)
        flushes = torch.set_flush_denormal(True)
        # The control: this process did change, so kernels timed here would run on it.
        assert torch.get_num_threads() == 1
        assert torch.randn(2).dtype == torch.float64
        assert read_fp_state().flush_denormal == flushes
        after = worker.ask_info()  # read back by the worker now
        point = worker.point()
    assert before.threads == after.threads == 2
    assert after.default_dtype == "float32"
    assert after.dtype == "float32"
    assert {k.dtype for k in after.kinds} == {"float32"}
    assert after.flush_denormal is False
    assert after.pid == before.pid
    assert set(point) == {"memory", "compute"}


def test_the_gemm_and_copy_operands_are_float32_whatever_the_default_dtype(
    parent_state, monkeypatch
):
    torch.set_default_dtype(torch.float64)
    seen = []
    monkeypatch.setattr(
        probe_kernels.functional, "linear", lambda x, w: seen.append((x.dtype, w.dtype))
    )
    memory, compute = probe_kernels.cpu_kernels()
    compute.prepare()()
    assert seen == [(torch.float32, torch.float32)]
    assert memory.dtype == compute.dtype == torch.float32


def test_a_dead_worker_raises_with_its_exit_code_and_stderr():
    with ProbeWorker(command=_fake("dead"), start_timeout_s=30) as worker:
        with pytest.raises(WorkerError, match="exited before its start-up line") as raised:
            worker.info()
        assert "exit code 3" in str(raised.value)
        assert "dying on purpose" in str(raised.value)
        with pytest.raises(WorkerError, match="exited"):  # and stays failed
            worker.point()


def test_a_worker_that_cannot_start_raises_the_reason():
    with ProbeWorker(command=[str(FAKE.with_name("no-such-interpreter"))]) as worker:
        assert worker.pid is None
        with pytest.raises(WorkerError, match="could not be started"):
            worker.point()


def test_a_hung_worker_is_given_up_after_the_timeout_and_killed(monkeypatch):
    monkeypatch.setattr(client, "CLOSE_TIMEOUT_S", 0.2)
    began = time.perf_counter()
    with ProbeWorker(command=_fake("hang-start"), start_timeout_s=0.5) as worker:
        with pytest.raises(WorkerError, match=r"no start-up line in 0\.5 s"):
            worker.info()
        assert worker._process.poll() is not None  # killed, not left behind
    assert time.perf_counter() - began < 15


def test_a_worker_that_hangs_mid_run_stops_the_probing_and_the_points_stay(monkeypatch):
    monkeypatch.setattr(client, "CLOSE_TIMEOUT_S", 0.2)
    worker = ProbeWorker(command=_fake("hang-second-point"), point_timeout_s=0.5)
    log = ProbeLog([], threads=1, worker=worker)
    log.probe("start")
    assert log.stopped is None
    assert len(log.points) == 1
    log.probe("end")  # the fake never answers
    assert log.stopped is not None
    assert "no point in 0.5 s" in log.stopped
    assert not log.due()
    log.probe("after")  # nothing more is asked
    records = log.records()
    assert [r["extra_info"]["host_probe"] for r in records] == ["memory", "compute"]
    for record in records:
        extra = record["extra_info"]
        assert [p["at"] for p in extra["points"]] == ["start"]
        assert (extra["process"], extra["threads"], extra["dtype"]) == ("own", 1, "float32")
        assert extra["stopped"] == log.stopped
    output = {"benchmarks": [{"name": "a cell"}], "machine_info": {"phasebench": {}}}
    config = SimpleNamespace(stash={hostprobe.PROBES: log})
    hostprobe.add_records(config, output)
    assert output["benchmarks"][0] == {"name": "a cell"}  # the benchmarks' records are kept
    assert len(output["benchmarks"]) == 3
    assert output["machine_info"]["phasebench"]["host_probes_stopped"] == log.stopped


def _config(**options: object) -> SimpleNamespace:
    values = {
        "benchmark_skip": False,
        "benchmark_disable": False,
        "benchmark_enable": False,
        "benchmark_save": None,
        "benchmark_autosave": "tag",
        "benchmark_json": None,
        "collectonly": False,
        "threads": None,
        **options,
    }
    option = SimpleNamespace(**values)
    return SimpleNamespace(
        option=option, stash=pytest.Stash(), getoption=lambda name: getattr(option, name)
    )


@pytest.mark.parametrize(
    ("options", "ab"),
    [
        ({"benchmark_autosave": None}, False),  # saves no history
        ({"benchmark_disable": True}, False),
        ({"benchmark_skip": True}, False),
        ({"collectonly": True}, False),
        ({}, True),  # a side of an A/B run
    ],
)
def test_a_run_that_will_not_probe_starts_no_worker(monkeypatch, options, ab):
    if ab:
        monkeypatch.setenv(hostprobe.AB_SOCKET_VAR, "/tmp/ab.sock")
    else:
        monkeypatch.delenv(hostprobe.AB_SOCKET_VAR, raising=False)
    config = _config(**options)
    start_worker(config)
    assert WORKER not in config.stash


def test_a_saving_run_starts_the_worker_on_its_configured_threads(monkeypatch):
    monkeypatch.delenv(hostprobe.AB_SOCKET_VAR, raising=False)
    config = _config(threads="1")
    start_worker(config)
    worker = config.stash[WORKER]
    try:
        assert worker.info().threads == 1
    finally:
        worker.close()
