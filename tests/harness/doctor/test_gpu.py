"""The doctor's NVML reads through a fake pynvml: right GPU, every field, no crash on gaps."""

# The fake mirrors pynvml's camelCase names, which the code under test calls.
# ruff: noqa: N802, N815

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from benchmarks.harness.doctor import gpu
from benchmarks.harness.doctor.gpu import GpuProcess, NvmlProbe, NvmlUnavailableError
from tests.harness.device.fake_nvml import PynvmlFake

UUIDS = ["GPU-aaaa", "GPU-bbbb"]


class NotSupportedError(Exception):
    """What pynvml raises for a query the GPU does not support."""


class FakeNvml(PynvmlFake):
    """Two GPUs in NVML (PCI) order; GPU 1 is busy with someone else's job and has ECC trouble."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_FEATURE_ENABLED = 1
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    nvmlClocksThrottleReasonGpuIdle = 0x1
    nvmlClocksThrottleReasonHwSlowdown = 0x8

    def __init__(self, *, supported=True, init_error=None):
        self.supported, self.init_error = supported, init_error
        self.shutdowns = 0
        self.gpus = [
            {"name": "NVIDIA H100 80GB HBM3", "sm": 1980, "procs": [], "ecc": 0},
            {"name": "NVIDIA H200", "sm": 345, "procs": [(777, 8 << 30)], "ecc": 3},
        ]

    def _gpu(self, handle):
        return self.gpus[int(handle.removeprefix("h"))]

    def _need(self):
        if not self.supported:
            raise NotSupportedError("NVML_ERROR_NOT_SUPPORTED")

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"h{index}"

    def nvmlDeviceGetUUID(self, handle):
        return UUIDS[int(handle.removeprefix("h"))]

    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle)["name"].encode()  # old pynvml returns bytes

    def nvmlSystemGetDriverVersion(self):
        return "570.86.15"

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return self._gpu(handle)["sm"] if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, handle, kind):
        return 40

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return 0x1 | 0x8

    def nvmlDeviceGetPersistenceMode(self, handle):
        self._need()
        return 0

    def nvmlDeviceGetEccMode(self, handle):
        self._need()
        return [1, 1]

    def nvmlDeviceGetTotalEccErrors(self, handle, kind, counter):
        self._need()
        return self._gpu(handle)["ecc"]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        self._need()
        return 0

    def nvmlDeviceGetRemappedRows(self, handle):
        self._need()
        return (0, 0, 1, 0)  # corrected, uncorrected, pending, failure

    def nvmlDeviceGetMigMode(self, handle):
        self._need()
        return [0, 1]  # a change to MIG on is pending

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        self._need()
        return 500_000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle):
        self._need()
        return 700_000

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        self._need()
        return [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in self._gpu(handle)["procs"]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        self._need()
        return [SimpleNamespace(pid=1, usedGpuMemory=None)]


def torch_sees_nvml_gpu_1(index):
    return "bbbb" if index == 0 else None


def test_torch_cuda_0_is_read_from_the_nvml_gpu_with_its_uuid_not_nvml_0():
    nvml = FakeNvml()
    with NvmlProbe(0, nvml, torch_uuid=torch_sees_nvml_gpu_1, environ={}) as probe:
        readings = probe.readings()
        assert probe.sm_clock_mhz() == 345
    assert nvml.shutdowns >= 1
    assert readings.nvml_index == 1
    assert readings.name == "NVIDIA H200"
    assert readings.driver == "570.86.15"
    assert (readings.sm_clock_mhz, readings.max_sm_clock_mhz) == (345, 1980)
    assert readings.throttle_reasons == ("gpu_idle", "hw_slowdown")
    assert readings.persistence_mode is False
    assert (readings.ecc_enabled, readings.ecc_uncorrected_volatile) == (True, 3)
    assert (readings.retired_pages_pending, readings.remapped_rows_pending) == (False, True)
    assert (readings.mig_enabled, readings.mig_pending) == (False, True)
    assert (readings.power_limit_w, readings.default_power_limit_w) == (500.0, 700.0)
    assert readings.processes is not None
    by_pid = {p.pid: p for p in readings.processes}
    assert by_pid[777] == GpuProcess(777, by_pid[777].name, "compute", 8 << 30)
    assert by_pid[1].kind == "graphics"
    assert by_pid[1].used_bytes is None


def test_queries_the_gpu_does_not_support_read_as_unknown_not_as_a_crash():
    nvml = FakeNvml(supported=False)
    with NvmlProbe(0, nvml, torch_uuid=torch_sees_nvml_gpu_1, environ={}) as probe:
        readings = probe.readings()
    assert readings.name == "NVIDIA H200"
    assert readings.persistence_mode is None
    assert readings.ecc_enabled is None
    assert readings.mig_enabled is None
    assert readings.power_limit_w is None
    assert readings.processes is None  # "cannot tell" is not "no other process"


def test_no_uuid_match_means_no_readings_rather_than_another_gpus():
    with (
        pytest.raises(NvmlUnavailableError, match="which NVML GPU"),
        NvmlProbe(0, FakeNvml(), torch_uuid=lambda _i: "ffff", environ={}),
    ):
        pass


def test_a_failing_nvml_init_and_a_missing_pynvml_are_reported_with_the_reason(monkeypatch):
    with (
        pytest.raises(NvmlUnavailableError, match="nvmlInit failed: driver mismatch"),
        NvmlProbe(0, FakeNvml(init_error=RuntimeError("driver mismatch")), environ={}),
    ):
        pass
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    with pytest.raises(NvmlUnavailableError, match="nvidia-ml-py"):
        gpu.import_pynvml()
