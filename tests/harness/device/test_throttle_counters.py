"""Throttling, clocks and power *during* the timed rounds (issue 30, row 3), on a fake NVML.

After the rounds' last sync the GPU is idle: a power cap during a 700-W prefill is over, the
clocks are idle clocks. So `devstate.RoundsMeter` reads NVML's cumulative violation counters
and the driver's sample buffers at the two edges of the rounds, and differences them; the
fakes advance those counters "during the rounds" while both edge reads see an idle, unthrottled
GPU, which is all a before/after sample used to record.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import torch

from benchmarks.harness.device.devstate import RoundsMeter
from benchmarks.harness.device.nvml import NvmlGpu, Sample, open_gpu
from tests.harness.device.fake_nvml import FakeNvml, NVMLError, three_gpus, torch_sees

POWER, THERMAL = 0, 1  # NVML_PERF_POLICY_POWER, _THERMAL
SM, MEM, WATTS = 5, 6, 0  # NVML_PROCESSOR_CLK_SAMPLES, _MEMORY_CLK_, _TOTAL_POWER_


def meter(fake: FakeNvml) -> RoundsMeter:
    return RoundsMeter(
        torch.device("cuda", 0),
        open_nvml=partial(open_gpu, nvml=fake, torch_uuid=torch_sees(2), environ={}),
        clock=iter([0.0, 3.0]).__next__,
    )


def rounds(fake: FakeNvml, during: Any) -> dict[str, Any]:
    """Start the meter, let `during(gpu)` change what NVML accumulates, stop it."""
    meter_ = meter(fake)
    meter_.start()
    reads = len(fake.calls)
    during(fake.gpus[2])
    assert len(fake.calls) == reads  # nothing is read inside the rounds
    return meter_.stop()


def test_fake_a_power_cap_during_the_rounds_shows_though_both_edges_see_an_idle_gpu():
    fake = three_gpus()
    gpu = fake.gpus[2]
    gpu.throttle_mask = 0x1  # idle at both edges: no throttle bit a sample could catch
    gpu.violation_ns = {POWER: 41_000_000_000, THERMAL: 7_000_000_000}

    def capped(gpu: Any) -> None:
        gpu.violation_ns[POWER] += 1_250_000_000  # 1.25 s at the power cap
        gpu.violation_ns[THERMAL] += 200_000_000  # 0.2 s thermal slowdown

    info = rounds(fake, capped)
    assert info["gpu_throttle_power_s"] == pytest.approx(1.25)
    assert info["gpu_throttle_thermal_s"] == pytest.approx(0.2)
    assert info["gpu_throttle_reasons"] == []  # the edge bits: what a post-sync read sees
    assert info["gpu_window_s"] == pytest.approx(3.0)


def test_fake_no_throttling_is_zero_seconds_not_none():
    info = rounds(three_gpus(), lambda _gpu: None)
    assert (info["gpu_throttle_power_s"], info["gpu_throttle_thermal_s"]) == (0.0, 0.0)


def test_fake_a_missing_or_reset_violation_counter_is_none_with_the_note():
    fake = three_gpus()
    fake.gpus[2].violation_ns = {POWER: 5_000, THERMAL: None}  # thermal: NotSupported

    def reloaded(gpu: Any) -> None:
        gpu.violation_ns[POWER] = 0  # the driver reloaded: the counter restarted

    info = rounds(fake, reloaded)
    assert info["gpu_throttle_power_s"] is None
    assert info["gpu_throttle_thermal_s"] is None
    assert "power violation counter went backwards" in info["gpu_state_note"]
    assert "no thermal violation counter" in info["gpu_state_note"]


def test_fake_clocks_are_the_drivers_samples_in_the_window_only():
    fake = three_gpus()
    gpu = fake.gpus[2]
    gpu.sm_mhz = 345  # what a read after the rounds' sync sees
    gpu.samples = {SM: [(1_000, 345), (2_000, 1980)], MEM: [(1_000, 405)], WATTS: None}

    def loaded(gpu: Any) -> None:  # the driver sampled the GPU under the cap
        gpu.samples[SM] += [(3_000, 1650), (4_000, 1410), (5_000, 1590)]
        gpu.samples[MEM] += [(3_000, 2619)]

    info = rounds(fake, loaded)
    assert (info["gpu_sm_clock_mhz_min"], info["gpu_sm_clock_mhz_max"]) == (1410, 1650)
    assert (info["gpu_mem_clock_mhz_min"], info["gpu_clock_samples"]) == (2619, 3)
    assert (info["gpu_power_w_max"], info["gpu_power_samples"]) == (None, None)
    assert "no power_w samples: the driver keeps none" in info["gpu_state_note"]


def test_fake_a_window_the_driver_sampled_nothing_in_is_none_not_an_idle_clock():
    fake = three_gpus()
    fake.gpus[2].samples = {SM: [(1_000, 345)], MEM: [(1_000, 405)], WATTS: [(1_000, 60_000)]}
    info = rounds(fake, lambda _gpu: None)
    assert (info["gpu_sm_clock_mhz_min"], info["gpu_clock_samples"]) == (None, 0)
    assert (info["gpu_power_w_max"], info["gpu_power_samples"]) == (None, 0)
    assert "no sm_clock_mhz sample in the window" in info["gpu_state_note"]


def test_violation_time_is_read_in_seconds_from_nanoseconds():
    fake = three_gpus()
    fake.gpus[0].violation_ns = {POWER: 2_500_000_000, THERMAL: None}
    gpu = open_gpu(0, fake, torch_uuid=torch_sees(0), environ={})
    assert isinstance(gpu, NvmlGpu)
    assert gpu.violation_s("power") == pytest.approx(2.5)
    assert gpu.violation_s("thermal") is None


def test_samples_decode_the_value_type_and_tell_none_newer_from_unsupported():
    fake = three_gpus()
    fake.gpus[0].samples = {SM: [(20, 1500), (10, 1400)], WATTS: [(10, 350_000)], MEM: None}
    gpu = open_gpu(0, fake, torch_uuid=torch_sees(0), environ={})
    assert isinstance(gpu, NvmlGpu)
    assert gpu.samples("sm_clock_mhz") == [Sample(10, 1400.0), Sample(20, 1500.0)]
    assert gpu.samples("sm_clock_mhz", 20) == []  # NVML_ERROR_NOT_FOUND: nothing newer
    assert gpu.samples("power_w") == [Sample(10, 350.0)]  # mW -> W
    assert gpu.samples("mem_clock_mhz") is None  # NotSupported


def test_the_clock_event_reasons_getter_is_used_where_pynvml_has_it():
    class EventNvml(FakeNvml):
        def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: Any) -> int:  # noqa: N802
            return 0x4

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: Any) -> int:  # noqa: N802
            raise NVMLError("deprecated, removed in CUDA 14")

    fake = three_gpus()
    events = EventNvml(fake.gpus)
    gpu = open_gpu(0, events, torch_uuid=torch_sees(0), environ={})
    assert isinstance(gpu, NvmlGpu)
    assert gpu.throttle_reasons() == ("sw_power_cap",)
