"""Energy counters: a fake powercap tree, a fake NVML energy counter, powermetrics' output."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.harness.device import rapl
from benchmarks.harness.device.energy import (
    CumulativeWindow,
    EnergyUnavailable,
    nvml_window,
    open_energy,
    rapl_window,
)
from benchmarks.harness.device.nvml import NvmlGpu, NvmlUnavailable, open_gpu
from benchmarks.harness.device.powermetrics import (
    PowermetricsSampler,
    PowermetricsUnavailable,
    mean_power_w,
    open_powermetrics,
    parse_samples,
)
from benchmarks.harness.device.rapl import RaplCounter, RaplUnavailable, open_rapl
from tests.harness.device.fake_nvml import three_gpus, torch_sees

MAX_UJ = 262_143_328_850


def zone(root: Path, name: str, label: str, energy_uj: int, max_uj: int = MAX_UJ) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "name").write_text(f"{label}\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return path


def two_socket_tree(root: Path) -> dict[str, Path]:
    """Two packages, their sub-domains, the platform (psys) and the MMIO copy of package 0."""
    return {
        "pkg0": zone(root, "intel-rapl:0", "package-0", 1_000_000),
        "core0": zone(root, "intel-rapl:0:0", "core", 500_000),
        "dram0": zone(root, "intel-rapl:0:1", "dram", 200_000),
        "pkg1": zone(root, "intel-rapl:1", "package-1", 3_000_000),
        "psys": zone(root, "intel-rapl:2", "psys", 9_000_000),
        "mmio": zone(root, "intel-rapl-mmio:0", "package-0", 1_000_000),
    }


def advance(path: Path, energy_uj: int) -> None:
    (path / "energy_uj").write_text(f"{energy_uj}\n")


def test_packages_only_summed_over_sockets_and_named(tmp_path: Path):
    tree = two_socket_tree(tmp_path)
    counter = open_rapl(tmp_path)
    assert isinstance(counter, RaplCounter)
    assert counter.source == "rapl:package-0+package-1"
    # package 0 used 2 J, package 1 used 3 J; core, dram, psys and the MMIO copy moved too and
    # must not be counted (they would double-count or count the whole platform)
    advance(tree["pkg0"], 3_000_000)
    advance(tree["pkg1"], 6_000_000)
    for other in ("core0", "dram0", "psys", "mmio"):
        advance(tree[other], 99_000_000)
    assert counter.read_j() == pytest.approx(5.0)


def test_a_wrapped_counter_is_unrolled_by_max_energy_range(tmp_path: Path):
    pkg = zone(tmp_path, "intel-rapl:0", "package-0", 999_000, max_uj=999_999)
    window = rapl_window(tmp_path)
    assert isinstance(window, CumulativeWindow)
    window.start()
    advance(pkg, 1_000)  # 999,000 -> wrap at 999,999 -> 1,000: 2,000 uJ in all
    assert window.stop() == pytest.approx(0.002)


def test_permission_denied_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    zone(tmp_path, "intel-rapl:0", "package-0", 1)
    real = Path.read_text

    def root_only(path: Path, *args: object, **kwargs: object) -> str:
        if path.name == "energy_uj":  # mode 0400 since Linux 5.10 (we run tests as any user)
            raise PermissionError(13, "Permission denied")
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", root_only)
    found = open_rapl(tmp_path)
    assert isinstance(found, RaplUnavailable)
    assert "permission denied" in found.reason
    assert "root" in found.reason


def test_no_powercap_or_no_package_is_a_reason(tmp_path: Path):
    assert isinstance(open_rapl(tmp_path / "absent"), RaplUnavailable)
    zone(tmp_path, "intel-rapl:0", "psys", 1)
    found = open_rapl(tmp_path)
    assert isinstance(found, RaplUnavailable)
    assert "no RAPL package" in found.reason
    assert Path("/sys/class/powercap") == rapl.POWERCAP_ROOT


def test_cpu_on_linux_reads_rapl_and_cuda_reads_nvml_energy(tmp_path: Path):
    two_socket_tree(tmp_path)
    cpu = open_energy("cpu", system="Linux", powercap_root=tmp_path)
    assert not isinstance(cpu, EnergyUnavailable)
    assert cpu.source == "rapl:package-0+package-1"
    fake = three_gpus()
    gpu = open_gpu(0, fake, torch_uuid=torch_sees(1), environ={})
    window = open_energy("cuda", gpu=gpu, system="Linux")
    assert not isinstance(window, EnergyUnavailable)
    assert window.source == "nvml:total_energy"
    window.start()
    fake.gpus[1].energy_mj = 1_000_000 + 42_500  # the GPU torch uses, not NVML GPU 0
    fake.gpus[0].energy_mj = 9_000_000
    assert window.stop() == pytest.approx(42.5)


def test_a_gpu_without_the_energy_counter_or_without_nvml_has_a_reason():
    fake = three_gpus()
    fake.gpus[0].energy_mj = None
    gpu = open_gpu(0, fake, torch_uuid=torch_sees(0), environ={})
    assert isinstance(gpu, NvmlGpu)
    old = nvml_window(gpu)
    assert isinstance(old, EnergyUnavailable)
    assert "Volta" in old.reason
    missing = open_energy("cuda", gpu=NvmlUnavailable("nvidia-ml-py not installed"))
    assert missing == EnergyUnavailable("nvidia-ml-py not installed")


def test_a_counter_that_goes_backwards_gives_none_and_says_why():
    readings = iter([10.0, 4.0])
    window = CumulativeWindow("nvml:total_energy", lambda: next(readings), 0.1)
    window.start()
    assert window.stop() is None
    assert window.failure is not None
    assert "backwards" in window.failure


def test_mps_and_mac_cpu_ask_powermetrics_for_the_right_rail():
    asked: list[str] = []

    def fake(rail: str) -> PowermetricsUnavailable:
        asked.append(rail)
        return PowermetricsUnavailable("powermetrics needs root")

    assert open_energy("mps", system="Darwin", powermetrics=fake) == EnergyUnavailable(
        "powermetrics needs root"
    )
    open_energy("cpu", system="Darwin", powermetrics=fake)
    assert asked == ["combined", "cpu"]
    other = open_energy("cpu", system="Windows")
    assert isinstance(other, EnergyUnavailable)
    assert "Windows" in other.reason


POWERMETRICS_TEXT = """Machine model: Mac14,6
*** Sampled system activity (Tue Dec  1 10:00:00 2026 +0000) (100.00ms elapsed) ***

