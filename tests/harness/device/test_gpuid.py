"""gpuid and the per-device fingerprint: the GPU torch's index names, as NVML and history see it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from benchmarks.harness.device import fingerprint, gpuid, noise
from benchmarks.harness.device.gpuid import normalize_uuid, nvml_index
from tests.harness.device.fake_nvml import fake_module

# A 4-GPU box as NVML lists it (PCI bus order), with the UUIDs NVML prints.
NVML_UUIDS = [
    "GPU-aaaa0000-0000-0000-0000-000000000000",
    "GPU-bbbb1111-1111-1111-1111-111111111111",
    "GPU-cccc2222-2222-2222-2222-222222222222",
    "GPU-dddd3333-3333-3333-3333-333333333333",
]


def fake_nvml(uuids=NVML_UUIDS, *, as_bytes=False, fail=False):
    def get_count():
        if fail:
            raise RuntimeError("NVML_ERROR_UNKNOWN")
        return len(uuids)

    def get_uuid(handle):
        text = uuids[int(handle.removeprefix("h"))]
        return text.encode() if as_bytes else text

    return fake_module(
        nvmlDeviceGetCount=get_count,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetUUID=get_uuid,
    )


def torch_seeing(*nvml_positions):
    """torch's view after CUDA_VISIBLE_DEVICES picked these NVML GPUs, in this order."""
    visible = [normalize_uuid(NVML_UUIDS[i]) for i in nvml_positions]
    return lambda index: visible[index] if index < len(visible) else None


def test_torch_index_0_under_cuda_visible_devices_2_is_nvml_gpu_2():
    assert nvml_index(0, fake_nvml(), torch_uuid=torch_seeing(2), environ={}) == 2


def test_the_mapping_follows_uuids_whatever_the_order():
    # CUDA_VISIBLE_DEVICES=3,1 (or fastest-first ordering): torch 0 is NVML 3, torch 1 is NVML 1.
    assert nvml_index(0, fake_nvml(), torch_uuid=torch_seeing(3, 1), environ={}) == 3
    assert nvml_index(1, fake_nvml(), torch_uuid=torch_seeing(3, 1), environ={}) == 1


def test_old_pynvml_bytes_uuids_match_too():
    nvml = fake_nvml(as_bytes=True)
    assert nvml_index(0, nvml, torch_uuid=torch_seeing(1), environ={}) == 1


def test_a_torch_uuid_nvml_does_not_know_gives_no_handle():
    unknown = lambda index: "eeee4444-4444-4444-4444-444444444444"  # noqa: E731
    assert nvml_index(0, fake_nvml(), torch_uuid=unknown, environ={}) is None


def test_without_a_torch_uuid_a_uuid_in_cuda_visible_devices_is_used():
    env = {"CUDA_VISIBLE_DEVICES": "GPU-cccc2222,GPU-aaaa0000"}
    none = lambda index: None  # noqa: E731
    assert nvml_index(0, fake_nvml(), torch_uuid=none, environ=env) == 2
    assert nvml_index(1, fake_nvml(), torch_uuid=none, environ=env) == 0
    assert nvml_index(2, fake_nvml(), torch_uuid=none, environ=env) is None


