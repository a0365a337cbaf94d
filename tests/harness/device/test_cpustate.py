"""cpustate: the last-level cache over the CPUs a process may use, and other processes' CPU use."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.harness.device import cpustate
from benchmarks.harness.device.cpustate import (
    CacheLevel,
    CpuUseMeter,
    OthersCpuMeter,
    last_level_cache,
    parse_cpu_list,
    parse_size,
)


def fake_sysfs(root, layout):
    """`layout`: cpu -> list of (level, type, size, shared_cpu_list or None)."""
    for cpu, caches in layout.items():
        for index, (level, kind, size, shared) in enumerate(caches):
            folder = root / f"cpu{cpu}" / "cache" / f"index{index}"
            folder.mkdir(parents=True)
            (folder / "level").write_text(f"{level}\n")
            (folder / "type").write_text(f"{kind}\n")
            (folder / "size").write_text(f"{size}\n")
            if shared is not None:
                (folder / "shared_cpu_list").write_text(f"{shared}\n")
    return root


def two_ccx_epyc(root):
    """8 CPUs, private L1/L2, two L3 instances of 32 MiB (CPUs 0-3 and 4-7), like a 2-CCX EPYC."""
    layout = {}
    for cpu in range(8):
        l3_cpus = "0-3" if cpu < 4 else "4-7"
        layout[cpu] = [
            (1, "Data", "32K", str(cpu)),
            (1, "Instruction", "32K", str(cpu)),
            (2, "Unified", "1024K", str(cpu)),
            (3, "Unified", "32768K", l3_cpus),
        ]
    return fake_sysfs(root, layout)


def test_every_l3_instance_the_threads_may_run_on_is_summed(tmp_path):
    root = two_ccx_epyc(tmp_path)
    assert last_level_cache(root, cpus=range(8)) == CacheLevel(3, 2, 64 << 20)


def test_a_process_pinned_inside_one_ccx_counts_only_that_instance(tmp_path):
    root = two_ccx_epyc(tmp_path)
    assert last_level_cache(root, cpus=[0, 1]) == CacheLevel(3, 1, 32 << 20)
    assert last_level_cache(root, cpus=[6]) == CacheLevel(3, 1, 32 << 20)


def test_a_process_straddling_two_ccxs_gets_both(tmp_path):
    root = two_ccx_epyc(tmp_path)
    assert last_level_cache(root, cpus=[3, 4]) == CacheLevel(3, 2, 64 << 20)


def test_the_default_cpus_are_the_process_affinity(tmp_path, monkeypatch):
    root = two_ccx_epyc(tmp_path)
    monkeypatch.setattr(cpustate, "allowed_cpus", lambda: [5, 7])
    assert last_level_cache(root) == CacheLevel(3, 1, 32 << 20)


def test_a_cache_without_shared_cpu_list_is_its_cpus_own(tmp_path):
    root = fake_sysfs(tmp_path, {0: [(2, "Unified", "2M", None)], 1: [(2, "Unified", "2M", None)]})
    assert last_level_cache(root, cpus=[0, 1]) == CacheLevel(2, 2, 4 << 20)


def test_no_sysfs_means_unknown(tmp_path):
    assert last_level_cache(tmp_path / "missing", cpus=[0]) is None


def test_this_machine_reports_its_cache_or_nothing():
    found = last_level_cache()
    assert found is None or (found.total_bytes > 0 and found.instances >= 1)


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3,8-11", {0, 1, 2, 3, 8, 9, 10, 11}), ("5", {5}), ("0,2", {0, 2}), ("", set())],
)
def test_cpu_lists_parse(text, cpus):
    assert parse_cpu_list(text) == frozenset(cpus)


def test_a_backwards_cpu_range_is_refused():
    with pytest.raises(ValueError, match="bad CPU range"):
        parse_cpu_list("3-1")


@pytest.mark.parametrize(
    ("text", "size"), [("32768K", 32 << 20), ("1M", 1 << 20), ("512", 512), ("x", None)]
)
def test_sizes_parse(text, size):
    assert parse_size(text) == size


def meter_of(idle, own, clock, cpus=(0, 1), tick_s=0.01):
    """A CpuUseMeter on scripted readings: idle CPU-s, own CPU-s and the clock at start, stop."""
    i, o, c = iter(idle), iter(own), iter(clock)
    return CpuUseMeter(
        cpus=list(cpus),
        idle_s=lambda _cpus: next(i),
        own_s=lambda: next(o),
        clock=lambda: next(c),
        tick_s=tick_s,
    )


def test_the_meter_subtracts_idle_time_and_this_process_from_the_capacity():
    # 1.5 s of wall on 2 CPUs = 3.0 CPU-s; idle 0.0 of it, so 3.0 busy, 2.4 of them ours.
    meter = meter_of(idle=[500.0, 500.0], own=[10.0, 12.4], clock=[0.0, 1.5])
    meter.start()
    use = meter.stop()
    assert use.others_cores == pytest.approx(0.4)
    assert use.others_fraction == pytest.approx(0.2)
    assert use.others_cpu_s == pytest.approx(0.6)
    assert use.cpus == 2
    assert use.resolved


def test_own_time_above_the_system_busy_time_is_not_negative_load():
    meter = meter_of(idle=[0.0, 0.0], own=[0.0, 1.2], clock=[0.0, 1.0], cpus=[0])
    meter.start()
    assert meter.stop().others_cores == 0.0


def test_never_more_cores_than_the_machine_has():
    # Counters that overshoot (idle read backwards across a truncation): at most every CPU.
    meter = meter_of(idle=[10.0, 9.0], own=[0.0, 0.0], clock=[0.0, 0.001])
    meter.start()
    assert meter.stop().others_cores == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("wall_s", "resolved"), [(0.005, False), (0.1, False), (0.199, False), (0.2, True), (5, True)]
)
def test_a_window_resolves_from_twenty_ticks(wall_s, resolved):
    # 2 CPUs, 10-ms ticks: the error bound is 2 x 0.01 / wall cores; 0.2 s -> 0.1 core (5 %).
    meter = meter_of(idle=[0.0, 0.0], own=[0.0, 2 * wall_s], clock=[0.0, wall_s])
    meter.start()
    use = meter.stop()
    assert use.resolution_cores == pytest.approx(0.02 / wall_s)
    assert use.resolved is resolved


def test_stop_before_start_is_a_bug():
    with pytest.raises(RuntimeError, match="before start"):
        CpuUseMeter(cpus=[0]).stop()


def test_the_real_meter_runs_on_this_machine():
    meter = CpuUseMeter()
    meter.start()
    use = meter.stop()
    assert use.others_cores >= 0.0
    assert use.cpus == len(cpustate.allowed_cpus())


def test_others_cpu_is_a_percentage_of_the_whole_machine_clamped_to_0_100():
    def meter(idle: list[float], own: list[float]) -> OthersCpuMeter:
        return OthersCpuMeter(meter_of(idle=idle, own=own, clock=[0.0, 1.0]))

    # 1 s on 2 CPUs: one CPU idle, the other ours -> 0 %; neither idle, one ours -> 50 %;
    # counters that overshoot (steal, truncation) never read above the machine.
    quiet, half, over = meter([0, 1], [0, 1]), meter([0, 0], [0, 1]), meter([5, 4], [0, 0])
    for m in (quiet, half, over):
        m.start()
    assert tuple(m.stop_extra_info()["other_cpu_pct"] for m in (quiet, half, over)) == (
        0.0,
        50.0,
        100.0,
    )


def test_a_benchmark_records_the_others_in_cores_and_as_a_share_of_the_machine():
    meter = OthersCpuMeter(
        meter_of(idle=[0.0, 1.0], own=[0.0, 1.5], clock=[0.0, 1.0], cpus=[0, 1, 2, 3])
    )
    meter.start()
    # 4 CPU-s of capacity in 1 s, 1 idle, 1.5 ours: the others kept 1.5 of 4 CPUs busy.
    assert meter.stop_extra_info() == {
        "others_cpu_s": 1.5,
        "others_window_s": 1.0,
        "others_cpus": 4,
        "others_cores": 1.5,
        "other_cpu_pct": 37.5,
    }


def test_a_window_too_short_to_tell_is_unknown_not_busy():
    # The smoke run's case: a 4-ms window on 2 CPUs where one 10-ms tick fell to the others.
    meter = OthersCpuMeter(meter_of(idle=[0.0, -0.002], own=[0.0, 0.0], clock=[0.0, 0.004]))
    meter.start()
    info = meter.stop_extra_info()
    assert info["others_cores"] is None
    assert info["other_cpu_pct"] is None
    assert "unknown" in str(info["other_cpu_note"])
    assert info["others_window_s"] == pytest.approx(0.004)
    assert info["others_cpu_s"] == pytest.approx(0.008)  # kept: reports add windows up


BURN = "import time\nwhile time.process_time() < 0.3:\n    pass\n"


def test_our_own_time_counts_the_children_we_reaped():
    # torch.compile's compilers are the suite's own work, not a neighbour's.
    before = cpustate._own_seconds()
    subprocess.run([sys.executable, "-c", BURN], check=True)
    assert cpustate._own_seconds() - before >= 0.28


def test_our_own_time_counts_live_descendants():
    before = cpustate._own_seconds()
    code = BURN + "import sys\nprint('done', flush=True)\nsys.stdin.read()\n"
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "done"  # burnt its 0.3 s, still alive
        assert cpustate._own_seconds() - before >= 0.28
    finally:
        child.communicate("")
