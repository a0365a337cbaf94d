"""Peaks: datasheet lookups, on-device measurement, and the versioned per-machine cache file."""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks.harness import peaks as peaks_module
from benchmarks.harness.peaks import (
    MEASURED_SOURCE,
    PEAK_TABLE,
    PEAKS_SCHEMA,
    MeasurePolicy,
    PeakRequest,
    Peaks,
    PeaksFileError,
    cache_key,
    load_peaks_file,
    lookup_table,
    measure_peaks,
    resolve_peaks,
    store_peaks,
)

CPU = torch.device("cpu")
SMALL = MeasurePolicy(copy_bytes=1 << 20, matmul_n=64, repeats=2, min_block_s=0.001)


@pytest.mark.parametrize(
    ("device_name", "row", "bf16_tflops", "bandwidth_gbs"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", 989.4, 3350),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 756.0, 2000),
        ("NVIDIA H200", "NVIDIA H200 SXM", 989.4, 4800),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM", 312, 2039),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 40GB SXM", 312, 1555),
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe", 312, 1935),
        ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 40GB PCIe", 312, 1555),
        ("NVIDIA L4", "NVIDIA L4", 121.0, 300),
    ],
)
def test_nvidia_device_names_map_to_dense_datasheet_figures(
    device_name, row, bf16_tflops, bandwidth_gbs
):
    found = lookup_table(device_name, torch.bfloat16)
    assert found is not None
    assert found.source.startswith(f"table:{row} (")
    assert found.flop_per_s == pytest.approx(bf16_tflops * 1e12)
    assert found.bandwidth_bytes_per_s == pytest.approx(bandwidth_gbs * 1e9)


def test_t4_has_fp16_but_no_bf16_figure():
    assert lookup_table("Tesla T4", torch.float16).flop_per_s == pytest.approx(65e12)
    t4_bf16 = lookup_table("Tesla T4", torch.bfloat16)
    assert t4_bf16.flop_per_s is None
    assert t4_bf16.bandwidth_bytes_per_s == pytest.approx(320e9)


def test_float32_has_no_table_flops():
    assert lookup_table("NVIDIA H100 80GB HBM3", torch.float32).flop_per_s is None


@pytest.mark.parametrize(
    ("chip", "cores", "bandwidth_gbs"),
    [
        ("Apple M1", None, 68.25),
        ("Apple M1 Max", None, 400),
        ("Apple M2 Ultra", None, 800),
        ("Apple M3 Pro", None, 150),
        ("Apple M3 Max", 30, 300),
        ("Apple M3 Max", 40, 400),
        ("Apple M4", None, 120),
        ("Apple M4 Pro", None, 273),
        ("Apple M4 Max", 32, 410),
        ("Apple M4 Max", 40, 546),
    ],
)
def test_apple_chips_carry_bandwidth_and_no_flops(chip, cores, bandwidth_gbs):
    found = lookup_table(chip, torch.float16, gpu_cores=cores)
    assert found is not None
    assert found.bandwidth_bytes_per_s == pytest.approx(bandwidth_gbs * 1e9)
    assert found.flop_per_s is None


def test_binned_apple_parts_need_the_gpu_core_count():
    assert lookup_table("Apple M4 Max", torch.float16) is None
    assert lookup_table("Apple M4 Max", torch.float16, gpu_cores=36) is None


def test_unknown_devices_and_lookalikes_have_no_row():
    assert lookup_table("AMD EPYC", torch.float32) is None
    assert lookup_table("NVIDIA GH200 480GB", torch.bfloat16) is None  # not the H200 row
    assert lookup_table("Apple M4 Pro Max", torch.float16) is None


def test_every_table_row_names_its_source():
    assert all(entry.source and entry.bandwidth_bytes_per_s > 0 for entry in PEAK_TABLE)


def test_measured_peaks_on_cpu_are_positive_and_labelled():
    measured = measure_peaks(CPU, torch.float32, SMALL)
    assert measured.source == MEASURED_SOURCE
    assert measured.dtype == "float32"
    assert measured.flop_per_s is not None
    assert math.isfinite(measured.flop_per_s)
    assert measured.flop_per_s > 0
    assert measured.bandwidth_bytes_per_s is not None
    assert measured.bandwidth_bytes_per_s > 0


