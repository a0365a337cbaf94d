"""Noise control: warmup until stable, thread pinning, thermal readers that never raise."""

from __future__ import annotations

import itertools

import pytest
import torch

from benchmarks.harness.device import noise
from benchmarks.harness.device import nvml as nvml_reader
from benchmarks.harness.device.noise import (
    WarmupPolicy,
    coefficient_of_variation,
    cpu_thread_state,
    linux_cpufreq,
    linux_thermal_zones,
    macos_thermal,
    nvidia_clocks,
    pin_cpu_threads,
    thermal_state,
    warmup_until_stable,
)
from tests.harness.device.fake_nvml import fake_module


def feed(values):
    """A round callable returning the given seconds in turn (then repeating the last)."""
    it = itertools.chain(values, itertools.repeat(values[-1]))
    return lambda: next(it)


def test_stable_rounds_stop_as_soon_as_the_window_is_full():
    outcome = warmup_until_stable(feed([1.0]), WarmupPolicy(cv_bound=0.05, window=3))
    assert outcome.rounds == 3
    assert outcome.stable
    assert outcome.final_cv == 0.0


def test_a_slow_first_round_is_waited_out():
    outcome = warmup_until_stable(
        feed([5.0, 1.0, 1.01, 0.99, 1.0]), WarmupPolicy(cv_bound=0.05, window=3)
    )
    assert outcome.rounds == 4  # window (1.0, 1.01, 0.99) is the first stable one
    assert outcome.stable
    assert outcome.round_s[:4] == (5.0, 1.0, 1.01, 0.99)


def test_never_stable_hits_the_cap_and_says_so():
    outcome = warmup_until_stable(
        feed([1.0, 2.0] * 10), WarmupPolicy(cv_bound=0.05, window=3, max_rounds=7)
    )
    assert outcome.rounds == 7
    assert not outcome.stable
    assert outcome.final_cv is not None
    assert outcome.final_cv > 0.05


def test_min_rounds_is_respected_even_when_stable_earlier():
    outcome = warmup_until_stable(feed([1.0]), WarmupPolicy(window=2, min_rounds=5))
    assert outcome.rounds == 5


def test_a_zero_timer_is_never_stable():
    assert coefficient_of_variation([0.0, 0.0]) == float("inf")


@pytest.mark.parametrize(
    "kwargs",
    [{"window": 1}, {"min_rounds": 0}, {"min_rounds": 5, "max_rounds": 4}, {"cv_bound": 0.0}],
)
def test_invalid_policies_are_refused(kwargs):
    with pytest.raises(ValueError, match="WarmupPolicy"):
        WarmupPolicy(**kwargs)


def test_thread_state_records_torch_threads_env_and_affinity(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    state = cpu_thread_state()
    assert state["torch_num_threads"] == torch.get_num_threads()
    assert state["env_OMP_NUM_THREADS"] == "1"
    assert isinstance(state["cpu_affinity"], str)


def test_pin_cpu_threads_sets_and_reports_the_count():
    before = torch.get_num_threads()
    try:
        assert pin_cpu_threads(1)["torch_num_threads"] == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="positive"):
        pin_cpu_threads(0)


def test_linux_readers_return_nothing_when_sysfs_is_absent(tmp_path):
    assert linux_thermal_zones(tmp_path / "none") == {}
    assert linux_cpufreq(tmp_path / "none") == {}


def test_linux_readers_parse_sysfs_units(tmp_path):
    zone = tmp_path / "thermal" / "thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("x86_pkg_temp\n")
    (zone / "temp").write_text("54000\n")
    broken = tmp_path / "thermal" / "thermal_zone1"
    broken.mkdir()
    (broken / "temp").write_text("garbage\n")
    freq = tmp_path / "cpu" / "cpu0" / "cpufreq"
    freq.mkdir(parents=True)
    (freq / "scaling_cur_freq").write_text("2600000\n")
    (freq / "cpuinfo_max_freq").write_text("3500000\n")
    (freq / "scaling_governor").write_text("performance\n")
    assert linux_thermal_zones(tmp_path / "thermal") == {"thermal_x86_pkg_temp_c": 54.0}
    assert linux_cpufreq(tmp_path / "cpu") == {
        "cpu0_cur_freq_hz": 2_600_000_000,
        "cpu0_max_freq_hz": 3_500_000_000,
        "cpufreq_governor": "performance",
    }


