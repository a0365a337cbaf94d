"""Why an MLX cell is skipped: each reason in one line with its fix, mlx installed or not."""

from __future__ import annotations

import importlib
import types
from dataclasses import replace

import pytest

from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.mlx import available, skip
from benchmarks.harness.model.models import MODELS_DIR
from tests.harness.mlx.mlxskip import needs_mlx
from tests.kv_configs import config_for

CELL = Cell(
    model="tiny-llama",
    device="cpu",
    dtype="float32",
    batch=1,
    prompt_len=24,
    new_tokens=4,
    warmup=0,
    rounds=1,
    seed=0,
    engine="mlx",
)


@pytest.fixture
def fresh_availability():
    available.unavailable_reason.cache_clear()
    yield
    available.unavailable_reason.cache_clear()


def test_without_mlx_the_reason_names_the_install_command(monkeypatch, fresh_availability):
    monkeypatch.setattr(available, "_has", lambda module: module != "mlx_lm")
    reason = skip.skip_reason(CELL, MODELS_DIR)
    assert reason is not None
    for words in ("mlx-lm", "not installed", "pip install --group mlx", "mlx-lm==0.32.2"):
        assert words in reason


def test_an_mlx_lm_that_does_not_import_names_transformers(monkeypatch, fresh_availability):
    real = importlib.import_module

    def refuse(name: str, *args: object):
        if name.startswith("mlx_lm"):
            raise ImportError("cannot import name 'PreTrainedTokenizerFast'")
        if name == "mlx.core":  # mlx itself imports (or is absent on this machine)
            return types.ModuleType(name)
        return real(name, *args)

    monkeypatch.setattr(available, "_has", lambda module: True)
    monkeypatch.setattr(importlib, "import_module", refuse)
    reason = available.unavailable_reason()
    assert reason is not None
    assert "declares transformers >= 5.7" in reason
    assert "PreTrainedTokenizerFast" in reason


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"attention": "sdpa"}, "attention configure transformers"),
        ({"cache": "static"}, "leave them out of `engine: mlx` cells"),
        ({"quant": "int8wo"}, "quant int8wo is a torch method"),
        ({"kv_quant": "hqq4"}, "kv_quant hqq4 is a torch cache"),
        ({"tp": 2}, "tensor parallel"),
    ],
)
def test_torch_only_settings_are_refused(change, words):
    assert words in (skip.torch_setting_reason(replace(CELL, **change)) or "")


@needs_mlx
@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"device": "cuda"}, "runs on mps (Metal) or cpu"),
        ({"model": "tiny-gpt2"}, "cannot read this config"),
        ({"kv_quant": "mlx4"}, "head dim 16 is not a multiple of kv_group_size 64"),
        ({"model": "tiny-gemma2", "kv_quant": "mlx4"}, "not verified with a QuantizedKVCache"),
        ({"prompt_len": 1020, "new_tokens": 8}, "exceed tiny-llama's 1024"),
    ],
)
def test_machine_and_model_reasons(change, words):
    reason = skip.skip_reason(replace(CELL, **change), MODELS_DIR)
    assert words in (reason or ""), reason


@needs_mlx
def test_a_cell_mlx_can_run_has_no_reason():
    assert skip.skip_reason(CELL, MODELS_DIR) is None
    config_for("qwen3")  # tiny-qwen3 needs transformers >= 4.51
    quantized = replace(CELL, model="tiny-qwen3", kv_quant="mlx8", kv_group_size=32, quant="mlx4")
    assert skip.skip_reason(quantized, MODELS_DIR) is None


@needs_mlx
def test_the_calibration_slowdown_skips_mlx_cells(monkeypatch):
    monkeypatch.setenv(skip.CALIBRATION_ENV, "0.05")
    assert "slows torch models only" in (skip.skip_reason(CELL, MODELS_DIR) or "")
