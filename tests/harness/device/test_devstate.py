"""GPU state and energy around the timed rounds (`devstate.RoundsMeter`), and joules per token."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import torch

from benchmarks.harness.device.devstate import GPU_FIELDS, RoundsMeter
from benchmarks.harness.device.energy import EnergyUnavailable, open_energy
from benchmarks.harness.device.nvml import open_gpu
from benchmarks.harness.records import phase_energy_fields
from tests.harness.device.fake_nvml import three_gpus, torch_sees

CUDA0 = torch.device("cuda", 0)


def gpu_meter(fake: Any, clock: Any) -> RoundsMeter:
    return RoundsMeter(
        CUDA0,
        open_nvml=partial(open_gpu, nvml=fake, torch_uuid=torch_sees(2), environ={}),
        clock=clock,
    )


def test_clocks_throttle_and_power_are_sampled_before_and_after_the_rounds():
    fake = three_gpus()
    gpu = fake.gpus[2]  # torch's cuda:0 under CUDA_VISIBLE_DEVICES=2
    clock = iter([0.0, 4.0])
    meter = gpu_meter(fake, lambda: next(clock))
    gpu.throttle_mask = 0x1  # idle while the host prepares the rounds
    meter.start()
    # the rounds ran: the GPU heated up and was capped, and used 1,200 J in 4 s
    gpu.sm_mhz, gpu.throttle_mask, gpu.power_mw = 1410, 0x1 | 0x20, 650_000
    gpu.energy_mj += 1_200_000
    info = meter.stop()
    assert info["gpu_nvml_index"] == 2
    assert (info["gpu_sm_clock_mhz_min"], info["gpu_sm_clock_mhz_max"]) == (1200, 1410)
    assert info["gpu_max_sm_clock_mhz"] == 1980
    assert info["gpu_throttle_reasons"] == ["sw_thermal"]  # gpu_idle is left out (see module)
    assert info["gpu_power_w_mean"] == pytest.approx(300.0)  # the counter: 1,200 J / 4 s
    assert info["gpu_power_w_max"] == pytest.approx(650.0)
    assert info["gpu_power_limit_w"] == pytest.approx(700.0)
    assert info["energy_source"] == "nvml:total_energy"
    assert info["energy_window_j"] == pytest.approx(1200.0)
    assert info["energy_window_s"] == pytest.approx(4.0)
    assert info["energy_reason"] is None
    assert fake.inits == fake.shutdowns == 1


def test_nothing_is_read_inside_the_window():
    fake = three_gpus()
    meter = gpu_meter(fake, iter([0.0, 1.0]).__next__)
    meter.start()
    reads_at_start = len(fake.calls)
    fake.gpus[2].energy_mj += 5_000
    assert len(fake.calls) == reads_at_start  # the rounds run with no NVML call
    meter.stop()
    assert len(fake.calls) == reads_at_start + 1


def test_off_cuda_every_gpu_field_is_none_with_the_reason():
    cpu = RoundsMeter(
        torch.device("cpu"),
        open_counter=lambda *_a, **_k: EnergyUnavailable("no RAPL package domain"),
        clock=iter([0.0, 1.0]).__next__,
    )
    cpu.start()
    info = cpu.stop()
    assert all(info[name] is None for name in GPU_FIELDS)
    assert info["gpu_state_reason"] == "not a CUDA device"
    assert (info["energy_source"], info["energy_reason"]) == (None, "no RAPL package domain")


def test_a_counter_that_did_not_advance_is_no_reading():
    # a window shorter than NVML's refresh: 0 J would claim the tokens were free
    fake = three_gpus()
    meter = gpu_meter(fake, iter([0.0, 0.01]).__next__)
    meter.start()
    info = meter.stop()
    assert info["energy_window_j"] is None
    assert info["energy_source"] is None
    assert "did not advance" in info["energy_reason"]
    assert info["gpu_power_w_mean"] is None


def test_a_counter_that_fails_to_open_never_costs_the_rounds():
    def broken(*_a: object, **_k: object) -> Any:
        raise OSError("sysfs vanished")

    meter = RoundsMeter(torch.device("cpu"), open_counter=broken, clock=iter([0.0, 1.0]).__next__)
    meter.start()
    assert "sysfs vanished" in meter.stop()["energy_reason"]


def test_cpu_rapl_window_through_the_meter(tmp_path):
    pkg = tmp_path / "intel-rapl:0"
    pkg.mkdir()
    (pkg / "name").write_text("package-0")
    (pkg / "max_energy_range_uj").write_text("262143328850")
    (pkg / "energy_uj").write_text("5000000")
    meter = RoundsMeter(
        torch.device("cpu"),
        open_counter=partial(open_energy, system="Linux", powercap_root=tmp_path),
        clock=iter([0.0, 2.0]).__next__,
    )
    meter.start()
    (pkg / "energy_uj").write_text("35000000")  # 30 J
    info = meter.stop()
    assert (info["energy_source"], info["energy_window_j"]) == ("rapl:package-0", 30.0)


INFO = {"energy_window_j": 30.0, "energy_window_s": 2.0}


def test_prefill_joules_per_token_charge_the_mean_power_for_the_timed_seconds_only():
    # 15 W over the window; rounds timed 0.5 s + 0.5 s = 1 s -> 15 J over 2 rounds x (B=2 x P=64)
    info = {**INFO, "measurement": "prefill"}
    fields = phase_energy_fields(info, [0.5, 0.5], {"batch": 2, "prompt_len": 64})
    assert fields["prefill_j_per_tok"] == pytest.approx(15.0 / (2 * 2 * 64))
    assert fields["energy_timed_s"] == pytest.approx(1.0)


def test_decode_joules_per_token_count_batch_tokens_per_step():
    info = {**INFO, "measurement": "decode"}
    fields = phase_energy_fields(info, [0.1] * 10, {"batch": 4, "prompt_len": 512})
    assert fields["decode_j_per_tok"] == pytest.approx(15.0 * 1.0 / (10 * 4))


def test_no_reading_is_none_and_other_measurements_get_no_phase_figure():
    none = phase_energy_fields(
        {"measurement": "decode", "energy_window_j": None, "energy_window_s": 2.0},
        [0.1],
        {"batch": 1, "prompt_len": 8},
    )
    assert none["decode_j_per_tok"] is None
    generate = {**INFO, "measurement": "generate"}
    assert phase_energy_fields(generate, [1.0], {"batch": 1, "prompt_len": 8}) == {}


def test_a_counter_that_fails_to_start_or_stop_is_recorded_not_raised():
    class Broken:
        source = "powermetrics:combined"
        failure = None

        def __init__(self, fail_at: str) -> None:
            self.fail_at = fail_at

        def start(self) -> None:
            if self.fail_at == "start":
                raise FileNotFoundError("powermetrics")

        def stop(self) -> float:
            raise OSError("broken pipe")

    for fail_at, expected in (("start", "did not start"), ("stop", "broken pipe")):
        meter = RoundsMeter(
            torch.device("mps"),
            open_counter=lambda *_a, fail_at=fail_at, **_k: Broken(fail_at),
            clock=iter([0.0, 1.0]).__next__,
        )
        meter.start()
        info = meter.stop()
        assert info["energy_window_j"] is None
        assert expected in info["energy_reason"]
