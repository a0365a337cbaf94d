"""Judging NVML readings: every GPU state that makes results untrustworthy exits 1."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.harness.doctor import gpuchecks
from benchmarks.harness.doctor.findings import exit_status
from benchmarks.harness.doctor.gpu import GpuProcess, GpuReadings

ME = 1000
HEALTHY = GpuReadings(
    nvml_index=0,
    name="NVIDIA H200",
    driver="570.86.15",
    persistence_mode=True,
    ecc_enabled=True,
    ecc_uncorrected_volatile=0,
    retired_pages_pending=False,
    remapped_rows_pending=False,
    mig_enabled=False,
    mig_pending=False,
    sm_clock_mhz=1755,
    max_sm_clock_mhz=1980,
    throttle_reasons=("gpu_idle",),
    power_limit_w=700.0,
    default_power_limit_w=700.0,
    processes=(GpuProcess(ME, "python", "compute", 1 << 30),),
)


def with_(**changes):
    return dataclasses.replace(HEALTHY, **changes)


def checks(readings, busy=1755):
    found = gpuchecks.gpu_checks(readings, busy)
    found[0] = gpuchecks.check_processes(readings, own_pid=ME)
    return found


def test_a_healthy_locked_gpu_is_fit():
    found = checks(HEALTHY)
    assert exit_status(found) == 0
    assert {f.check: f.level for f in found}["gpu.clocks"] == "ok"
    assert all(f.level in ("ok", "skip") for f in found), [f for f in found if f.level != "ok"]


def test_another_compute_process_on_the_gpu_makes_it_unfit_and_our_own_does_not():
    other = GpuProcess(4242, "vllm", "compute", 70 << 30)
    found = gpuchecks.check_processes(with_(processes=(*HEALTHY.processes, other)), own_pid=ME)
    assert found.level == "bad"
    assert "vllm (pid 4242, 70.0 GiB)" in found.message
    assert "CUDA_VISIBLE_DEVICES" in found.action
    assert gpuchecks.check_processes(HEALTHY, own_pid=ME).level == "ok"


def test_a_display_server_is_a_warning_and_an_unlisted_process_table_is_not_ok():
    desktop = with_(processes=(GpuProcess(1, "Xorg", "graphics", None),))
    assert gpuchecks.check_processes(desktop, own_pid=ME).level == "warn"
    assert gpuchecks.check_processes(with_(processes=None), own_pid=ME).level == "warn"


@pytest.mark.parametrize(
    "changes",
    [
        {"ecc_uncorrected_volatile": 2},
        {"retired_pages_pending": True},
        {"remapped_rows_pending": True},
    ],
)
def test_pending_ecc_trouble_makes_the_gpu_unfit_with_the_reset_command(changes):
    found = gpuchecks.check_ecc(with_(**changes))
    assert found.level == "bad"
    assert "nvidia-smi -r -i 0" in found.action


@pytest.mark.parametrize("reason", gpuchecks.HARD_THROTTLE)
def test_hardware_or_thermal_slowdown_while_idle_makes_the_gpu_unfit(reason):
    assert gpuchecks.check_throttle(with_(throttle_reasons=("gpu_idle", reason))).level == "bad"
    assert gpuchecks.check_throttle(with_(throttle_reasons=("sw_power_cap",))).level == "warn"


def test_cuda_launch_blocking_makes_timings_untrustworthy():
    assert gpuchecks.check_launch_blocking({"CUDA_LAUNCH_BLOCKING": "1"}).level == "bad"
    assert gpuchecks.check_launch_blocking({"CUDA_LAUNCH_BLOCKING": "0"}).level == "ok"
    assert gpuchecks.check_launch_blocking({}).level == "ok"


def test_clocks_that_boost_under_load_are_not_locked_and_the_fix_names_the_max_clock():
    found = gpuchecks.check_clocks(with_(sm_clock_mhz=345), busy_sm_clock_mhz=1980)
    assert found.level == "warn"
    assert "nvidia-smi -i 0 -lgc 1980" in found.action
    assert gpuchecks.check_clocks(HEALTHY, busy_sm_clock_mhz=1770).level == "ok"
    unknown = gpuchecks.check_clocks(HEALTHY, busy_sm_clock_mhz=None)
    assert unknown.level == "warn"


def test_persistence_off_a_lowered_power_limit_and_mig_are_warnings_with_their_commands():
    persistence = gpuchecks.check_persistence(with_(persistence_mode=False))
    assert (persistence.level, persistence.action) == ("warn", "sudo nvidia-smi -i 0 -pm 1")
    power = gpuchecks.check_power_limit(with_(power_limit_w=450.0))
    assert power.level == "warn"
    assert "-pl 700" in power.action
    assert gpuchecks.check_mig(with_(mig_enabled=True)).level == "warn"
    assert gpuchecks.check_mig(with_(mig_pending=True)).level == "warn"
    assert gpuchecks.check_mig(with_(mig_enabled=None)).level == "skip"
