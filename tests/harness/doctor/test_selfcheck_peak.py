"""The roofline probe: the biggest cell of a shipped matrix, and the verdict on the peak it is
measured against (fakes for the measurements; the real ones run in the CPU end-to-end test)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.harness.doctor.selfcheck import peak as sp
from benchmarks.harness.matrix.parse import load_matrix
from benchmarks.harness.roofline.peaks import Peaks

ROOT = Path(__file__).resolve().parents[3]
CPU = torch.device("cpu")


def test_the_biggest_cell_is_the_most_prompt_tokens_then_the_most_linear_flops():
    cuda = sp.biggest_cell(load_matrix(ROOT / "matrix" / "cuda.yaml"), "cuda")
    assert cuda is not None
    assert (cuda.model, cuda.batch, cuda.prompt_len, cuda.dtype) == (
        "llama-3.1-8b",
        8,
        4096,
        "bfloat16",
    )
    cpu = sp.biggest_cell(load_matrix(ROOT / "matrix" / "cpu.yaml"), "cpu")
    assert cpu is not None
    assert (cpu.model, cpu.prompt_len, cpu.dtype) == ("qwen2.5-0.5b", 512, "float32")
    assert sp.biggest_cell(load_matrix(ROOT / "matrix" / "cpu.yaml"), "cuda") is None
    assert sp.default_matrix(torch.device("cuda", 0)) == ROOT / "matrix" / "cuda.yaml"


def test_the_counted_flops_exceed_the_executed_ones_only_for_cudas_causal_kernels():
    matrix = load_matrix(ROOT / "matrix" / "cuda.yaml")
    cell = sp.biggest_cell(matrix, "cuda")
    assert cell is not None
    assert sp.executed_share(cell, "cpu") == 1.0
    assert sp.executed_share(cell, "cuda") >= 1.0  # 1.0 once the roofline counts causal pairs


@functools.cache
def _cell():
    cell = sp.biggest_cell(load_matrix(ROOT / "matrix" / "cuda.yaml"), "cuda")
    assert cell is not None
    return cell


@pytest.mark.parametrize(
    ("gemms", "peaks", "share", "level"),
    [
        # The cell's GEMMs beat the peak by 12 % beyond a 0.5 % spread: a false RooflineError.
        ((900e12, 898e12, 899e12), (800e12, 799e12, 798e12), 1.0, "bad"),
        # 2 % beyond the noise: its % of peak reads that much high, no more.
        ((816e12, 817e12, 818e12), (800e12, 799e12, 800e12), 1.0, "warn"),
        # 1.5 % above on one reading, within the spread of three: at the peak.
        ((812e12, 795e12, 803e12), (800e12, 790e12, 805e12), 1.0, "ok"),
        ((700e12,), (800e12,), 1.0, "ok"),
        ((700e12,), (800e12,), 1.2, "warn"),  # at most 105 %: counted attention pushes it over
    ],
)
def test_the_peak_verdict(gemms, peaks, share, level):
    readings = sp.Readings(peaks, gemms)
    found = sp.judge_peak(_cell(), readings, sheet_flop_per_s=989e12, share=share)
    assert found.level == level, found.message
    assert found.data["gemm_pct_of_peak"] == pytest.approx(max(gemms) / max(peaks) * 100)
    assert "989.0 TFLOP/s on the datasheet" in found.message


def old_rule(peaks, gemms) -> bool:
    """The rule before issue 42: the GEMMs' one reading against the peak, re-measured once on an
    excess and the higher kept; `bad` above 100 %."""
    peak = max(peaks[0], peaks[1]) if gemms[0] > peaks[0] else peaks[0]
    return gemms[0] > peak


def new_rule(peaks, gemms) -> bool:
    """`probe_peak`'s readings (three each once the first pair shows an excess) and verdict
    (`judge_peak` says bad exactly when `Readings.excess_level` does)."""
    count = sp.NOISE_READINGS if gemms[0] > peaks[0] else 1
    return sp.Readings(tuple(peaks[:count]), tuple(gemms[:count])).excess_level == "bad"


def bad_rate(rule, ratio: float, sigma: float, seeds: int = 2000) -> float:
    """How often `rule` says bad when the cell's GEMMs truly run at `ratio` x the peak and each
    reading is off by a log-normal factor of spread `sigma` (a quiet CPU: ~1 %, the issue's
    195.7-199.5 and 199.2-201.3 GFLOP/s)."""
    rng = np.random.default_rng(42)
    bad = 0
    for _ in range(seeds):
        peaks = 200e9 * np.exp(rng.normal(0.0, sigma, sp.NOISE_READINGS))
        gemms = 200e9 * ratio * np.exp(rng.normal(0.0, sigma, sp.NOISE_READINGS))
        bad += rule(list(peaks), list(gemms))
    return bad / seeds


@pytest.mark.parametrize("sigma", [0.005, 0.01, 0.02])
def test_two_readings_noise_no_longer_flips_the_verdict_and_a_real_excess_is_still_bad(sigma):
    """At the peak (1.00x) and at the issue's 101-102 %, the old rule called a fitting machine
    unfit in a third or more of the runs; the new one almost never. A 130 % excess is bad in
    every run either way."""
    for ratio in (1.0, 1.02):
        assert bad_rate(old_rule, ratio, sigma) >= 0.25
        assert bad_rate(new_rule, ratio, sigma) <= 0.002
    assert bad_rate(new_rule, 1.3, sigma) == 1.0
    assert bad_rate(old_rule, 1.3, sigma) == 1.0


def test_an_excess_reads_both_three_times_interleaved(monkeypatch):
    peaks = iter([100e9, 130e9, 128e9])
    gemms = iter([120e9, 118e9, 119e9])
    order: list[str] = []

    def measure(device, dtype, policy):
        order.append("peak")
        return Peaks(next(peaks), 1e10, "measured:copy/linear", "float32")

    def gemm(*_args):
        order.append("gemm")
        return next(gemms)

    monkeypatch.setattr(sp, "measure_peaks", measure)
    monkeypatch.setattr(sp, "gemm_rate", gemm)
    found = sp.probe_peak(CPU, ROOT / "matrix" / "cpu.yaml", full=False)
    assert order == ["peak", "gemm"] * 3
    assert found.level == "ok"  # 120 of the higher 130: no false error
    assert found.data["peak_remeasured"] is True
    assert found.data["readings"] == 3
    assert found.data["peak_flop_per_s"] == 130e9


def test_no_excess_reads_each_once(monkeypatch):
    monkeypatch.setattr(
        sp, "measure_peaks", lambda *_a: Peaks(100e9, 1e10, "measured:copy/linear", "float32")
    )
    calls = []
    monkeypatch.setattr(sp, "gemm_rate", lambda *_a: calls.append(1) or 90e9)
    found = sp.probe_peak(CPU, ROOT / "matrix" / "cpu.yaml", full=False)
    assert len(calls) == 1
    assert found.level == "ok"
    assert found.data["readings"] == 1


def test_a_matrix_without_the_devices_cells_is_skipped():
    found = sp.probe_peak(torch.device("mps"), ROOT / "matrix" / "cpu.yaml", full=False)
    assert found.level == "skip"
    assert "has no mps cell" in found.message
