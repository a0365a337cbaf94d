"""The machine's peak memory bandwidth and F.linear FLOP/s: measured, cached, or from a table.

Three ways to a `Peaks` value, each named in `Peaks.source` (DESIGN §3: never a guess):

* **measured** (`"measured:copy/linear"`): on the device itself with torch, within a time
  budget (`peakmeasure.py`): bandwidth is a large device-to-device `copy_`, FLOP/s the best
  `F.linear` rate over a few model-like shapes, the op and weight layout the model runs, also
  at as many rows as the largest prefill it serves (`PeakRequest.flop_tokens`, B·P).
* **cached**: measured peaks are stored per machine fingerprint, device and dtype in a JSON file
  (`.phasebench/peaks.json` by default: beside the history folder, not in it) with
  `schema: 1`; other versions are refused with a fix. An entry measured by another method (an
  older `measured:copy/matmul`), or planned for fewer rows than this run's shapes
  (`planned_flop_tokens`), is not trusted: it is measured again (the larger figures kept).
* **table** (`"table:<name> (<source>)"`): vendor datasheet figures for known accelerators
  (`peaktable.PEAK_TABLE`, each row naming its source).

A measured peak is the fastest the machine has been seen to go: a re-measure keeps the larger of
the new, the cached and this run's earlier figure, and a CPU measurement during which other
processes kept a quarter or more of this process's CPUs busy is used for the run but never
cached (`cpustate.CpuUseMeter`; the suite's own threads do not count). When no peak is known
the figures are None and the source is `"n/a"`.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import torch

from benchmarks.harness.device.cpustate import CpuUse, CpuUseMeter, last_level_cache
from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.roofline import peakmeasure
from benchmarks.harness.roofline.peakmeasure import MeasurePolicy
from benchmarks.harness.roofline.peaktable import PEAK_TABLE, TableEntry, lookup_entry

__all__ = [
    "DEFAULT_PEAKS_PATH",
    "MEASURED_SOURCE",
    "NA_SOURCE",
    "PEAKS_SCHEMA",
    "PEAK_TABLE",
    "MeasurePolicy",
    "PeakRequest",
    "Peaks",
    "PeaksFileError",
    "TableEntry",
    "cache_key",
    "last_level_cache_bytes",
    "load_peaks_file",
    "lookup_table",
    "measure_peaks",
    "resolve_peaks",
    "store_peaks",
]

PEAKS_SCHEMA = 1
DEFAULT_PEAKS_PATH = Path(".phasebench") / "peaks.json"
MEASURED_SOURCE = "measured:copy/linear"
NA_SOURCE = "n/a"
BUSY_FRACTION = 0.25
"""Other processes using this share of our CPUs during a measurement make it uncacheable."""

PeakMode = Literal["measured", "table", "none"]


class PeaksFileError(PhasebenchError):
    """The peaks cache file is unreadable or has an unknown schema."""


@dataclass(frozen=True)
class Peaks:
    """Peak FLOP/s (in one dtype) and memory bandwidth of one device, with their provenance.

    `cache_bytes` is the device's last-level cache size where known: a working set that fits in
    it is not bound by the DRAM bandwidth measured here (roofline.py uses it). `flop_tokens`:
    the most rows (tokens) of an F.linear shape behind a measured FLOP/s (None: a table row,
    or an entry cached before it was recorded).
    """

    flop_per_s: float | None
    bandwidth_bytes_per_s: float | None
    source: str
    dtype: str
    cache_bytes: int | None = None
    flop_tokens: int | None = None

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
            "flop_tokens": self.flop_tokens,
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
            flop_tokens=None if data.get("flop_tokens") is None else int(data["flop_tokens"]),
        )


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _dtype_name(dtype: torch.dtype | str) -> str:
    return dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")


# ---------------------------------------------------------------------------------------------
# Datasheet table


def lookup_table(
    device_name: str, dtype: torch.dtype | str, *, gpu_cores: int | None = None
) -> Peaks | None:
    """Datasheet peaks for an accelerator name, or None when no row matches.

    A row with `gpu_cores` matches only when `gpu_cores` is given and equal; the FLOP/s of a
    dtype without a published figure is None.
    """
    entry = lookup_entry(device_name, gpu_cores=gpu_cores)
    if entry is None:
        return None
    dtype_name = _dtype_name(dtype)
    return Peaks(
        flop_per_s=entry.flop_per_s.get(dtype_name),
        bandwidth_bytes_per_s=entry.bandwidth_bytes_per_s,
        source=f"table:{entry.name} ({entry.source})",
        dtype=dtype_name,
    )


# ---------------------------------------------------------------------------------------------
# Measurement


def measure_peaks(
    device: torch.device, dtype: torch.dtype, policy: MeasurePolicy | None = None
) -> Peaks:
    """Measure bandwidth and F.linear FLOP/s on `device`, within the policy's time budget."""
    measured = peakmeasure.measure(device, dtype, policy)
    return Peaks(
        flop_per_s=measured.flop_per_s,
        bandwidth_bytes_per_s=measured.bandwidth_bytes_per_s,
        source=MEASURED_SOURCE,
        dtype=_dtype_name(dtype),
        cache_bytes=last_level_cache_bytes(device),
        flop_tokens=measured.flop_tokens,
    )