def test_without_a_torch_uuid_indices_map_only_in_pci_bus_order():
    none = lambda index: None  # noqa: E731
    fastest_first = {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert nvml_index(0, fake_nvml(), torch_uuid=none, environ=fastest_first) is None
    pci = {"CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert nvml_index(1, fake_nvml(), torch_uuid=none, environ=pci) == 3
    assert nvml_index(1, fake_nvml(), torch_uuid=none, environ={}) is None
    assert nvml_index(0, fake_nvml(NVML_UUIDS[:1]), torch_uuid=none, environ={}) == 0


def test_an_nvml_failure_gives_no_handle():
    assert nvml_index(0, fake_nvml(fail=True), torch_uuid=torch_seeing(0), environ={}) is None


def test_nvidia_clocks_read_the_gpu_torch_names_not_the_same_number():
    read = []
    nvml = fake_module(
        **vars(fake_nvml()),
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetClockInfo=lambda h, kind: read.append(h) or 1000,
        NVML_CLOCK_SM="sm",
        NVML_CLOCK_MEM="mem",
    )
    state = noise.nvidia_clocks(0, nvml=nvml, torch_uuid=torch_seeing(2), environ={})
    assert state["gpu_nvml_index"] == 2
    assert state["gpu_sm_clock_hz"] == 1000 * 1_000_000
    assert set(read) == {"h2"}


def test_nvidia_clocks_without_a_mapping_read_nothing():
    nvml = fake_module(**vars(fake_nvml()), nvmlInit=lambda: None, nvmlShutdown=lambda: None)
    none = lambda index: None  # noqa: E731
    env = {"CUDA_VISIBLE_DEVICES": "1,2"}
    assert noise.nvidia_clocks(0, nvml=nvml, torch_uuid=none, environ=env) == {}


def test_uuids_compare_without_prefix_or_case():
    assert normalize_uuid("GPU-ABCD-12") == normalize_uuid("abcd-12") == "abcd-12"


def test_no_cuda_means_no_torch_uuid():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert gpuid.torch_cuda_uuid(0) is None


# --- fingerprints per device ---------------------------------------------------------------


def test_a_cpu_run_on_a_gpu_box_is_fingerprinted_without_the_gpu(monkeypatch):
    # Pretend a GPU is there: the default (no device) describes it, an explicit cpu does not.
    gpu = {
        "accelerator": "NVIDIA H100 80GB HBM3",
        "accelerator_memory_bytes": "85000000000",
        "accelerator_capability": "9.0",
        "accelerator_uuid": "aaaa0000",
        "driver": "550.54",
        "runtime": "cuda 12.4",
    }
    monkeypatch.setattr(fingerprint, "_default_device", lambda: torch.device("cuda", 0))
    monkeypatch.setattr(fingerprint, "_cuda_accelerator", lambda device: gpu)
    assert fingerprint.machine_fingerprint()["accelerator"] == gpu["accelerator"]
    cpu_only = fingerprint.machine_fingerprint(torch.device("cpu"))
    assert cpu_only["accelerator"] == "none"
    assert cpu_only["accelerator_uuid"] == "n/a"


def test_each_gpu_a_run_uses_gets_its_own_fingerprint(monkeypatch):
    names = {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA A100-SXM4-80GB"}

    def cuda_accelerator(device):
        index = 0 if device.index is None else device.index
        return {
            "accelerator": names[index],
            "accelerator_memory_bytes": "85000000000",
            "accelerator_capability": f"{8 + (index == 0)}.0",
            "accelerator_uuid": f"uuid-{index}",
            "driver": "550.54",
            "runtime": "cuda 12.4",
        }

    monkeypatch.setattr(fingerprint, "_cuda_accelerator", cuda_accelerator)
    monkeypatch.setattr(fingerprint, "device_unavailable_reason", lambda spec: None)
    found = fingerprint.device_fingerprints(["cuda", "cuda:1", "cpu", "cuda:1"])
    assert set(found) == {"cpu", "cuda", "cuda:1"}
    assert found["cuda"]["fingerprint"]["accelerator"] == names[0]
    assert found["cuda:1"]["fingerprint"]["accelerator"] == names[1]
    assert found["cpu"]["fingerprint"]["accelerator"] == "none"
    ids = {found[d]["fingerprint_id"] for d in found}
    assert len(ids) == 3  # three devices, three comparability ids
    assert found["cuda:1"]["hardware_id"] != found["cuda"]["hardware_id"]


def test_devices_this_machine_lacks_are_left_out():
    found = fingerprint.device_fingerprints(
        ["cpu"] + ([] if torch.cuda.is_available() else ["cuda:3"])
    )
    assert "cpu" in found
    assert "cuda:3" not in found


def load_root_conftest():
    path = Path(__file__).resolve().parents[3] / "conftest.py"
    spec = importlib.util.spec_from_file_location("phasebench_root_conftest_h4", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_machine_info_of_a_cpu_only_run_on_a_gpu_box_names_no_gpu(monkeypatch):
    monkeypatch.setattr(fingerprint, "_default_device", lambda: torch.device("cuda", 0))
    monkeypatch.setattr(
        fingerprint, "_cuda_accelerator", lambda device: pytest.fail("the GPU was fingerprinted")
    )
    hook = load_root_conftest().pytest_benchmark_update_machine_info
    # No accelerator cell, no matrix, no options given.
    config = SimpleNamespace(stash=pytest.Stash(), getoption=lambda name, default=None: default)
    machine_info = {}
    hook(config, machine_info)
    info = machine_info["phasebench"]
    assert info["fingerprint"]["accelerator"] == "none"
    assert info["devices"] == {}
    assert isinstance(info["slow_dtypes"], dict)
