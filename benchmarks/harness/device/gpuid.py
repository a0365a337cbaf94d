"""Which physical GPU a torch CUDA index names, and its NVML handle.

torch numbers the GPUs it can see: after `CUDA_VISIBLE_DEVICES` (a list of indices or UUIDs)
and in `CUDA_DEVICE_ORDER` (by default "fastest first"). NVML numbers every GPU of the machine in
PCI bus order and ignores both. So `nvmlDeviceGetHandleByIndex(torch_index)` can read another
GPU's clocks. The mapping here goes through the GPU's UUID, which both sides report:

1. torch's `get_device_properties(i).uuid` (torch >= 2.0 on CUDA) matched against
   `nvmlDeviceGetUUID` of every NVML device (`GPU-` prefix and case ignored);
2. without a torch UUID: the i-th entry of `CUDA_VISIBLE_DEVICES` when it is a UUID (or an
   unambiguous UUID prefix), or an index while `CUDA_DEVICE_ORDER=PCI_BUS_ID` (NVML's order);
3. otherwise no handle: no reading is better than another GPU's.

It does not read anything from the GPU itself beyond the handle (noise.py does), and it does
not import pynvml (the caller passes the module).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import torch


def normalize_uuid(text: str) -> str:
    """`GPU-58E7...` / `58e7...` -> `58e7...`: the form both torch and NVML can be compared in."""
    value = text.strip().lower()
    return value.removeprefix("gpu-")


def torch_cuda_uuid(index: int) -> str | None:
    """The UUID torch reports for CUDA device `index` (normalized), None where it has none."""
    try:
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    except (RuntimeError, AssertionError, ValueError):
        return None
    text = str(uuid) if uuid is not None else ""
    return normalize_uuid(text) or None


def nvml_index(
    torch_index: int,
    nvml: Any,
    *,
    torch_uuid: Callable[[int], str | None] = torch_cuda_uuid,
    environ: Mapping[str, str] | None = None,
) -> int | None:
    """The NVML index of torch's CUDA device `torch_index`, or None when it cannot be known.

    `nvml` is an initialised pynvml-like module; `torch_uuid` and `environ` are injectable for
    tests. Any NVML error while listing devices means None.
    """
    env = os.environ if environ is None else environ
    try:
        uuids = _nvml_uuids(nvml)
    except Exception:  # any NVML failure means "no mapping", never a crash
        return None
    wanted = torch_uuid(torch_index)
    if wanted is not None:
        return uuids.index(wanted) if wanted in uuids else None
    return _from_environment(torch_index, uuids, env)


def _from_environment(torch_index: int, uuids: list[str], env: Mapping[str, str]) -> int | None:
    """The fallback without a torch UUID: `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER`."""
    pci_order = env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        # torch sees every GPU: its order is NVML's only in PCI bus order, or with one GPU.
        if pci_order or len(uuids) == 1:
            return torch_index if torch_index < len(uuids) else None
        return None
    if torch_index >= len(visible):
        return None
    entry = visible[torch_index]
    if entry.isdigit():
        return int(entry) if pci_order and int(entry) < len(uuids) else None
    prefix = normalize_uuid(entry)
    matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(prefix)]
    return matches[0] if len(matches) == 1 else None


def _nvml_uuids(nvml: Any) -> list[str]:
    uuids = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        raw = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index))
        text = raw.decode() if isinstance(raw, bytes) else str(raw)  # old pynvml returns bytes
        uuids.append(normalize_uuid(text))
    return uuids
