"""The `doctor` verb end to end on this CPU, and its CUDA path with a fake GPU."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.harness import cli
from benchmarks.harness.doctor import run, timing
from benchmarks.harness.doctor.findings import Finding, ok
from benchmarks.harness.doctor.gpu import GpuProcess, GpuReadings, NvmlUnavailableError

ROOT = Path(__file__).resolve().parents[3]
LINE = re.compile(r"^(OK|WARN|BAD|SKIP) +[a-z_]+\.[a-z_]+: .+ \| do: .+$")


def doctor(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.harness", "doctor", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def test_doctor_on_this_cpu_prints_a_level_and_an_action_per_finding(tmp_path):
    out = tmp_path / "doctor.json"
    done = doctor("--device", "cpu", "--json", str(out))
    # Whether this shared machine is fit is not asserted: only the shape and the exit semantics.
    assert done.returncode in (0, 1), done.stderr
    *lines, summary = done.stdout.strip().splitlines()
    assert lines
    assert [line for line in lines if not LINE.match(line)] == []
    data = json.loads(out.read_text())
    assert data["exit_status"] == done.returncode
    assert data["fit"] is (done.returncode == 0)
    assert len(data["findings"]) == len(lines)
    bad = [f["check"] for f in data["findings"] if f["level"] == "bad"]
    assert (done.returncode == 1) == bool(bad)
    assert summary.endswith(f"(exit {done.returncode})")
    checks = {f["check"] for f in data["findings"]}
    for expected in (
        "cpu.load",
        "cpu.fp_state",
        "cpu.memory_drift",
        "timing.timer",
        "timing.sync",
        "peaks.flops",
    ):
        assert expected in checks
    sync = next(f for f in data["findings"] if f["check"] == "timing.sync")
    assert sync["level"] == "skip"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_doctor_for_cuda_on_a_machine_without_it_exits_2_with_the_reason():
    done = doctor("--device", "cuda")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "--device cuda: cuda unavailable" in done.stderr
    assert "--device cpu" in done.stderr


def test_bad_device_names_and_dtypes_exit_2_in_process(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["doctor", "--device", "cuda:1"]) == 2
    assert "--device cuda:1: cuda:1 unavailable" in capsys.readouterr().err
    assert cli.main(["doctor", "--device", "tpu"]) == 2
    assert "use cpu, cuda, cuda:N or mps" in capsys.readouterr().err
    assert cli.main(["doctor", "--device", "cpu", "--dtype", "int8"]) == 2
    assert cli.main(["doctor", "--quick", "--full"]) == 2


class FakeProbe:
    def __init__(self, readings, busy_mhz):
        self._readings, self._busy_mhz = readings, busy_mhz
        self.entered = False

    def __enter__(self):
        self.entered = True
        return self

    def __exit__(self, *_):
        return None

    def readings(self):
        return self._readings

    def sm_clock_mhz(self):
        return self._busy_mhz


def fake_sync(device, during=None):
    if during is not None:
        during()  # the busy clock is read while the doctor's kernels run
    return ok("timing.sync", "fake sync")


def test_cuda_path_another_process_on_the_gpu_exits_1_and_the_busy_clock_is_used(monkeypatch):
    monkeypatch.setattr(timing, "check_sync", fake_sync)
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    readings = GpuReadings(
        nvml_index=0,
        name="NVIDIA H200",
        sm_clock_mhz=345,
        max_sm_clock_mhz=1980,
        processes=(GpuProcess(os.getpid() + 1, "trainer", "compute", 40 << 30),),
    )
    found = run.cuda_checks(torch.device("cuda", 0), lambda _i: FakeProbe(readings, 1980))
    by_check = {f.check: f for f in found}
    assert by_check["gpu.processes"].level == "bad"
    assert by_check["gpu.clocks"].data["busy_sm_clock_mhz"] == 1980
    assert by_check["gpu.clocks"].level == "warn"  # 345 idle, 1980 busy: not locked
    assert by_check["timing.sync"].level == "ok"


def test_cuda_path_without_nvml_warns_and_still_checks_the_sync(monkeypatch):
    monkeypatch.setattr(timing, "check_sync", fake_sync)

    def no_nvml(_index):
        raise NvmlUnavailableError("nvidia-ml-py (pynvml) is not importable (ImportError)")

    found = run.cuda_checks(torch.device("cuda", 0), no_nvml)
    levels = {f.check: f.level for f in found}
    assert levels["gpu.nvml"] == "warn"
    assert levels["timing.sync"] == "ok"


def test_a_crashing_check_is_bad_and_the_rest_still_run():
    def crash() -> list[Finding]:
        raise OSError("sysfs vanished")

    (found,) = run.guarded("cpu.sysfs", crash)
    assert found.level == "bad"
    assert "OSError: sysfs vanished" in found.message
