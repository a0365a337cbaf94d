"""cpustate: the last-level cache over the CPUs a process may use, and other processes' CPU use."""

from __future__ import annotations

import pytest

from benchmarks.harness.device import cpustate
from benchmarks.harness.device.cpustate import (
    CacheLevel,
    CpuUseMeter,
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


def test_the_meter_subtracts_this_process_from_the_busy_time():
    # System busy 3.0 CPU-s over 1.5 s of wall on 2 CPUs, of which this process used 2.4.
    busy = iter([100.0, 103.0])
    own = iter([10.0, 12.4])
    clock = iter([0.0, 1.5])
    meter = CpuUseMeter(
        cpus=[0, 1],
        busy_s=lambda cpus: next(busy),
        own_s=lambda: next(own),
        clock=lambda: next(clock),
    )
    meter.start()
    use = meter.stop()
    assert use.others_cores == pytest.approx(0.4)
    assert use.others_fraction == pytest.approx(0.2)
    assert use.cpus == 2


def test_own_time_above_the_system_busy_time_is_not_negative_load():
    busy, own, clock = iter([0.0, 1.0]), iter([0.0, 1.2]), iter([0.0, 1.0])
    meter = CpuUseMeter(
        cpus=[0], busy_s=lambda cpus: next(busy), own_s=lambda: next(own), clock=lambda: next(clock)
    )
    meter.start()
    assert meter.stop().others_cores == 0.0


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
    from benchmarks.harness.device.cpustate import CpuUseMeter, OthersCpuMeter  # noqa: PLC0415

    def meter(busy: list[float], own: list[float]) -> OthersCpuMeter:
        b, o, c = iter(busy), iter(own), iter([0.0, 1.0])
        return OthersCpuMeter(
            CpuUseMeter(
                cpus=[0, 1], busy_s=lambda _: next(b), own_s=lambda: next(o), clock=lambda: next(c)
            )
        )

    quiet, half, over = meter([0, 1], [0, 1]), meter([0, 2], [0, 1]), meter([0, 9], [0, 0])
    for m in (quiet, half, over):
        m.start()
    # 1 s on 2 CPUs: only our own CPU-second -> 0 %; one other CPU-second -> 50 %; counters that
    # overshoot (steal, rounding) never read above the machine.
    assert tuple(m.stop_extra_info()["other_cpu_pct"] for m in (quiet, half, over)) == (
        0.0,
        50.0,
        100.0,
    )


def test_a_benchmark_records_the_others_in_cores_and_as_a_share_of_the_machine():
    from benchmarks.harness.device.cpustate import CpuUseMeter, OthersCpuMeter  # noqa: PLC0415

    b, o, c = iter([0.0, 3.0]), iter([0.0, 1.5]), iter([0.0, 1.0])
    meter = OthersCpuMeter(
        CpuUseMeter(cpus=[0, 1, 2, 3], busy_s=lambda _: next(b), own_s=lambda: next(o),
                    clock=lambda: next(c))
    )  # fmt: skip
    meter.start()
    # 3 busy CPU-seconds in 1 s, 1.5 of them ours: the others kept 1.5 of 4 CPUs busy.
    assert meter.stop_extra_info() == {"others_cores": 1.5, "other_cpu_pct": 37.5}
