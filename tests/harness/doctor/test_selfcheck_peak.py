"""The roofline probe: the biggest cell of a shipped matrix, and the verdict on the peak it is
measured against (fakes for the measurements; the real ones run in the CPU end-to-end test)."""

from __future__ import annotations

from pathlib import Path

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


def _cell():
    cell = sp.biggest_cell(load_matrix(ROOT / "matrix" / "cuda.yaml"), "cuda")
    assert cell is not None
    return cell


@pytest.mark.parametrize(
    ("gemm", "peak", "share", "level"),
    [
        (900e12, 800e12, 1.0, "bad"),  # the cell's GEMMs beat the peak: a false RooflineError
        (700e12, 800e12, 1.0, "ok"),
        (700e12, 800e12, 1.2, "warn"),  # at most 105 %: counted attention pushes it over
    ],
)
def test_the_peak_verdict(gemm, peak, share, level):
    found = sp.judge_peak(
        _cell(), gemm_flop_per_s=gemm, peak_flop_per_s=peak, sheet_flop_per_s=989e12, share=share
    )
    assert found.level == level
    assert found.data["gemm_pct_of_peak"] == pytest.approx(gemm / peak * 100)
    assert "989.0 TFLOP/s on the datasheet" in found.message


def test_an_excess_remeasures_the_peak_once_as_the_suite_does(monkeypatch):
    peaks = iter([100e9, 130e9])
    measured: list[float] = []

    def measure(device, dtype, policy):
        measured.append(policy.budget_s)
        return Peaks(next(peaks), 1e10, "measured:copy/linear", "float32")

    monkeypatch.setattr(sp, "measure_peaks", measure)
    monkeypatch.setattr(sp, "gemm_rate", lambda *_a: 120e9)
    found = sp.probe_peak(CPU, ROOT / "matrix" / "cpu.yaml", full=False)
    assert len(measured) == 2
    assert found.level == "ok"  # 120 of the second 130: no false error
    assert found.data["peak_remeasured"] is True
    assert found.data["peak_flop_per_s"] == 130e9


def test_a_matrix_without_the_devices_cells_is_skipped():
    found = sp.probe_peak(torch.device("mps"), ROOT / "matrix" / "cpu.yaml", full=False)
    assert found.level == "skip"
    assert "has no mps cell" in found.message
