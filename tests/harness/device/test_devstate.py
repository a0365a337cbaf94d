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
CELL = {"batch": 2, "prompt_len": 64}


def gpu_meter(fake: Any, clock: Any) -> RoundsMeter:
    return RoundsMeter(
        CUDA0,
        open_nvml=partial(open_gpu, nvml=fake, torch_uuid=torch_sees(2), environ={}),
        clock=clock,
    )


def test_clocks_and_power_are_the_drivers_samples_during_the_rounds_not_idle_reads():
    fake = three_gpus()
    gpu = fake.gpus[2]  # torch's cuda:0 under CUDA_VISIBLE_DEVICES=2
    clock = iter([0.0, 4.0])
    meter = gpu_meter(fake, lambda: next(clock))
    gpu.throttle_mask = 0x1  # idle while the host prepares the rounds
    # the driver's buffers before the rounds: idle clocks and power
    gpu.samples = {5: [(100, 345)], 6: [(100, 405)], 0: [(100, 60_000)]}
    meter.start()
    # the rounds ran: the driver sampled the loaded GPU; it was capped, and used 1,200 J in 4 s
    gpu.samples[5] += [(200, 1410), (300, 1755)]
    gpu.samples[6] += [(200, 2619), (300, 2619)]
    gpu.samples[0] += [(200, 650_000), (300, 690_000)]
    gpu.throttle_mask = 0x1 | 0x20
    gpu.energy_mj += 1_200_000
    info = meter.stop()
    assert info["gpu_nvml_index"] == 2
    assert (info["gpu_sm_clock_mhz_min"], info["gpu_sm_clock_mhz_max"]) == (1410, 1755)
    assert (info["gpu_mem_clock_mhz_min"], info["gpu_clock_samples"]) == (2619, 2)
    assert info["gpu_max_sm_clock_mhz"] == 1980
    assert info["gpu_throttle_reasons"] == ["sw_thermal"]  # gpu_idle is left out (see module)
    assert info["gpu_power_w_mean"] == pytest.approx(300.0)  # the counter: 1,200 J / 4 s
    assert (info["gpu_power_w_max"], info["gpu_power_samples"]) == (pytest.approx(690.0), 2)
    assert info["gpu_power_limit_w"] == pytest.approx(700.0)
    assert info["gpu_window_s"] == pytest.approx(4.0)
    assert info["energy_method"] == "timed_rounds"
    assert info["energy_source"] == "nvml:total_energy"
    assert info["energy_window_j"] == pytest.approx(1200.0)
    assert info["energy_window_s"] == pytest.approx(4.0)
    assert (info["energy_counter_period_s"], info["energy_counter_updates"]) == (0.1, 40)
    assert info["energy_reason"] is None
    assert info["gpu_state_note"] is None
    assert fake.inits == fake.shutdowns == 1


def test_nothing_is_read_inside_the_window():
    fake = three_gpus()
    meter = gpu_meter(fake, iter([0.0, 1.0]).__next__)
    meter.start()
    reads_at_start = len(fake.calls)
    fake.gpus[2].energy_mj += 5_000
    assert len(fake.calls) == reads_at_start  # the rounds run with no NVML call
    meter.stop()
    assert fake.calls[reads_at_start:].count("energy") == 1


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


def test_a_window_too_short_for_the_counter_or_one_it_did_not_advance_over_is_no_reading():
    # 10 ms: under NVML's 100-ms update, whatever the counter did; a zero delta over 2 s: 0 J
    # would claim the tokens were free
    for window_s, reason in ((0.01, "spans 0 update(s)"), (2.0, "did not advance")):
        fake = three_gpus()
        meter = gpu_meter(fake, iter([0.0, window_s]).__next__)
        meter.start()
        info = meter.stop()
        assert info["energy_window_j"] is None
        assert info["energy_source"] is None
        assert reason in info["energy_reason"]
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


BLOCK = {
    "energy_method": "block:prepared",
    "energy_window_j": 30.0,
    "energy_window_s": 2.0,
    "energy_block_calls": 10,
}


def test_prefill_joules_per_token_are_the_blocks_joules_over_its_tokens():
    # 30 J over 10 back-to-back prefills of B=2 x P=64 tokens; the window is all operation
    fields = phase_energy_fields({**BLOCK, "measurement": "prefill"}, [0.5, 0.5], CELL)
    assert fields["prefill_j_per_tok"] == pytest.approx(30.0 / (10 * 2 * 64))
    assert fields["energy_timed_s"] == pytest.approx(2.0)


def test_decode_joules_per_token_count_batch_tokens_per_step():
    info = {**BLOCK, "energy_method": "block:reused", "measurement": "decode"}
    fields = phase_energy_fields(info, [0.1] * 10, {"batch": 4, "prompt_len": 512})
    assert fields["decode_j_per_tok"] == pytest.approx(30.0 / (10 * 4))


def test_no_reading_or_a_rounds_window_is_none_and_other_measurements_get_no_phase_figure():
    none = phase_energy_fields(
        {**BLOCK, "measurement": "decode", "energy_window_j": None, "energy_reason": "short"},
        [0.1],
        CELL,
    )
    assert none["decode_j_per_tok"] is None
    assert "energy_reason" not in none  # the meter's reason stands
    rounds = {"measurement": "decode", "energy_method": "timed_rounds", "energy_window_j": 30.0}
    around = phase_energy_fields({**rounds, "energy_window_s": 2.0}, [0.1, 0.1], CELL)
    assert around["decode_j_per_tok"] is None
    assert "setup" in around["energy_reason"]
    assert around["energy_timed_s"] == pytest.approx(0.2)
    generate = {**rounds, "measurement": "generate", "energy_window_s": 2.0}
    assert phase_energy_fields(generate, [1.0], CELL) == {"energy_timed_s": 1.0}


def test_a_counter_that_fails_to_start_or_stop_is_recorded_not_raised():
    class Broken:
        source = "powermetrics:combined"
        failure = None
        update_period_s = 0.1

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
