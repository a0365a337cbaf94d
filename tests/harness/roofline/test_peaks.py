"""Peaks: datasheet lookups, on-device measurement, and the versioned per-machine cache file."""

from __future__ import annotations

import json
import math
import time
import weakref

import pytest
import torch

from benchmarks.harness.device.cpustate import CpuUse
from benchmarks.harness.roofline import peakmeasure
from benchmarks.harness.roofline import peaks as peaks_module
from benchmarks.harness.roofline.peaks import (
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
SMALL = MeasurePolicy(
    copy_bytes=1 << 20,
    linear_shapes=((32, 64, 64), (32, 64, 128)),
    budget_s=5.0,
    repeats=2,
    min_block_s=0.001,
)


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
    monkeypatch.setattr(peaks_module, "_cpu_busy", lambda use: False)
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


def test_refresh_remeasures_and_never_lowers_a_cached_peak(tmp_path, monkeypatch):
    readings = iter(
        [
            Peaks(2e11, 5e10, MEASURED_SOURCE, "float32"),
            Peaks(1e11, 6e10, MEASURED_SOURCE, "float32"),
        ]
    )
    monkeypatch.setattr(peaks_module, "measure_peaks", lambda device, dtype, policy: next(readings))
    monkeypatch.setattr(peaks_module, "_cpu_busy", lambda use: False)
    path = tmp_path / "p.json"
    resolve_peaks(PeakRequest(CPU, torch.float32, cache_path=path))
    refreshed = resolve_peaks(PeakRequest(CPU, torch.float32, cache_path=path, refresh=True))
    assert (refreshed.flop_per_s, refreshed.bandwidth_bytes_per_s) == (2e11, 6e10)
    assert resolve_peaks(PeakRequest(CPU, torch.float32, cache_path=path)) == refreshed


def test_a_cpu_measured_while_busy_is_used_but_not_cached(tmp_path, monkeypatch):
    reading = Peaks(1e10, 1e9, MEASURED_SOURCE, "float32")
    monkeypatch.setattr(peaks_module, "measure_peaks", lambda device, dtype, policy: reading)
    monkeypatch.setattr(peaks_module, "_cpu_busy", lambda use: True)
    path = tmp_path / "p.json"
    assert resolve_peaks(PeakRequest(CPU, torch.float32, cache_path=path)) == reading
    assert not path.exists()


# --- the measurement: op, time budget, freed buffers ------------------------------------------


def sleeping_linear(rate_for):
    """A fake F.linear that takes `flop / rate_for(shape)` seconds and computes nothing."""

    def linear(x, w):
        shape = (x.shape[0], x.shape[1], w.shape[0])
        time.sleep(peakmeasure.linear_flop(shape) / rate_for(shape))
        return x[:, :1]

    return linear


def test_a_slow_dtype_is_measured_within_the_time_budget():
    # 1 GFLOP/s: one call of the first CPU shape takes 1.07 s, of the others 4.3 s. The old
    # square-mm measurement had no budget: at 0.3 GFLOP/s it took ~4 minutes per dtype. A 4 s
    # budget leaves the first shape (twice 1.07 s predicted) ~0.8 s of slack after the copy's
    # quarter, so a loaded machine's late sleeps do not decide the outcome; the others never fit.
    policy = MeasurePolicy(
        copy_bytes=1 << 20, linear_shapes=peakmeasure.CPU_SHAPES, budget_s=4.0, min_block_s=0.05
    )
    started = time.perf_counter()
    measured = peakmeasure.measure(
        CPU, torch.float32, policy, linear=sleeping_linear(lambda s: 1e9)
    )
    elapsed_s = time.perf_counter() - started
    assert elapsed_s < policy.budget_s + 0.5
    assert measured.flop_per_s == pytest.approx(1e9, rel=0.2)
    assert measured.linear.measured == (peakmeasure.CPU_SHAPES[0],)
    assert measured.linear.skipped == peakmeasure.CPU_SHAPES[1:]


def test_when_no_shape_fits_the_budget_the_sizing_rate_is_the_figure():
    policy = MeasurePolicy(
        copy_bytes=1 << 20, linear_shapes=peakmeasure.CPU_SHAPES, budget_s=0.5, min_block_s=0.01
    )
    started = time.perf_counter()
    measured = peakmeasure.measure(
        CPU, torch.float32, policy, linear=sleeping_linear(lambda s: 1e9)
    )
    assert time.perf_counter() - started < 1.0
    assert measured.linear.skipped == peakmeasure.CPU_SHAPES
    assert measured.linear.measured == ((peakmeasure.SIZING_TOKENS, 1024, 1024),)
    assert measured.flop_per_s == pytest.approx(1e9, rel=0.3)


def test_the_fastest_model_like_shape_sets_the_flops_peak():
    shapes = ((16, 256, 256), (16, 256, 1024), (16, 1024, 256))
    rates = {shapes[0]: 1e9, shapes[1]: 3e9, shapes[2]: 2e9}
    policy = MeasurePolicy(
        copy_bytes=1 << 20, linear_shapes=shapes, budget_s=5.0, repeats=2, min_block_s=0.005
    )
    measured = peakmeasure.measure(
        CPU, torch.float32, policy, linear=sleeping_linear(lambda s: rates.get(s, 1e9))
    )
    assert measured.linear.best_shape == shapes[1]
    assert measured.flop_per_s == pytest.approx(3e9, rel=0.25)
    assert measured.linear.skipped == ()


def test_the_flops_peak_is_measured_with_f_linear_on_the_weight_layout_of_a_model(monkeypatch):
    calls = []

    def spy(x, w):
        calls.append((tuple(x.shape), tuple(w.shape)))
        return torch.nn.functional.linear(x, w)

    peakmeasure.measure(CPU, torch.float32, SMALL, linear=spy)
    # x [tokens, in] and w [out, in]: F.linear's (and nn.Linear's) layout, not a square mm.
    assert ((32, 64), (128, 64)) in calls
    assert peakmeasure.measure(CPU, torch.float32, SMALL).linear.measured[-1] == (32, 64, 128)


def test_the_measurement_frees_its_buffers_and_empties_the_allocator(monkeypatch):
    alive = []
    real_buffers, real_operands = peakmeasure.copy_buffers, peakmeasure.linear_operands

    def buffers(nbytes, device):
        made = real_buffers(nbytes, device)
        alive.extend(weakref.ref(t) for t in made)
        return made

    def operands(shape, dtype, device):
        made = real_operands(shape, dtype, device)
        alive.extend(weakref.ref(t) for t in made)
        return made

    released = []

    def release(device):
        # By the time the allocator is emptied, no copy buffer or operand may be referenced.
        released.append((device, [ref() is None for ref in alive]))

    monkeypatch.setattr(peakmeasure, "copy_buffers", buffers)
    monkeypatch.setattr(peakmeasure, "linear_operands", operands)
    monkeypatch.setattr(peakmeasure, "release_cached_memory", release)
    peakmeasure.measure(CPU, torch.float32, SMALL)
    assert len(alive) == 2 + 2 * 3  # copy src/dst, then x/w of the sizing call and two shapes
    assert len(released) == 1
    device, dead = released[0]
    assert device == CPU
    assert all(dead)


def test_cpu_buffers_are_sized_past_the_last_level_cache(monkeypatch):
    llc = peakmeasure.last_level_cache()
    policy = MeasurePolicy.for_device(CPU)
    assert policy.copy_bytes >= min(256 << 20, 4 * (llc.total_bytes if llc else 0))
    assert policy.linear_shapes[:3] == peakmeasure.CPU_SHAPES
    assert policy.budget_s > 0


@pytest.mark.parametrize(("cpus", "large"), [(2, False), (64, True)])
def test_many_core_cpus_also_try_a_large_shape(monkeypatch, cpus, large):
    monkeypatch.setattr(peakmeasure, "allowed_cpus", lambda: list(range(cpus)))
    shapes = MeasurePolicy.for_device(CPU).linear_shapes
    assert (peakmeasure.CPU_LARGE_SHAPE in shapes) is large
    assert list(shapes) == sorted(shapes, key=peakmeasure.linear_flop)  # smallest first


# --- resolve: keep the larger, busy measurements, stale methods --------------------------------


def test_a_remeasure_keeps_the_larger_of_new_cached_and_this_runs_figure(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    key = cache_key("m1", CPU, torch.float32)
    store_peaks(path, key, Peaks(1e11, 6e10, MEASURED_SOURCE, "float32"), fingerprint={})
    fresh = Peaks(2e11, 4e10, MEASURED_SOURCE, "float32")
    monkeypatch.setattr(peaks_module, "measure_peaks", lambda device, dtype, policy: fresh)
    monkeypatch.setattr(peaks_module, "_cpu_busy", lambda use: False)
    previous = Peaks(1.5e11, 7e10, MEASURED_SOURCE, "float32")
    request = PeakRequest(
        CPU, torch.float32, cache_path=path, fingerprint_id="m1", refresh=True, previous=previous
    )
    again = resolve_peaks(request)
    assert (again.flop_per_s, again.bandwidth_bytes_per_s) == (2e11, 7e10)
    stored = Peaks.from_json(load_peaks_file(path)[key])
    assert (stored.flop_per_s, stored.bandwidth_bytes_per_s) == (2e11, 7e10)


def test_a_busy_remeasure_is_not_cached_but_never_lowers_the_runs_figure(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    low = Peaks(1e10, 1e9, MEASURED_SOURCE, "float32")
    monkeypatch.setattr(peaks_module, "measure_peaks", lambda device, dtype, policy: low)
    monkeypatch.setattr(peaks_module, "_cpu_busy", lambda use: True)
    previous = Peaks(5e10, 2e10, MEASURED_SOURCE, "float32")
    request = PeakRequest(CPU, torch.float32, cache_path=path, refresh=True, previous=previous)
    got = resolve_peaks(request)
    assert (got.flop_per_s, got.bandwidth_bytes_per_s) == (5e10, 2e10)
    assert not path.exists()


def test_busy_means_other_processes_not_this_ones_threads():
    # The suite's own threads (warmup, torch's spinning workers) never make the machine busy.
    assert not peaks_module._cpu_busy(CpuUse(others_cores=0.2, cpus=2, wall_s=1.0))
    assert peaks_module._cpu_busy(CpuUse(others_cores=0.5, cpus=2, wall_s=1.0))
    assert not peaks_module._cpu_busy(CpuUse(others_cores=3.0, cpus=64, wall_s=1.0))


def test_the_busy_check_spans_the_measurement_itself(tmp_path, monkeypatch):
    events = []

    class FakeMeter:
        def start(self):
            events.append("start")

        def stop(self):
            events.append("stop")
            return CpuUse(others_cores=1.5, cpus=2, wall_s=1.0)

    def fake_measure(device, dtype, policy):
        events.append("measure")
        return Peaks(1e10, 1e9, MEASURED_SOURCE, "float32")

    monkeypatch.setattr(peaks_module, "CpuUseMeter", FakeMeter)
    monkeypatch.setattr(peaks_module, "measure_peaks", fake_measure)
    path = tmp_path / "p.json"
    resolve_peaks(PeakRequest(CPU, torch.float32, cache_path=path))
    assert events == ["start", "measure", "stop"]
    assert not path.exists()  # others held 75 % of the CPUs: not a peak to keep


def test_an_entry_measured_by_the_old_square_matmul_is_measured_again(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    key = cache_key("m1", CPU, torch.bfloat16)
    old = Peaks(3e8, 5e10, "measured:copy/matmul", "bfloat16")
    store_peaks(path, key, old, fingerprint={})
    fresh = Peaks(1e10, 4e10, MEASURED_SOURCE, "bfloat16")
    monkeypatch.setattr(peaks_module, "measure_peaks", lambda device, dtype, policy: fresh)
    monkeypatch.setattr(peaks_module, "_cpu_busy", lambda use: False)
    got = resolve_peaks(PeakRequest(CPU, torch.bfloat16, cache_path=path, fingerprint_id="m1"))
    assert got == fresh
    assert Peaks.from_json(load_peaks_file(path)[key]) == fresh