def test_cache_round_trip_keeps_every_field(tmp_path):
    path = tmp_path / "peaks.json"
    stored = Peaks(1.5e11, 4.5e10, MEASURED_SOURCE, "bfloat16", 32 << 20)
    key = cache_key("ab12cd34", CPU, torch.bfloat16)
    store_peaks(path, key, stored, fingerprint={"cpu": "AMD EPYC"})
    data = json.loads(path.read_text())
    assert data["schema"] == PEAKS_SCHEMA
    assert data["entries"][key]["fingerprint"] == {"cpu": "AMD EPYC"}
    assert Peaks.from_json(load_peaks_file(path)[key]) == stored
    assert key == "ab12cd34/cpu/bfloat16"


def test_unknown_schema_is_refused_with_a_fix(tmp_path):
    path = tmp_path / "peaks.json"
    path.write_text(json.dumps({"schema": 2, "entries": {}}))
    with pytest.raises(PeaksFileError, match=r"schema 2.*delete it"):
        load_peaks_file(path)


def test_corrupt_cache_file_is_refused_with_a_fix(tmp_path):
    path = tmp_path / "peaks.json"
    path.write_text("{not json")
    with pytest.raises(PeaksFileError, match="delete it"):
        load_peaks_file(path)


def test_resolve_measures_once_then_reads_the_cache(tmp_path, monkeypatch):
    calls = []

    def fake_measure(device, dtype, policy):
        calls.append((device, dtype))
        return Peaks(2e11, 5e10, MEASURED_SOURCE, "float32", None)

    monkeypatch.setattr(peaks_module, "measure_peaks", fake_measure)
    monkeypatch.setattr(peaks_module, "_cpu_busy", lambda: False)
    request = PeakRequest(CPU, torch.float32, cache_path=tmp_path / "p.json", fingerprint_id="m1")
    first = resolve_peaks(request)
    second = resolve_peaks(request)
    assert first == second
    assert len(calls) == 1
    other_machine = PeakRequest(
        CPU, torch.float32, cache_path=tmp_path / "p.json", fingerprint_id="m2"
    )
    resolve_peaks(other_machine)
    assert len(calls) == 2


def test_resolve_modes_without_a_known_peak_are_na():
    assert resolve_peaks(PeakRequest(CPU, torch.float32, mode="none")).source == "n/a"
    table = resolve_peaks(PeakRequest(CPU, torch.float32, mode="table"))
    assert (table.source, table.flop_per_s, table.bandwidth_bytes_per_s) == ("n/a", None, None)


def test_cpu_last_level_cache_is_read_from_sysfs(tmp_path):
    for index, (level, kind, size) in enumerate(
        [
            (1, "Data", "32K"),
            (1, "Instruction", "32K"),
            (2, "Unified", "1024K"),
            (3, "Unified", "32768K"),
        ]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    assert peaks_module._cpu_llc_bytes(tmp_path) == 32 << 20
    assert peaks_module._cpu_llc_bytes(tmp_path / "missing") is None


def test_refresh_remeasures_and_never_lowers_a_cached_peak(tmp_path, monkeypatch):
    readings = iter(
        [
            Peaks(2e11, 5e10, MEASURED_SOURCE, "float32"),
            Peaks(1e11, 6e10, MEASURED_SOURCE, "float32"),
        ]
    )
    monkeypatch.setattr(peaks_module, "measure_peaks", lambda device, dtype, policy: next(readings))
    monkeypatch.setattr(peaks_module, "_cpu_busy", lambda: False)
    path = tmp_path / "p.json"
    resolve_peaks(PeakRequest(CPU, torch.float32, cache_path=path))
    refreshed = resolve_peaks(PeakRequest(CPU, torch.float32, cache_path=path, refresh=True))
    assert (refreshed.flop_per_s, refreshed.bandwidth_bytes_per_s) == (2e11, 6e10)
    assert resolve_peaks(PeakRequest(CPU, torch.float32, cache_path=path)) == refreshed


def test_a_cpu_measured_while_busy_is_used_but_not_cached(tmp_path, monkeypatch):
    reading = Peaks(1e10, 1e9, MEASURED_SOURCE, "float32")
    monkeypatch.setattr(peaks_module, "measure_peaks", lambda device, dtype, policy: reading)
    monkeypatch.setattr(peaks_module, "_cpu_busy", lambda: True)
    path = tmp_path / "p.json"
    assert resolve_peaks(PeakRequest(CPU, torch.float32, cache_path=path)) == reading
    assert not path.exists()
