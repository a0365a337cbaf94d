"""Vendor datasheet peaks for known accelerators (`PEAK_TABLE`), each row naming its source.

NVIDIA rows carry dense FP16/BF16 tensor FLOP/s and memory bandwidth; Apple publishes memory
bandwidth but no GPU FP16 FLOP/s, so Apple rows carry bandwidth only. Binned Apple parts whose
bandwidth depends on the GPU core count (M3 Max, M4 Max) match only when the core count is known.

This module only holds and matches the rows; `peaks.lookup_table` turns a row into `Peaks`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_TB = 1e12
_GB = 1e9
_NVIDIA_A100 = "NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4)"
_NVIDIA_H100 = "NVIDIA H100 Tensor Core GPU datasheet"
_NVIDIA_H200 = "NVIDIA H200 Tensor Core GPU datasheet"
_NVIDIA_L4 = "NVIDIA L4 Tensor Core GPU datasheet"
_NVIDIA_T4 = "NVIDIA T4 Tensor Core GPU datasheet"


@dataclass(frozen=True)
class TableEntry:
    """One accelerator's datasheet peaks.

    FLOP/s are *dense* (NVIDIA datasheets print FP16/BF16 tensor figures "with sparsity", twice
    the dense rate; the rows below are halved accordingly) and keyed by dtype name; a dtype
    missing from `flop_per_s` has no published figure (T4 has no BF16; Apple publishes none).
    """

    name: str
    pattern: str  # regex, case-insensitive, matched with re.search against the device name
    bandwidth_bytes_per_s: float
    source: str
    flop_per_s: Mapping[str, float] = field(default_factory=dict)
    gpu_cores: int | None = None  # Apple binned parts: the GPU core count that selects the row


def _half(tflops: float) -> dict[str, float]:
    return {"float16": tflops * _TB, "bfloat16": tflops * _TB}


# Order matters: the first row whose pattern (and GPU core count) matches wins.
PEAK_TABLE: tuple[TableEntry, ...] = (
    # NVIDIA data-centre GPUs; names as torch.cuda.get_device_name() prints them.
    TableEntry("NVIDIA H200 NVL", r"H200 NVL", 4.8 * _TB, _NVIDIA_H200),  # FLOP/s not confirmed
    TableEntry("NVIDIA H200 SXM", r"\bH200\b", 4.8 * _TB, _NVIDIA_H200, _half(989.4)),
    TableEntry("NVIDIA H100 PCIe", r"H100.*PCIe", 2.0 * _TB, _NVIDIA_H100, _half(756.0)),
    TableEntry("NVIDIA H100 SXM", r"H100.*(SXM|HBM3)", 3.35 * _TB, _NVIDIA_H100, _half(989.4)),
    TableEntry("NVIDIA A100 80GB SXM", r"A100.*SXM.*80GB", 2.039 * _TB, _NVIDIA_A100, _half(312)),
    TableEntry("NVIDIA A100 40GB SXM", r"A100.*SXM.*40GB", 1.555 * _TB, _NVIDIA_A100, _half(312)),
    TableEntry("NVIDIA A100 80GB PCIe", r"A100.*80GB.*PCIe", 1.935 * _TB, _NVIDIA_A100, _half(312)),
    TableEntry("NVIDIA A100 40GB PCIe", r"A100.*PCIe.*40GB", 1.555 * _TB, _NVIDIA_A100, _half(312)),
    TableEntry("NVIDIA L4", r"^NVIDIA L4$", 300 * _GB, _NVIDIA_L4, _half(121.0)),
    TableEntry("NVIDIA T4", r"\bT4\b", 320 * _GB, _NVIDIA_T4, {"float16": 65 * _TB}),
    # Apple silicon: unified-memory bandwidth from Apple's announcements and tech specs. Names as
    # `sysctl -n machdep.cpu.brand_string` prints them.
    TableEntry(
        "Apple M1",
        r"^Apple M1$",
        68.25 * _GB,
        "Apple publishes no M1 figure; LPDDR4X-4266 x 128-bit per AnandTech's M1 review",
    ),
    TableEntry("Apple M1 Pro", r"^Apple M1 Pro$", 200 * _GB, "Apple newsroom, M1 Pro/Max, 2021"),
    TableEntry("Apple M1 Max", r"^Apple M1 Max$", 400 * _GB, "Apple newsroom, M1 Pro/Max, 2021"),
    TableEntry("Apple M1 Ultra", r"^Apple M1 Ultra$", 800 * _GB, "Apple newsroom, M1 Ultra, 2022"),
    TableEntry("Apple M2", r"^Apple M2$", 100 * _GB, "Apple newsroom, M2, 2022"),
    TableEntry("Apple M2 Pro", r"^Apple M2 Pro$", 200 * _GB, "Apple newsroom, M2 Pro/Max, 2023"),
    TableEntry("Apple M2 Max", r"^Apple M2 Max$", 400 * _GB, "Apple newsroom, M2 Pro/Max, 2023"),
    TableEntry("Apple M2 Ultra", r"^Apple M2 Ultra$", 800 * _GB, "Apple newsroom, M2 Ultra, 2023"),
    TableEntry("Apple M3", r"^Apple M3$", 100 * _GB, "Apple MacBook Pro (M3) tech specs, 2023"),
    TableEntry("Apple M3 Pro", r"^Apple M3 Pro$", 150 * _GB, "Apple MacBook Pro tech specs, 2023"),
    TableEntry(
        "Apple M3 Max (30-core GPU)",
        r"^Apple M3 Max$",
        300 * _GB,
        "Apple MacBook Pro tech specs, 2023",
        gpu_cores=30,
    ),
    TableEntry(
        "Apple M3 Max (40-core GPU)",
        r"^Apple M3 Max$",
        400 * _GB,
        "Apple MacBook Pro tech specs, 2023",
        gpu_cores=40,
    ),
    TableEntry(
        "Apple M3 Ultra", r"^Apple M3 Ultra$", 819 * _GB, "Apple Mac Studio tech specs, 2025"
    ),
    TableEntry("Apple M4", r"^Apple M4$", 120 * _GB, "Apple newsroom, M4, 2024"),
    TableEntry("Apple M4 Pro", r"^Apple M4 Pro$", 273 * _GB, "Apple newsroom, M4 Pro/Max, 2024"),
    TableEntry(
        "Apple M4 Max (32-core GPU)",
        r"^Apple M4 Max$",
        410 * _GB,
        "Apple MacBook Pro tech specs, 2024",
        gpu_cores=32,
    ),
    TableEntry(
        "Apple M4 Max (40-core GPU)",
        r"^Apple M4 Max$",
        546 * _GB,
        "Apple newsroom, M4 Pro/Max, 2024",
        gpu_cores=40,
    ),
)


def lookup_entry(device_name: str, *, gpu_cores: int | None = None) -> TableEntry | None:
    """The first row matching `device_name` (and `gpu_cores` for binned parts), or None.

    A row with `gpu_cores` matches only when `gpu_cores` is given and equal.
    """
    name = device_name.strip()
    for entry in PEAK_TABLE:
        if not re.search(entry.pattern, name, flags=re.IGNORECASE):
            continue
        if entry.gpu_cores is not None and entry.gpu_cores != gpu_cores:
            continue
        return entry
    return None
