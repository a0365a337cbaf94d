"""Spec of benchmarks/harness/device/devices.py: names, sync dispatch, skip reasons, memory, CPU
time.

CUDA and MPS behaviour is checked through recording fakes of torch's entry points (test names say
`fake`): this machine has neither device.
"""

from __future__ import annotations

import time

import pytest
import torch

from benchmarks.harness.device import devices
from benchmarks.harness.device.devices import (
    device_sync,
    device_unavailable_reason,
    dtype_unsupported_reason,
    parse_dtype,
    resolve_device,
    sync_name,
    timed,
)
from benchmarks.harness.device.memory import CpuMeter, MemoryMonitor
from benchmarks.harness.errors import DeviceError
from tests.engine_fakes import Recorder, install_fake_cuda, install_fake_mps

# --- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("cpu", torch.device("cpu")),
        ("cuda", torch.device("cuda")),
        ("cuda:1", torch.device("cuda", 1)),
        ("mps", torch.device("mps")),
        (torch.device("cuda", 0), torch.device("cuda", 0)),
    ],
)
def test_resolve_device_accepts_cpu_cuda_cuda_n_and_mps(spec, expected):
    assert resolve_device(spec) == expected


@pytest.mark.parametrize("spec", ["tpu", "xpu", "meta", "cpu:1", "mps:1", "cuda:x", "", "gpu"])
def test_resolve_device_rejects_anything_else_naming_the_accepted_devices(spec):
    with pytest.raises(DeviceError, match="cpu, cuda, cuda:N"):
        resolve_device(spec)


def test_parse_dtype_maps_the_three_matrix_names():
    assert parse_dtype("float32") is torch.float32
    assert parse_dtype("float16") is torch.float16
    assert parse_dtype("bfloat16") is torch.bfloat16


@pytest.mark.parametrize("name", ["fp16", "half", "float64", "int8", "Float32"])
def test_parse_dtype_rejects_other_names_listing_the_accepted_ones(name):
    with pytest.raises(DeviceError, match="float32, float16, bfloat16"):
        parse_dtype(name)


# --- synchronization --------------------------------------------------------------------------


def test_device_sync_on_cpu_is_a_noop_that_touches_no_accelerator(monkeypatch):
    recorder = Recorder()
    install_fake_cuda(monkeypatch, recorder)
    install_fake_mps(monkeypatch, recorder)
    device_sync("cpu")
    device_sync(torch.device("cpu"))
    assert recorder.calls == []


def test_device_sync_on_cuda_calls_torch_cuda_synchronize_with_the_device_fake(monkeypatch):
    recorder = Recorder()
    install_fake_cuda(monkeypatch, recorder)
    device_sync("cuda:1")
    assert recorder.calls == [("cuda.synchronize", (torch.device("cuda", 1),))]


def test_device_sync_on_mps_calls_torch_mps_synchronize_fake(monkeypatch):
    recorder = Recorder()
    install_fake_mps(monkeypatch, recorder)
    device_sync(torch.device("mps"))
    assert recorder.names() == ["mps.synchronize"]


@pytest.mark.parametrize("device", [torch.device("meta"), torch.device("xpu"), "tpu"])
def test_device_sync_raises_for_unknown_device_types_instead_of_skipping(device):
    with pytest.raises(DeviceError):
        device_sync(device)


def test_the_real_cuda_sync_is_called_not_skipped_on_a_cpu_only_build():
    # Without fakes, a CPU-only torch cannot synchronize CUDA: the error must surface.
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises((AssertionError, RuntimeError)):
        device_sync("cuda")


def test_sync_name_says_how_each_device_waits():
    assert sync_name(torch.device("cpu")) == "none (cpu)"
    assert sync_name(torch.device("cuda", 0)) == "torch.cuda.synchronize"
    assert sync_name(torch.device("mps")) == "torch.mps.synchronize"


def test_timed_syncs_before_and_after_the_body_fake_cuda(monkeypatch):
    recorder = Recorder()
    install_fake_cuda(monkeypatch, recorder)
    with timed("cuda") as watch:
        recorder.calls.append(("body", ()))
    assert recorder.names() == ["cuda.synchronize", "body", "cuda.synchronize"]
    assert watch.elapsed_s >= 0.0


def test_timed_syncs_before_and_after_the_body_fake_mps(monkeypatch):
    recorder = Recorder()
    install_fake_mps(monkeypatch, recorder)
    with timed(torch.device("mps")):
        recorder.calls.append(("body", ()))
    assert recorder.names() == ["mps.synchronize", "body", "mps.synchronize"]


def test_timed_measures_the_body_in_seconds():
    with timed("cpu") as watch:
        time.sleep(0.02)
    assert 0.015 < watch.elapsed_s < 1.0


def test_timed_propagates_errors_and_records_no_time():
    with pytest.raises(ValueError, match="boom"), timed("cpu") as watch:
        raise ValueError("boom")
    assert watch.elapsed_s != watch.elapsed_s  # NaN: a failed region has no duration


def test_timed_refuses_an_unknown_device_before_running_the_body():
    ran = []
    with pytest.raises(DeviceError), timed(torch.device("meta")):
        ran.append(True)
    assert ran == []


# --- availability and dtype support -----------------------------------------------------------


def test_cpu_is_always_available():
    assert device_unavailable_reason("cpu") is None