def last_level_cache_bytes(device: torch.device) -> int | None:
    """The device's last-level cache in bytes, or None where the OS/driver does not say.

    CPU: the sum of the distinct last-level instances over the CPUs this process may run on
    (`cpustate.last_level_cache`); CUDA: the device's L2; Apple publishes no system cache size.
    """
    if device.type == "cuda":
        size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None)
        return int(size) if size else None
    if device.type == "cpu":
        found = last_level_cache()
        return None if found is None else found.total_bytes
    return None


# ---------------------------------------------------------------------------------------------
# Device facts used by the table


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


def store_peaks(
    path: Path,
    key: str,
    peaks: Peaks,
    *,
    fingerprint: Mapping[str, str],
    planned_flop_tokens: int | None = None,
) -> None:
    """Add or replace one entry and rewrite the file atomically (temp file + rename), with
    the most rows its shapes offered (`MeasurePolicy.planned_tokens`): a run planning more
    measures again."""
    entries = load_peaks_file(path)
    record = peaks.to_json()
    record["measured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    record["fingerprint"] = dict(fingerprint)
    record["planned_flop_tokens"] = planned_flop_tokens
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
    """What `resolve_peaks` needs: the device and dtype, where to cache, and which source.

    `previous` is this run's earlier figure for the same device and dtype (a re-measure passes
    it), so that a re-measure can only raise the peak the run uses.
    """

    device: torch.device
    dtype: torch.dtype
    mode: PeakMode = "measured"
    cache_path: Path = DEFAULT_PEAKS_PATH
    fingerprint_id: str = "unknown"
    fingerprint: Mapping[str, str] = field(default_factory=dict)
    policy: MeasurePolicy | None = None
    refresh: bool = False  # measure even on a cache hit; the cache keeps the higher figures
    previous: Peaks | None = None
    # The largest prefill GEMM (B·P tokens) of the cells the peak serves; None: the device's
    # default shapes. Ignored with an explicit `policy`.
    flop_tokens: int | None = None


def resolve_peaks(request: PeakRequest) -> Peaks:
    """Peaks for a device and dtype, by `request.mode`.

    * "measured": from the cache file when this fingerprint/device/dtype is there (measured by
      this method, with shapes reaching this run's `policy.planned_tokens`), else measured and
      stored. With `refresh`, measured anyway.
      Either way the result is the per-figure maximum of the new, the cached and
      `request.previous` figures: a peak is the best the machine has shown, and a measurement
      taken while the machine was busy must not lower it. A CPU measurement during which other
      processes used `BUSY_FRACTION` or more of this process's CPUs is used for this run but
      not cached.
    * "table": the datasheet row for the accelerator, else n/a (CPUs have no row).
    * "none": n/a.
    """
    if request.mode == "none":
        return Peaks.unknown(request.dtype)
    if request.mode == "table":
        return _table_peaks(request)
    key = cache_key(request.fingerprint_id, request.device, request.dtype)
    entries = load_peaks_file(request.cache_path)
    policy = request.policy or MeasurePolicy.for_device(request.device, request.flop_tokens)
    planned = policy.planned_tokens
    cached, cached_planned = None, 0
    if key in entries and entries[key].get("source") == MEASURED_SOURCE:
        cached = Peaks.from_json(entries[key])
        cached_planned = int(entries[key].get("planned_flop_tokens") or 0)
    if cached is not None and cached_planned >= planned and not request.refresh:
        return _keep_larger(cached, request.previous)
    if request.device.type == "cpu":
        meter = CpuUseMeter()
        meter.start()
        fresh = measure_peaks(request.device, request.dtype, policy)
        busy = _cpu_busy(meter.stop())
    else:
        fresh = measure_peaks(request.device, request.dtype, policy)
        busy = False
    best = _keep_larger(_keep_larger(fresh, cached), request.previous)
    if not busy:
        store_peaks(
            request.cache_path,
            key,
            best,
            fingerprint=request.fingerprint,
            planned_flop_tokens=max(planned, cached_planned),
        )
    # Busy: other work shared the CPUs, so the fresh figure is a floor: fine for this run's
    # percentages (as the larger of it and what is known), but not a peak to keep.
    return best


def _cpu_busy(use: CpuUse) -> bool:
    """True when other processes used `BUSY_FRACTION` or more of our CPUs while we measured."""
    return use.others_fraction >= BUSY_FRACTION


def _table_peaks(request: PeakRequest) -> Peaks:
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


def _keep_larger(peaks: Peaks, other: Peaks | None) -> Peaks:
    """Per-figure maximum of two measured peaks of one device and dtype (`peaks` if no other)."""
    if other is None:
        return peaks
    return Peaks(
        flop_per_s=_max_known(peaks.flop_per_s, other.flop_per_s),
        bandwidth_bytes_per_s=_max_known(peaks.bandwidth_bytes_per_s, other.bandwidth_bytes_per_s),
        source=peaks.source,
        dtype=peaks.dtype,
        cache_bytes=peaks.cache_bytes,
        flop_tokens=max((t for t in (peaks.flop_tokens, other.flop_tokens) if t), default=None),
    )


def _max_known(a: float | None, b: float | None) -> float | None:
    known = [v for v in (a, b) if v is not None]
    return max(known) if known else None
