"""The self-check's counter probes on fakes: an energy counter that changes every 100 ms (or
never, or backwards), NVML's throttle counters before and after a load, and the probes around
them with a fake NVML and a fake load. No GPU here; the real ones are read on first contact."""

# The fake mirrors pynvml's camelCase names, which the code under test calls.
# ruff: noqa: N802

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

from benchmarks.harness.doctor.gpu import NvmlUnavailableError
from benchmarks.harness.doctor.selfcheck import gpu as sg
from tests.harness.device.fake_nvml import PynvmlFake

CUDA = torch.device("cuda", 0)


class FakeClock:
    """Time that moves only when the probe polls: 1 ms per poll."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def tick(self) -> None:
        self.now_s += 0.001


def counter_every(clock: FakeClock, period_s: float, joules: float = 25.0):
    """A cumulative counter that steps by `joules` every `period_s` of the clock's time."""
    return lambda: joules * int(clock.now_s / period_s + 1e-9)


def test_a_counter_that_changes_every_100_ms_has_a_100_ms_period_and_a_1_s_window():
    clock = FakeClock()
    updates = sg.counter_updates(
        counter_every(clock, 0.1), lambda: None, 3.0, clock=clock, pause=clock.tick
    )
    assert updates.changes == 30
    assert updates.period_s == pytest.approx(0.1, abs=0.002)
    assert updates.min_window_s == pytest.approx(1.0, abs=0.02)
    assert not updates.went_backwards
    found = sg.judge_energy_counter("nvml:total_energy", updates)
    assert found.level == "ok"
    assert "updates every 100.0 ms" in found.message
    assert "the suite assumes 100 ms" in found.message
    assert found.data["energy_update_period_s"] == updates.period_s


def test_a_counter_slower_than_the_suites_windows_can_meter_is_bad():
    clock = FakeClock()
    updates = sg.counter_updates(
        counter_every(clock, 0.25), lambda: None, 3.0, clock=clock, pause=clock.tick
    )
    found = sg.judge_energy_counter("nvml:total_energy", updates)
    assert updates.min_window_s == pytest.approx(2.5, abs=0.05)
    assert found.level == "bad"
    assert "updates every 250.0 ms" in found.message
    assert "benchmarks/harness/device/energy.py" in found.action


def test_a_counter_that_never_changes_gives_no_period_and_a_warning():
    clock = FakeClock()
    updates = sg.counter_updates(lambda: 7.0, lambda: None, 1.0, clock=clock, pause=clock.tick)
    assert (updates.changes, updates.period_s) == (0, None)
    found = sg.judge_energy_counter("rapl:package-0", updates)
    assert found.level == "warn"
    assert "0 change(s)" in found.message


def test_a_counter_going_backwards_is_reported():
    clock = FakeClock()
    values = iter([5.0, 6.0, 6.0, 1.0] + [1.0] * 10_000)
    updates = sg.counter_updates(
        lambda: next(values), lambda: None, 1.0, clock=clock, pause=clock.tick
    )
    assert updates.went_backwards
    assert sg.judge_energy_counter("nvml:total_energy", updates).level == "warn"


def test_the_load_is_fed_between_reads_and_failed_reads_are_counted():
    clock, fed = FakeClock(), []
    reads = iter([None, 1.0, None] + [1.0] * 10_000)
    updates = sg.counter_updates(
        lambda: next(reads), lambda: fed.append(1), 0.01, clock=clock, pause=clock.tick
    )
    assert updates.failed_reads == 2
    assert len(fed) == updates.reads - 1  # once before every read after the first


class FakeNvml(PynvmlFake):
    """pynvml's field-value and violation-status calls over counters the test advances (ns)."""

    NVML_SUCCESS = 0
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP = 74
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN = 269
    NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN = 270
    NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN = 271
    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1

    def __init__(self, counters_ns: dict[int, int], violations_ns: dict[int, int] | None = None):
        self.counters_ns = counters_ns
        self.violations_ns = violations_ns or {}
        self.energy_mj = 1_000

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        (field_id,) = field_ids
        if field_id not in self.counters_ns:
            return [SimpleNamespace(nvmlReturn=self.NVML_ERROR_NOT_SUPPORTED, value=None)]
        value = SimpleNamespace(ullVal=self.counters_ns[field_id])
        return [SimpleNamespace(nvmlReturn=self.NVML_SUCCESS, value=value)]

    def nvmlDeviceGetViolationStatus(self, handle, policy):
        if policy not in self.violations_ns:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return SimpleNamespace(referenceTime=0, violationTime=self.violations_ns[policy])

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self.energy_mj


def test_the_power_cap_time_under_load_is_read_from_the_clock_event_counters():
    nv = FakeNvml({74: 5_000_000_000, 270: 0})
    gpu = sg.NvmlHandle(nv, "h0", 0)
    before = sg.read_throttle_ns(gpu)
    assert before == {
        "sw_power_cap": 5e9,
        "sw_thermal": None,
        "hw_thermal": 0,
        "hw_power_brake": None,
    }
    nv.counters_ns[74] += 1_500_000_000  # 1.5 s power-capped during the load
    seconds = sg.throttled_s(before, sg.read_throttle_ns(gpu))
    assert seconds["sw_power_cap"] == pytest.approx(1.5)
    assert seconds["hw_thermal"] == 0
    found = sg.judge_throttle(seconds, 3.0)
    assert found.level == "warn"
    assert "sw_power_cap 1.50 s" in found.message
    assert found.data["throttle_sw_power_cap_s"] == pytest.approx(1.5)


