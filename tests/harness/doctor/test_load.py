"""Others' CPU load, torch threads and FTZ/DAZ: what makes a CPU run unfit or noisy."""

from __future__ import annotations

from benchmarks.harness.device.cpustate import CpuUse
from benchmarks.harness.device.fpstate import FpState
from benchmarks.harness.doctor import load
from benchmarks.harness.doctor.load import OtherProcess


def sampler(others_cores, cpus=4, busiest=()):
    return lambda: (CpuUse(others_cores=others_cores, cpus=cpus, wall_s=1.0), list(busiest))


def test_a_cpu_kept_busy_by_others_makes_the_machine_unfit_and_names_the_culprit():
    hog = OtherProcess(pid=4242, name="make", cpu_pct=190.0)
    found = load.check_load(sampler(2.0, busiest=[hog]))
    assert found.level == "bad"
    assert "make (pid 4242, 190 %)" in found.message
    assert "stop the other work" in found.action


def test_light_background_use_is_a_warning_and_a_quiet_machine_is_ok():
    # BUSY_FRACTION is a quarter of our CPUs; a tenth of that warns.
    assert load.check_load(sampler(0.2)).level == "warn"
    assert load.check_load(sampler(0.01)).level == "ok"


def test_more_torch_threads_than_allowed_cpus_is_a_warning():
    over = load.check_threads({"torch_num_threads": 8, "cpu_affinity": "0,1"})
    assert over.level == "warn"
    assert "OMP_NUM_THREADS=2" in over.action
    assert load.check_threads({"torch_num_threads": 2, "cpu_affinity": "0,1"}).level == "ok"


def test_ftz_that_cannot_be_pinned_off_is_bad_and_ftz_on_at_start_is_a_warning():
    on = FpState(flush_to_zero=True, denormals_are_zero=True)
    off = FpState(flush_to_zero=False, denormals_are_zero=False)
    stuck = load.check_fp_state(read=lambda: on, pin=lambda _flag: on)
    assert stuck.level == "bad"
    assert load.check_fp_state(read=lambda: on, pin=lambda _flag: off).level == "warn"
    assert load.check_fp_state(read=lambda: off, pin=lambda _flag: off).level == "ok"


def test_the_real_fp_state_of_this_process_is_off():
    assert load.check_fp_state().level == "ok"
