"""The machine's peak memory bandwidth and matmul FLOP/s: measured, cached, or from a table.

Three ways to a `Peaks` value, each named in `Peaks.source` (DESIGN §3: never a guess):

* **measured** (`"measured:copy/matmul"`): on the device itself with torch. Bandwidth is a large
  device-to-device `copy_` counted as bytes read + bytes written per second (the STREAM "copy"
  convention; CPU write-allocate traffic is not added). FLOP/s is a large square matmul in the
  benchmark dtype, `2 n^3` per product. Both are synchronized (`device_sync` before and after
  each timed block), repeat the operation inside a block long enough to dwarf the timer, and
  keep the best of k blocks: a peak is the fastest the machine has been seen to go.
* **cached**: measured peaks are stored per machine fingerprint, device and dtype in a JSON file
  (`.phasebench/peaks.json` by default: beside the history folder, not in it) with
  `schema: 1`; other versions are refused with a fix.
* **table** (`"table:<name> (<source>)"`): vendor datasheet figures for known accelerators in
  `PEAK_TABLE`, each row naming its source. Apple publishes memory bandwidth but no GPU FP16
  FLOP/s, so Apple rows carry bandwidth only. Binned Apple parts whose bandwidth depends on the
  GPU core count (M3 Max, M4 Max) match only when the core count is known.

A measured peak is what the machine reaches, a table peak what the vendor promises; a
benchmark's "% of peak" is against whichever `source` says. When neither is available the
figures are None and the source is `"n/a"`.

This module does not decide *when* to measure (the suite calls `resolve_peaks` once per device
and dtype) and does not compute percentages (see `roofline.py`).
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import torch

from benchmarks.harness.devices import device_sync
from benchmarks.harness.errors import PhasebenchError

PEAKS_SCHEMA = 1
DEFAULT_PEAKS_PATH = Path(".phasebench") / "peaks.json"
MEASURED_SOURCE = "measured:copy/matmul"
NA_SOURCE = "n/a"

PeakMode = Literal["measured", "table", "none"]


class PeaksFileError(PhasebenchError):
    """The peaks cache file is unreadable or has an unknown schema."""


@dataclass(frozen=True)
class Peaks:
    """Peak FLOP/s (in one dtype) and memory bandwidth of one device, with their provenance.

    `cache_bytes` is the device's last-level cache size where known: a working set that fits in
    it is not bound by the DRAM bandwidth measured here (roofline.py uses it).
    """

    flop_per_s: float | None
    bandwidth_bytes_per_s: float | None
    source: str
    dtype: str
    cache_bytes: int | None = None

    @classmethod
    def unknown(cls, dtype: torch.dtype | str, cache_bytes: int | None = None) -> Peaks:
        """No peak known: every figure None, source "n/a"."""
        return cls(None, None, NA_SOURCE, _dtype_name(dtype), cache_bytes)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for the cache file and for extra_info."""
        return {
            "flop_per_s": self.flop_per_s,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "source": self.source,
            "dtype": self.dtype,
            "cache_bytes": self.cache_bytes,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Peaks:
        """Inverse of `to_json`."""
        return cls(
            flop_per_s=_opt_float(data.get("flop_per_s")),
            bandwidth_bytes_per_s=_opt_float(data.get("bandwidth_bytes_per_s")),
            source=str(data["source"]),
            dtype=str(data["dtype"]),
            cache_bytes=None if data.get("cache_bytes") is None else int(data["cache_bytes"]),
        )


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _dtype_name(dtype: torch.dtype | str) -> str:
    return dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")


# ---------------------------------------------------------------------------------------------
# Datasheet table

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


def lookup_table(
    device_name: str, dtype: torch.dtype | str, *, gpu_cores: int | None = None
) -> Peaks | None:
    """Datasheet peaks for an accelerator name, or None when no row matches.

    A row with `gpu_cores` matches only when `gpu_cores` is given and equal; the FLOP/s of a
    dtype without a published figure is None.
    """
    name = device_name.strip()
    dtype_name = _dtype_name(dtype)
    for entry in PEAK_TABLE:
        if not re.search(entry.pattern, name, flags=re.IGNORECASE):
            continue
        if entry.gpu_cores is not None and entry.gpu_cores != gpu_cores:
            continue
        return Peaks(
            flop_per_s=entry.flop_per_s.get(dtype_name),
            bandwidth_bytes_per_s=entry.bandwidth_bytes_per_s,
            source=f"table:{entry.name} ({entry.source})",
            dtype=dtype_name,
        )
    return None


# ---------------------------------------------------------------------------------------------
# Measurement


@dataclass(frozen=True)
class MeasurePolicy:
    """How hard to measure. Defaults per device type come from `for_device`."""

    copy_bytes: int  # size of each of the source and destination buffers
    matmul_n: int  # square matmul side
    repeats: int = 5  # blocks; the best one counts
    min_block_s: float = 0.05  # each block repeats the op until it lasts at least this long

    @classmethod
    def for_device(cls, device: torch.device) -> MeasurePolicy:
        """Buffers well past the last-level cache, matmuls big enough to saturate the units."""
        if device.type == "cuda":
            return cls(copy_bytes=1 << 30, matmul_n=8192)
        if device.type == "mps":
            return cls(copy_bytes=512 << 20, matmul_n=4096)
        return cls(copy_bytes=256 << 20, matmul_n=2048)


def _best_rate(
    op: Callable[[], object], work: float, device: torch.device, policy: MeasurePolicy
) -> float:
    """`work` units per second of `op`, best of `policy.repeats` synchronized blocks."""
    op()  # first call: allocation, kernel selection, lazy init
    device_sync(device)
    iterations = 1
    while True:  # calibrate: grow the block until it is long enough to time
        start = time.perf_counter()
        for _ in range(iterations):
            op()
        device_sync(device)
        elapsed = time.perf_counter() - start
        if elapsed >= policy.min_block_s or iterations >= 1 << 16:
            break
        iterations *= 2
    best = elapsed
    # A single op longer than a second (e.g. float16 matmul on a CPU without fp16 units) is
    # already far above timer noise: two more blocks bound the cost of a slow path.
    repeats = policy.repeats if elapsed < 1.0 else min(policy.repeats, 3)
    for _ in range(repeats - 1):
        start = time.perf_counter()
        for _ in range(iterations):
            op()
        device_sync(device)
        best = min(best, time.perf_counter() - start)
    return work * iterations / best


def measure_bandwidth(device: torch.device, policy: MeasurePolicy) -> float:
    """Bytes read + written per second by a large device-to-device copy."""
    elements = policy.copy_bytes // 4
    src = torch.ones(elements, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    nbytes = src.numel() * src.element_size()
    return _best_rate(lambda: dst.copy_(src), 2.0 * nbytes, device, policy)


def measure_matmul(device: torch.device, dtype: torch.dtype, policy: MeasurePolicy) -> float:
    """FLOP/s of an n x n by n x n matmul in `dtype` (2 n^3 FLOPs per product)."""
    n = policy.matmul_n
    generator = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    return _best_rate(lambda: torch.mm(a, b, out=out), 2.0 * n**3, device, policy)


def measure_peaks(
    device: torch.device, dtype: torch.dtype, policy: MeasurePolicy | None = None
) -> Peaks:
    """Measure bandwidth and matmul FLOP/s on `device` (seconds to tens of seconds)."""
    chosen = policy or MeasurePolicy.for_device(device)
    with torch.inference_mode():
        bandwidth = measure_bandwidth(device, chosen)
        flops = measure_matmul(device, dtype, chosen)
    return Peaks(
        flop_per_s=flops,
        bandwidth_bytes_per_s=bandwidth,
        source=MEASURED_SOURCE,
        dtype=_dtype_name(dtype),
        cache_bytes=last_level_cache_bytes(device),
    )


# ---------------------------------------------------------------------------------------------
# Device facts used by the table and the cache-residency rule


def last_level_cache_bytes(device: torch.device) -> int | None:
    """The device's last-level cache in bytes, or None where the OS/driver does not say."""
    if device.type == "cuda":
        size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None)
        return int(size) if size else None
    if device.type == "cpu":
        return _cpu_llc_bytes(Path("/sys/devices/system/cpu/cpu0/cache"))
    return None  # Apple does not publish its system-level cache sizes


def _cpu_llc_bytes(cache_dir: Path) -> int | None:
    """Largest unified/data cache level under Linux sysfs (`index*/size`, e.g. "32768K")."""
    best: tuple[int, int] | None = None
    for index in sorted(cache_dir.glob("index*")):
        try:
            level = int((index / "level").read_text().strip())
            kind = (index / "type").read_text().strip()
            size = _parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or size is None:
            continue
        if best is None or level > best[0]:
            best = (level, size)
    return None if best is None else best[1]


def _parse_size(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)\s*([KMG]?)B?", text, flags=re.IGNORECASE)
    if match is None:
        return None
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2).upper()]
    return int(match.group(1)) * scale