def test_macos_reader_tolerates_a_missing_command_and_parses_pmset():
    assert macos_thermal(lambda argv: None) == {}
    text = "Note: No thermal warning level has been recorded\nCPU_Speed_Limit \t= 100\n"
    state = macos_thermal(lambda argv: text)
    assert state["macos_cpu_speed_limit_pct"] == 100
    assert state["macos_thermal_warning"] == "No thermal warning level has been recorded"


def test_macos_reader_with_no_pmset_binary_never_raises(monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError("pmset")

    monkeypatch.setattr(noise.subprocess, "run", missing)
    assert macos_thermal() == {}


def test_nvidia_reader_without_pynvml_returns_nothing(monkeypatch):
    monkeypatch.setattr(nvml_reader, "import_pynvml", lambda: None)
    assert nvidia_clocks(0) == {}


def one_gpu(index):
    """torch's UUID of its only GPU."""
    return "0000aaaa" if index == 0 else None


def fake_nvml(*, fail_init=False, fail_temperature=False):
    def init():
        if fail_init:
            raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")

    def temperature(handle, sensor):
        if fail_temperature:
            raise RuntimeError("not supported")
        return 61

    return fake_module(
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetUUID=lambda h: "GPU-0000aaaa",
        nvmlDeviceGetClockInfo=lambda h, kind: {"sm": 1980, "mem": 2619}[kind],
        nvmlDeviceGetMaxClockInfo=lambda h, kind: 1980,
        nvmlDeviceGetTemperature=temperature,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x4 | 0x40,
        NVML_CLOCK_SM="sm",
        NVML_CLOCK_MEM="mem",
        NVML_TEMPERATURE_GPU=0,
        nvmlClocksThrottleReasonGpuIdle=0x1,
        nvmlClocksThrottleReasonSwPowerCap=0x4,
        nvmlClocksThrottleReasonHwThermalSlowdown=0x40,
    )


def test_nvidia_reader_reports_clocks_in_hz_temperature_and_throttle_reasons():
    state = nvidia_clocks(0, nvml=fake_nvml(), torch_uuid=one_gpu, environ={})
    assert state == {
        "gpu_nvml_index": 0,
        "gpu_sm_clock_hz": 1_980_000_000,
        "gpu_mem_clock_hz": 2_619_000_000,
        "gpu_max_sm_clock_hz": 1_980_000_000,
        "gpu_temperature_c": 61,
        "gpu_throttle_reasons": "sw_power_cap,hw_thermal",
    }


def test_nvidia_reader_survives_failing_queries_and_init():
    assert nvidia_clocks(0, nvml=fake_nvml(fail_init=True), torch_uuid=one_gpu, environ={}) == {}
    partial = nvidia_clocks(
        0, nvml=fake_nvml(fail_temperature=True), torch_uuid=one_gpu, environ={}
    )
    assert "gpu_temperature_c" not in partial
    assert partial["gpu_sm_clock_hz"] == 1_980_000_000


@pytest.mark.parametrize("system", ["Linux", "Darwin", "Windows"])
def test_thermal_state_never_raises_on_any_os(monkeypatch, system):
    monkeypatch.setattr(noise.platform, "system", lambda: system)
    monkeypatch.setattr(noise, "_run_command", lambda argv: None)
    state = thermal_state(torch.device("cpu"))
    assert isinstance(state, dict)
    assert all(isinstance(v, (str, int, float)) for v in state.values())
