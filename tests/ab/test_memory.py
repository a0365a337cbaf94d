"""A/B memory check: both sides' models must fit at once, else process-level interleaving."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.ab import memory
from benchmarks.harness.matrix.parse import load_matrix

MODELS = Path(__file__).resolve().parents[2] / "matrix" / "models"


def test_weights_bytes_come_from_the_architecture():
    """tiny-llama's parameters in float32 vs bfloat16: exactly half the bytes, no memory used."""
    fp32 = memory.weights_bytes("tiny-llama", "float32", MODELS)
    bf16 = memory.weights_bytes("tiny-llama", "bfloat16", MODELS)
    assert fp32 > 0
    assert fp32 == 2 * bf16


def test_fits_when_free_memory_holds_both_and_not_otherwise(monkeypatch: pytest.MonkeyPatch):
    matrix = load_matrix(Path(__file__).resolve().parents[2] / "matrix" / "smoke.yaml")
    largest = max(memory.weights_bytes(c.model, c.dtype, MODELS) for c in matrix.cells)
    need = int(2 * largest * memory.MARGIN)
    monkeypatch.setattr(memory, "free_bytes", lambda device: need + 1)
    check = memory.fits_both(matrix.cells, (MODELS, MODELS))
    assert check.fits
    assert check.need_bytes == need
    monkeypatch.setattr(memory, "free_bytes", lambda device: need - 1)
    check = memory.fits_both(matrix.cells, (MODELS, MODELS))
    assert not check.fits
    assert "cpu" in check.note
    assert "free" in check.note
