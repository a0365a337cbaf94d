"""Spec of the cheap, honestly named memory bookkeeping in benchmarks/harness/device/memory.py.

CUDA and MPS are fakes (tests/engine_fakes.py): each test names the failure it prevents.
"""

from __future__ import annotations

import torch

from benchmarks.harness.device import memory
from benchmarks.harness.device.memory import MemoryMonitor, PhaseRecorder, peak_fields
from tests.engine_fakes import Recorder, install_fake_cuda, install_fake_mps

CUDA = torch.device("cuda", 0)


def test_a_cuda_sample_reads_the_allocator_statistics_once(monkeypatch):
    """Each of memory_allocated / memory_reserved / max_memory_* rebuilds the whole
    memory_stats dictionary: four of them per sample cost four reads. One read serves all."""
    recorder = Recorder()
    counters = install_fake_cuda(monkeypatch, recorder)
    monitor = MemoryMonitor(CUDA)
    for _ in range(3):
        sample = monitor.sample()
    reads = [name for name in recorder.names() if name != "cuda.synchronize"]
    assert reads == ["cuda.memory_stats"] * 3
    assert (sample.allocated_bytes, sample.reserved_bytes) == (
        counters["allocated"],
        counters["reserved"],
    )
    assert (sample.peak_allocated_bytes, sample.peak_reserved_bytes) == (150, 250)
    assert sample.peak_sampled is False


def test_a_cuda_true_peak_and_an_mps_sampled_maximum_get_different_record_names(monkeypatch):
    """MPS has no peak API: its "peak" is the max of boundary samples, which misses every
    activation freed between samples. Recorded as `peak_allocated_bytes` it would be compared
    with CUDA's true peak as one quantity."""
    recorder = Recorder()
    install_fake_cuda(monkeypatch, recorder)
    mps_counters = install_fake_mps(monkeypatch, recorder)
    cuda = MemoryMonitor(CUDA).sample()
    mps_monitor = MemoryMonitor(torch.device("mps"))
    mps_monitor.reset_peak()
    mps_counters.update(allocated=30, driver=50)
    mps = mps_monitor.sample()
    assert mps.peak_sampled is True

    assert peak_fields([cuda]) == {
        "peak_allocated_bytes": 150,
        "peak_reserved_bytes": 250,
        "peak_allocated_sampled_bytes": None,
        "peak_reserved_sampled_bytes": None,
    }
    assert peak_fields([mps]) == {
        "peak_allocated_bytes": None,
        "peak_reserved_bytes": None,
        "peak_allocated_sampled_bytes": 30,
        "peak_reserved_sampled_bytes": 50,
    }
    assert "peak_allocated_sampled_bytes" in mps.labels["peak_allocated"]


def test_peak_fields_of_cpu_samples_are_all_none_and_take_the_largest_otherwise(monkeypatch):
    cpu = MemoryMonitor(torch.device("cpu")).sample()
    assert set(peak_fields([cpu]).values()) == {None}
    assert set(peak_fields([]).values()) == {None}
    recorder = Recorder()
    counters = install_fake_cuda(monkeypatch, recorder)
    monitor = MemoryMonitor(CUDA)
    first = monitor.sample()
    counters["peak_allocated"] = 900
    assert peak_fields([first, monitor.sample()])["peak_allocated_bytes"] == 900


def test_the_phase_recorder_closes_the_cpu_interval_before_counting_kv_bytes(monkeypatch):
    """The KV count is bookkeeping: billed to the phase's CPU percent it would inflate it."""
    events: list[str] = []
    recorder = PhaseRecorder(torch.device("cpu"))
    lap, sample = recorder.meter.lap, recorder.monitor.sample

    def recording_lap() -> float:
        events.append("cpu")
        return lap()

    def recording_sample() -> memory.MemorySample:
        events.append("memory")
        return sample()

    monkeypatch.setattr(recorder.meter, "lap", recording_lap)
    monkeypatch.setattr(recorder.monitor, "sample", recording_sample)

    def kv_bytes() -> int:
        events.append("kv")
        return 64

    recorder.begin()
    recorder.start_phase()
    recorder.end_phase("after_decode", 1, kv_bytes)
    assert events == ["memory", "cpu", "kv", "memory"]
    assert [(s.phase, s.step, s.kv_bytes) for s in recorder.samples] == [
        ("before_prefill", 0, 0),
        ("after_decode", 1, 64),
    ]
    assert recorder.samples[0].cpu_percent is None
    assert recorder.samples[1].cpu_percent is not None