def accelerator_name(device: torch.device) -> str | None:
    """The name the table is keyed by: CUDA device name, or the Apple chip for MPS."""
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    if device.type == "mps" and platform.system() == "Darwin":
        return _run_text(["sysctl", "-n", "machdep.cpu.brand_string"])
    return None


def apple_gpu_cores() -> int | None:
    """Apple GPU core count from the IORegistry (`gpu-core-count`), None when unavailable."""
    text = _run_text(["ioreg", "-rc", "AGXAccelerator", "-d", "1"])
    if text is None:
        return None
    match = re.search(r'"gpu-core-count"\s*=\s*(\d+)', text)
    return int(match.group(1)) if match else None


def _run_text(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    out = done.stdout.strip()
    return out if done.returncode == 0 and out else None


# ---------------------------------------------------------------------------------------------
# Cache file


def load_peaks_file(path: Path) -> dict[str, Any]:
    """The cache file's entries (`{key: peaks json}`); empty when the file does not exist.

    Raises PeaksFileError for unreadable JSON or a schema other than PEAKS_SCHEMA.
    """
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise PeaksFileError(
            f"{path}: unreadable peaks cache ({error}); delete it and peaks will be remeasured."
        ) from error
    if not isinstance(data, dict) or data.get("schema") != PEAKS_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise PeaksFileError(
            f"{path}: peaks cache schema {found!r} is not {PEAKS_SCHEMA}; it was written by "
            "another phasebench version: delete it (peaks will be remeasured) or upgrade."
        )
    entries = data.get("entries", {})
    if not isinstance(entries, dict):
        raise PeaksFileError(f"{path}: `entries` is not an object; delete the file to remeasure.")
    return entries


def store_peaks(path: Path, key: str, peaks: Peaks, *, fingerprint: Mapping[str, str]) -> None:
    """Add or replace one entry and rewrite the file atomically (temp file + rename)."""
    entries = load_peaks_file(path)
    record = peaks.to_json()
    record["measured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    record["fingerprint"] = dict(fingerprint)
    entries[key] = record
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({"schema": PEAKS_SCHEMA, "entries": entries}, indent=2, sort_keys=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(payload + "\n")
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cache_key(fingerprint_id: str, device: torch.device, dtype: torch.dtype | str) -> str:
    """`<fingerprint id>/<device>/<dtype>`: peaks belong to one machine, device and dtype."""
    return f"{fingerprint_id}/{device}/{_dtype_name(dtype)}"


@dataclass(frozen=True)
class PeakRequest:
    """What `resolve_peaks` needs: the device and dtype, where to cache, and which source."""

    device: torch.device
    dtype: torch.dtype
    mode: PeakMode = "measured"
    cache_path: Path = DEFAULT_PEAKS_PATH
    fingerprint_id: str = "unknown"
    fingerprint: Mapping[str, str] = field(default_factory=dict)
    policy: MeasurePolicy | None = None
    refresh: bool = False  # measure even on a cache hit; the cache keeps the higher figures


def resolve_peaks(request: PeakRequest) -> Peaks:
    """Peaks for a device and dtype, by `request.mode`.

    * "measured": from the cache file when this fingerprint/device/dtype is there, else measured
      now and stored. With `refresh`, measured anyway and stored as the per-figure maximum of
      the cached and new values: a peak is the best the machine has shown, and a measurement
      taken while the machine was busy must not lower it. A CPU measurement started while the
      load average already reached the CPU count is used for this run but not cached.
    * "table": the datasheet row for the accelerator, else n/a (CPUs have no row).
    * "none": n/a.
    """
    if request.mode == "none":
        return Peaks.unknown(request.dtype)
    if request.mode == "table":
        name = accelerator_name(request.device)
        cores = apple_gpu_cores() if request.device.type == "mps" else None
        found = lookup_table(name, request.dtype, gpu_cores=cores) if name else None
        if found is None:
            return Peaks.unknown(request.dtype)
        return Peaks(
            found.flop_per_s,
            found.bandwidth_bytes_per_s,
            found.source,
            found.dtype,
            last_level_cache_bytes(request.device),
        )
    key = cache_key(request.fingerprint_id, request.device, request.dtype)
    entries = load_peaks_file(request.cache_path)
    cached = Peaks.from_json(entries[key]) if key in entries else None
    if cached is not None and not request.refresh:
        return cached
    busy = _cpu_busy() if request.device.type == "cpu" else False
    peaks = measure_peaks(request.device, request.dtype, request.policy)
    if busy:
        # Other work already occupied every CPU: this figure is a floor, fine for this run's
        # percentages but not a peak to keep (a cached low peak would later read as > 100 %).
        return peaks
    if cached is not None:
        peaks = Peaks(
            flop_per_s=_max_known(peaks.flop_per_s, cached.flop_per_s),
            bandwidth_bytes_per_s=_max_known(
                peaks.bandwidth_bytes_per_s, cached.bandwidth_bytes_per_s
            ),
            source=peaks.source,
            dtype=peaks.dtype,
            cache_bytes=peaks.cache_bytes,
        )
    store_peaks(request.cache_path, key, peaks, fingerprint=request.fingerprint)
    return peaks


def _cpu_busy() -> bool:
    """True when the 1-minute load average already reaches the CPU count (Unix only)."""
    try:
        load_1min = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows, or no load average available
        return False
    return load_1min >= (os.cpu_count() or 1)


def _max_known(a: float | None, b: float | None) -> float | None:
    known = [v for v in (a, b) if v is not None]
    return max(known) if known else None