def test_thermal_slowdown_under_load_is_bad_and_the_violation_status_is_the_fallback():
    nv = FakeNvml({270: 0}, violations_ns={1: 0})  # sw thermal only as a violation counter
    gpu = sg.NvmlHandle(nv, "h0", 0)
    before = sg.read_throttle_ns(gpu)
    assert before["sw_thermal"] == 0
    nv.violations_ns[1] = 250_000_000
    nv.counters_ns[270] = 100_000_000
    found = sg.judge_throttle(sg.throttled_s(before, sg.read_throttle_ns(gpu)), 3.0)
    assert found.level == "bad"
    assert "sw_thermal, hw_thermal" in found.message


def test_no_throttle_counters_at_all_is_a_skip_not_a_zero():
    gpu = sg.NvmlHandle(FakeNvml({}), "h0", 0)
    seconds = sg.throttled_s(sg.read_throttle_ns(gpu), sg.read_throttle_ns(gpu))
    assert set(seconds.values()) == {None}
    assert sg.judge_throttle(seconds, 3.0).level == "skip"


def test_no_throttling_under_load_is_ok_with_the_zeros_it_read():
    gpu = sg.NvmlHandle(FakeNvml({74: 9, 269: 9, 270: 9, 271: 9}), "h0", 0)
    found = sg.judge_throttle(sg.throttled_s(*[sg.read_throttle_ns(gpu)] * 2), 3.0)
    assert found.level == "ok"
    assert "sw_power_cap 0.00 s" in found.message


class FakeLoad:
    """A load that advances the fake GPU's counters as it runs."""

    def __init__(self, nv: FakeNvml) -> None:
        self.nv, self.ran_s = nv, 0.0

    def step(self) -> None:
        self.nv.energy_mj += 1

    def run_for(self, seconds: float) -> float:
        self.ran_s += seconds
        if seconds > 1:  # the measured load, not the warm-up
            self.nv.counters_ns[271] += 20_000_000
        return seconds


def test_the_throttle_probe_reads_the_counters_around_the_load_only():
    nv = FakeNvml({74: 0, 271: 0})

    @contextmanager
    def fake_open(index):
        assert index == 0
        yield sg.NvmlHandle(nv, "h0", 3)

    load = FakeLoad(nv)
    found = sg.probe_throttle(CUDA, 3.0, open_gpu=fake_open, load_for=lambda _d: load)
    assert found.level == "bad"
    assert "hw_power_brake 0.02 s" in found.message
    assert load.ran_s == pytest.approx(3.2)  # a short warm-up, then the counted load


def test_the_energy_probe_skips_without_nvml_or_without_a_counter():
    @contextmanager
    def no_nvml(index):
        raise NvmlUnavailableError("nvidia-ml-py (pynvml) is not importable (ImportError)")
        yield

    found = sg.probe_energy_counter(CUDA, open_gpu=no_nvml)
    assert found.level == "skip"
    assert "not importable" in found.message

    class Old(FakeNvml):
        def nvmlDeviceGetTotalEnergyConsumption(self, handle):
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    @contextmanager
    def old_gpu(index):
        yield sg.NvmlHandle(Old({}), "h0", 0)

    found = sg.probe_energy_counter(CUDA, open_gpu=old_gpu)
    assert found.level == "skip"
    assert "no total-energy counter" in found.message


def test_the_energy_probe_on_a_cpu_reads_rapl_or_says_why_not(tmp_path):
    found = sg.probe_energy_counter(torch.device("cpu"), 0.05, powercap_root=tmp_path / "none")
    assert found.level == "skip"
    assert "no powercap RAPL interface" in found.message
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "name").write_text("package-0\n")
    (zone / "energy_uj").write_text("1000\n")  # a counter that does not move in a fake tree
    found = sg.probe_energy_counter(torch.device("cpu"), 0.05, powercap_root=tmp_path)
    assert found.level == "warn"
    assert found.data["energy_source"] == "rapl:package-0"


def test_open_nvml_finds_torchs_gpu_by_uuid_and_shuts_nvml_down():
    class Listed(FakeNvml):
        shutdowns = 0

        def nvmlInit(self):
            pass

        def nvmlShutdown(self):
            Listed.shutdowns += 1

        def nvmlDeviceGetCount(self):
            return 2

        def nvmlDeviceGetHandleByIndex(self, index):
            return f"h{index}"

        def nvmlDeviceGetUUID(self, handle):
            return {"h0": "GPU-aaaa", "h1": "GPU-bbbb"}[handle]

    with sg.open_nvml(0, Listed({}), torch_uuid=lambda _i: "bbbb") as gpu:
        assert (gpu.handle, gpu.nvml_index) == ("h1", 1)
    assert Listed.shutdowns == 1
    with pytest.raises(NvmlUnavailableError, match="no NVML GPU matches"):  # noqa: SIM117
        with sg.open_nvml(0, Listed({}), torch_uuid=lambda _i: "cccc"):
            pass
    assert Listed.shutdowns == 2


def test_a_rapl_counter_is_judged_against_the_window_the_suite_sizes_for_rapl():
    clock = FakeClock()
    updates = sg.counter_updates(
        counter_every(clock, 0.002), lambda: None, 1.0, clock=clock, pause=clock.tick
    )
    found = sg.judge_energy_counter("rapl:package-0+package-1", updates)
    assert updates.period_s == pytest.approx(0.002, abs=0.0011)
    assert found.level == "ok"  # 10 updates of ~2 ms fit in the suite's 1-s windows
    assert found.data["energy_suite_min_window_s"] == 1.0
