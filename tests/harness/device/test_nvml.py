"""The NVML wrapper: the right GPU, readings in their units, unsupported queries as None."""

from __future__ import annotations

import pytest

from benchmarks.harness.device import nvml
from benchmarks.harness.device.nvml import NvmlGpu, NvmlUnavailable, open_gpu, throttle_names
from tests.harness.device.fake_nvml import FakeNvml, three_gpus, torch_sees


def test_torch_cuda_0_under_cuda_visible_devices_2_reads_nvml_gpu_2_not_gpu_0():
    fake = three_gpus()
    gpu = open_gpu(0, fake, torch_uuid=torch_sees(2), environ={})
    assert isinstance(gpu, NvmlGpu)
    assert gpu.nvml_index == 2
    assert gpu.sm_clock_mhz() == 1200  # GPU 2's clock, not GPU 0's 1000


def test_readings_are_in_the_units_their_names_say():
    fake = three_gpus()
    gpu = open_gpu(0, fake, torch_uuid=torch_sees(0), environ={})
    assert isinstance(gpu, NvmlGpu)
    assert gpu.power_w() == pytest.approx(350.0)  # 350,000 mW
    assert gpu.power_limit_w() == pytest.approx(700.0)
    assert gpu.energy_j() == pytest.approx(1000.0)  # 1,000,000 mJ
    assert (gpu.max_sm_clock_mhz(), gpu.mem_clock_mhz(), gpu.max_mem_clock_mhz()) == (
        1980,
        2619,
        2619,
    )


def test_an_unsupported_query_is_none_and_does_not_hide_the_others():
    fake = three_gpus()
    fake.gpus[0].energy_mj = None  # a pre-Volta GPU: no total-energy counter
    fake.gpus[0].power_mw = None
    gpu = open_gpu(0, fake, torch_uuid=torch_sees(0), environ={})
    assert isinstance(gpu, NvmlGpu)
    assert gpu.energy_j() is None
    assert gpu.power_w() is None
    assert gpu.sm_clock_mhz() == 1000


def test_throttle_bits_become_names_and_unknown_bits_stay_visible():
    fake = FakeNvml([])
    assert throttle_names(fake, 0) == ()
    assert throttle_names(fake, 0x4 | 0x40) == ("sw_power_cap", "hw_thermal")
    assert throttle_names(fake, 0x1000) == ("other_0x1000",)


def test_without_nvidia_ml_py_the_reason_says_so(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(nvml, "import_pynvml", lambda: None)
    assert open_gpu(0) == NvmlUnavailable(nvml.NOT_INSTALLED)
    assert "nvidia-ml-py not installed" in nvml.NOT_INSTALLED


def test_a_failed_init_and_an_unmatched_uuid_are_reasons_not_another_gpus_readings():
    broken = FakeNvml([], fail_init=True)
    failed = open_gpu(0, broken, torch_uuid=torch_sees(0), environ={})
    assert isinstance(failed, NvmlUnavailable)
    assert "initialise" in failed.reason
    fake = three_gpus()
    missing = open_gpu(0, fake, torch_uuid=lambda _i: "ffff9999", environ={})
    assert isinstance(missing, NvmlUnavailable)
    assert "cuda:0" in missing.reason
    assert fake.inits == fake.shutdowns == 1  # NVML is shut down again when no GPU matched


def test_close_pairs_with_init():
    fake = three_gpus()
    gpu = open_gpu(1, fake, torch_uuid=torch_sees(0, 1), environ={})
    assert isinstance(gpu, NvmlGpu)
    gpu.close()
    assert fake.inits == fake.shutdowns == 1