def test_cuda_unavailable_gives_a_skip_reason_fake(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    reason = device_unavailable_reason("cuda")
    assert reason is not None
    assert "no CUDA device" in reason


def test_cuda_index_beyond_the_device_count_gives_a_skip_reason_fake(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert device_unavailable_reason("cuda:1") is None
    reason = device_unavailable_reason("cuda:2")
    assert reason is not None
    assert "2 CUDA device(s)" in reason


def test_mps_unavailable_gives_a_skip_reason_fake(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    reason = device_unavailable_reason("mps")
    assert reason is not None
    assert "macOS" in reason


def test_unknown_device_is_an_error_not_a_skip():
    with pytest.raises(DeviceError):
        device_unavailable_reason("tpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_every_dtype_is_supported_on_cpu_float16_included(dtype):
    # float16 on CPU is slow but runs: a matrix leaves it out, the harness does not refuse it.
    assert dtype_unsupported_reason("cpu", dtype) is None


def test_dtypes_outside_the_matrix_vocabulary_are_errors():
    with pytest.raises(DeviceError):
        dtype_unsupported_reason("cpu", torch.float64)


@pytest.mark.parametrize(
    ("capability", "supported"), [((7, 5), False), ((8, 0), True), ((9, 0), True)]
)
def test_cuda_bfloat16_needs_compute_capability_8_fake(monkeypatch, capability, supported):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake T4")
    reason = dtype_unsupported_reason("cuda", torch.bfloat16)
    if supported:
        assert reason is None
    else:
        assert reason is not None
        assert "compute capability 7.5" in reason
        assert "8.0" in reason
    assert dtype_unsupported_reason("cuda", torch.float16) is None


def test_mps_bfloat16_without_kernels_gives_a_reason_naming_macos_14_fake(monkeypatch):
    # MPS "available" on this CPU-only box: the probe's tensor creation fails as an old macOS would.
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    devices._probe_reason.cache_clear()
    try:
        reason = dtype_unsupported_reason("mps", torch.bfloat16)
    finally:
        devices._probe_reason.cache_clear()
    assert reason is not None
    assert reason.startswith("bfloat16 unsupported on mps")
    assert "macOS 14+" in reason


# --- memory counters --------------------------------------------------------------------------


def test_cpu_memory_monitor_reports_rss_and_no_allocator_counters():
    monitor = MemoryMonitor(torch.device("cpu"))
    monitor.reset_peak()
    sample = monitor.sample()
    assert sample.rss_bytes > 0
    assert sample.allocated_bytes is None
    assert sample.reserved_bytes is None
    assert sample.peak_allocated_bytes is None
    assert "n/a" in sample.labels["allocated"]
    assert "RSS" in sample.labels["rss"]


def test_cuda_memory_monitor_reads_allocator_counters_and_resets_the_peak_per_phase_fake(
    monkeypatch,
):
    recorder = Recorder()
    counters = install_fake_cuda(monkeypatch, recorder)
    device = torch.device("cuda", 0)
    monitor = MemoryMonitor(device)
    monitor.reset_peak()
    assert recorder.calls == [("cuda.reset_peak_memory_stats", (device,))]
    sample = monitor.sample()
    assert (sample.allocated_bytes, sample.reserved_bytes) == (100, 200)
    assert (sample.peak_allocated_bytes, sample.peak_reserved_bytes) == (150, 250)
    counters["peak_allocated"] = 120  # the allocator's peak after the next reset
    monitor.reset_peak()
    assert monitor.sample().peak_allocated_bytes == 120
    assert recorder.names().count("cuda.reset_peak_memory_stats") == 2
    assert "max_memory_allocated since the phase began" in sample.labels["peak_allocated"]
    assert "memory_reserved" in sample.labels["reserved"]


def test_mps_memory_monitor_keeps_a_running_max_of_boundary_samples_fake(monkeypatch):
    recorder = Recorder()
    counters = install_fake_mps(monkeypatch, recorder)
    monitor = MemoryMonitor(torch.device("mps"))
    monitor.reset_peak()
    first = monitor.sample()
    assert (first.allocated_bytes, first.reserved_bytes) == (10, 20)
    counters.update(allocated=30, driver=50)
    assert monitor.sample().peak_allocated_bytes == 30
    counters.update(allocated=25, driver=40)
    third = monitor.sample()
    assert (third.allocated_bytes, third.peak_allocated_bytes) == (25, 30)
    assert (third.reserved_bytes, third.peak_reserved_bytes) == (40, 50)
    # A new phase starts from what is allocated now.
    monitor.reset_peak()
    counters.update(allocated=20, driver=40)
    assert monitor.sample().peak_allocated_bytes == 25
    assert "no peak API" in third.labels["peak_allocated"]
    assert "driver_allocated_memory" in third.labels["reserved"]


def test_memory_monitor_refuses_unknown_device_types():
    with pytest.raises(DeviceError):
        MemoryMonitor(torch.device("meta"))


# --- CPU time ---------------------------------------------------------------------------------


def test_cpu_meter_reports_busy_phases_high_and_sleeping_phases_low():
    meter = CpuMeter()
    # Spin on *process CPU time*, not wall time: on a loaded 2-core box a wall-clock spin can
    # get a fraction of a core, which says nothing about the meter.
    start_cpu = time.process_time()
    while time.process_time() - start_cpu < 0.15:
        pass
    busy_percent = meter.lap()
    time.sleep(0.15)
    idle_percent = meter.lap()
    assert busy_percent > 10.0  # 100 is one core-equivalent; CPU time was spent for sure
    assert idle_percent < 20.0
    assert idle_percent < busy_percent / 2


def test_cpu_meter_reset_starts_a_new_interval():
    meter = CpuMeter()
    deadline = time.perf_counter() + 0.1
    while time.perf_counter() < deadline:
        pass
    meter.reset()
    time.sleep(0.1)
    assert meter.lap() < 20.0
