"""Spec of benchmarks/harness/device/freemem.py: free bytes per device and where they come from.

CUDA and MPS are fakes of torch's entry points (test names say `fake`): this machine has neither.
"""

from __future__ import annotations

from types import SimpleNamespace

import psutil
import pytest
import torch

from benchmarks.harness.device import freemem
from benchmarks.harness.device.freemem import free_memory
from benchmarks.harness.errors import DeviceError


def test_cuda_free_memory_is_mem_get_info_of_the_cells_gpu_fake(monkeypatch):
    asked = []

    def mem_get_info(index):
        asked.append(index)
        return 15_200_000_000, 24_000_000_000

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    found = free_memory("cuda:1")
    assert (found.device, found.free_bytes, found.source) == (
        "cuda:1",
        15_200_000_000,
        "mem_get_info",
    )
    # `cuda` without an index is the current device, named with its index in reasons.
    assert free_memory("cuda").device == "cuda:0"
    assert asked == [1, 0]


def test_mps_free_memory_is_the_working_set_less_what_the_driver_holds_fake(monkeypatch):
    # The driver's cached blocks count against the working set, not only live tensors.
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 16_000_000_000, raising=False)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 1_000_000_000)
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: 200_000_000)
    monkeypatch.setattr(
        freemem.psutil, "virtual_memory", lambda: SimpleNamespace(available=20_000_000_000)
    )
    found = free_memory("mps")
    assert found.free_bytes == 15_000_000_000 - 1_600_000_000  # less 10 % of the working set
    assert found.source == (
        "min(recommended_max_memory - driver_allocated_memory, available RAM) - "
        "10% of the working set"
    )


def test_mps_free_memory_is_capped_by_the_ram_other_apps_left_fake(monkeypatch):
    """Issue 30 row 10: a 24 GB Mac with a browser open has less than its working set free."""
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 17_000_000_000, raising=False)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 0)
    monkeypatch.setattr(
        freemem.psutil, "virtual_memory", lambda: SimpleNamespace(available=12_000_000_000)
    )
    found = free_memory("mps")
    assert found.free_bytes == 12_000_000_000 - 1_700_000_000
    # An 8B float16 model's weights alone (16.06 GB) no longer "fit".
    assert found.free_bytes < 16_060_000_000


def test_an_old_torch_without_a_working_set_size_says_unknown_and_why_fake(monkeypatch):
    monkeypatch.delattr(torch.mps, "recommended_max_memory", raising=False)
    found = free_memory("mps")
    assert found.free_bytes is None
    assert "recommended_max_memory (>= 2.5)" in found.source


def test_cpu_free_memory_is_available_ram(monkeypatch):
    monkeypatch.setattr(
        freemem.psutil, "virtual_memory", lambda: SimpleNamespace(available=7_000_000_000)
    )
    found = free_memory("cpu")
    assert (found.device, found.free_bytes, found.source) == ("cpu", 7_000_000_000, "available RAM")


def test_cpu_free_memory_reads_this_machine():
    found = free_memory("cpu")
    assert found.free_bytes is not None
    assert 0 < found.free_bytes <= psutil.virtual_memory().total


def test_an_unknown_device_is_refused():
    with pytest.raises(DeviceError, match="cpu, cuda, cuda:N"):
        free_memory("tpu")


def test_a_gpu_too_full_for_a_context_says_unknown_instead_of_crashing_collection_fake(
    monkeypatch,
):
    def mem_get_info(index):
        raise RuntimeError("CUDA error: out of memory\nmore lines")

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    found = free_memory("cuda:0")
    assert found.free_bytes is None
    assert found.source == "mem_get_info failed: CUDA error: out of memory"