**** Processor usage ****
CPU Power: 2000 mW
GPU Power: 8000 mW
ANE Power: 0 mW
Combined Power (CPU + GPU + ANE): 10000 mW

*** Sampled system activity (Tue Dec  1 10:00:00 2026 +0000) (300.00ms elapsed) ***

CPU Power: 4000 mW
GPU Power: 16000 mW
ANE Power: 0 mW
Combined Power (CPU + GPU + ANE): 20000 mW
"""


def test_powermetrics_samples_are_weighted_by_their_own_length():
    combined = parse_samples(POWERMETRICS_TEXT, "combined")
    assert combined == [(100.0, 10000.0), (300.0, 20000.0)]
    # (0.1 s x 10 W + 0.3 s x 20 W) / 0.4 s = 17.5 W, not the plain mean 15 W
    assert mean_power_w(combined) == pytest.approx(17.5)
    assert mean_power_w(parse_samples(POWERMETRICS_TEXT, "cpu")) == pytest.approx(3.5)
    assert mean_power_w([]) is None


def test_powermetrics_without_root_is_refused_with_the_reason_and_never_elevated():
    found = open_powermetrics(
        "combined", system="Darwin", euid=lambda: 501, which=lambda _: "/usr/bin/powermetrics"
    )
    assert isinstance(found, PowermetricsUnavailable)
    assert "root" in found.reason
    assert "sudo" in found.reason
    linux = open_powermetrics("cpu", system="Linux")
    assert isinstance(linux, PowermetricsUnavailable)


def test_powermetrics_window_is_mean_power_times_the_window():
    class Process:
        def send_signal(self, _sig: int) -> None:
            pass

        def communicate(self, timeout: float | None = None) -> tuple[str, str]:
            return POWERMETRICS_TEXT, ""

    clock = iter([0.0, 2.0])
    sampler = PowermetricsSampler(
        "combined", popen=lambda *a, **k: Process(), clock=lambda: next(clock)
    )
    sampler.start()
    assert sampler.stop() == pytest.approx(17.5 * 2.0)
    assert sampler.source == "powermetrics:combined"
