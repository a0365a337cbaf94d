"""The MLX engine's owned loop on tiny models (mlx's CPU device): the KV bytes of the real
mlx-lm caches after the prefill and after every decode step equal the prediction (`account`),
across the 256-step boundary, through a sliding window's rotation and for quantized caches;
snapshot and restore keep the positions and bytes; weights are stored as predicted.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml

from benchmarks.harness.engine import make_prompt
from benchmarks.harness.errors import ModelError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.mlx import engine as mlx_engine
from benchmarks.harness.mlx import kvplan
from benchmarks.harness.mlx.loaded import build_loaded
from benchmarks.harness.model.models import MODELS_DIR, build_model, load_model_spec
from tests.harness.mlx.mlxskip import needs_mlx
from tests.kv_configs import config_for

pytestmark = needs_mlx  # every test builds a model on mlx


def _cell(model: str, prompt_len: int, new_tokens: int, **axes: object) -> Cell:
    fields: dict = {
        "model": model,
        "device": "cpu",
        "dtype": "float32",
        "batch": 1,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "warmup": 0,
        "rounds": 1,
        "seed": 0,
        "engine": "mlx",
        **axes,
    }
    return Cell(**fields)


def _build(cell: Cell, models_dir: Path = MODELS_DIR):
    loaded = build_loaded(cell, models_dir)
    loaded.configure(cell)
    return loaded


def _prompt(loaded, cell: Cell) -> torch.Tensor:
    return make_prompt(cell.batch, cell.prompt_len, loaded.config.vocab_size, cell.seed)


def _generation_matches(loaded, cell: Cell) -> list[int]:
    """Every point of a recorded generation against the prediction; the allocated bytes."""
    result = loaded.engine.generate(_prompt(loaded, cell), cell.new_tokens)
    kv = loaded.kv(cell)
    measured = [result.kv_bytes_after_prefill, *result.kv_bytes_per_step]
    predicted = [kv.analytic_bytes(cell.prompt_len + i) for i in range(cell.new_tokens)]
    assert measured == predicted
    assert kv.checks(None, result) == []  # used bytes at every point
    final = kv.point(result.cache, cell.final_positions)
    assert final.measured_bytes == final.analytic_bytes
    assert final.mismatches == ()
    return measured


@pytest.mark.parametrize(("prompt_len", "new_tokens"), [(300, 4), (254, 6), (24, 3)])
def test_kv_bytes_are_exact_across_the_256_step_boundary(prompt_len, new_tokens):
    cell = _cell("tiny-llama", prompt_len, new_tokens, batch=2)
    measured = _generation_matches(_build(cell), cell)
    per_slot = 2 * 2 * 16 * 2 * 4 * 2  # B x heads x head_dim x (K, V) x float32 x 2 layers
    steps = [(prompt_len + i + 255) // 256 * 256 for i in range(new_tokens)]
    assert measured == [s * per_slot for s in steps]  # whole steps of 256, growth included
    if prompt_len == 254:
        assert (measured[2], measured[3]) == (256 * per_slot, 512 * per_slot)


def test_snapshot_and_restore_keep_positions_and_bytes_and_do_not_alias():
    cell = _cell("tiny-llama", 256, 2)
    loaded = _build(cell)
    engine, kv = loaded.engine, loaded.kv(cell)
    prefill = engine.prefill(_prompt(loaded, cell))
    snapshot = engine.snapshot(prefill.cache)
    assert (snapshot.seq_len, snapshot.kv_bytes) == (256, kv.analytic_bytes(256))
    for _ in range(2):  # restorable again after a step grew the restored copy
        cache = engine.restore(snapshot)
        assert kv.point(cache, 256).measured_bytes == snapshot.kv_bytes
        _, cache = engine.decode_step(prefill.next_token, cache, 256)
        point = kv.point(cache, 257)
        assert point.measured_bytes == point.analytic_bytes == 2 * kv.analytic_bytes(256)


def _sliding_llama(tmp_path: Path) -> Path:
    config = yaml.safe_load((MODELS_DIR / "tiny-llama.yaml").read_text())
    config["name"] = "tiny-llama-swa"
    config["config"].update(layer_types=["sliding_attention", "full_attention"], sliding_window=16)
    (tmp_path / "tiny-llama-swa.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


@pytest.mark.parametrize(("prompt_len", "new_tokens"), [(8, 14), (24, 4), (16, 3)])
def test_the_rotating_cache_at_its_window(tmp_path, prompt_len, new_tokens):
    cell = _cell("tiny-llama-swa", prompt_len, new_tokens)
    loaded = _build(cell, _sliding_llama(tmp_path))
    assert [p.kind for p in loaded.kv(cell)._plans] == ["RotatingKVCache", "KVCache"]
    _generation_matches(loaded, cell)


@pytest.mark.parametrize("kv_quant", ["mlx4", "mlx8"])
def test_quantized_cache_bytes_are_exact(kv_quant):
    config_for("qwen3")  # head dim 32: groups of 32 divide it (transformers >= 4.51)
    cell = _cell("tiny-qwen3", 300, 3, kv_quant=kv_quant, kv_group_size=32)
    loaded = _build(cell)
    measured = _generation_matches(loaded, cell)
    dense = loaded.kv(cell).bytes_per_token * 512  # the same positions unquantized
    assert measured[0] < dense / 2  # packed: 4 or 8 bits + a scale and bias per 32


@pytest.mark.parametrize("quant", ["mlx4", "mlx8"])
def test_quantized_weights_are_stored_as_predicted(quant):
    cell = _cell("tiny-llama", 24, 2, quant=quant)
    loaded = _build(cell)
    fields = loaded.weights_fields()
    assert loaded.weights_mismatch() is None
    assert fields["weights_bytes"] == fields["weights_analytic_bytes"]
    assert fields["weights_dense_bytes"] == fields["weights_torch_analytic_dense_bytes"]
    assert fields["weights_bytes"] < fields["weights_dense_bytes"] / (2 if quant == "mlx8" else 4)
    _generation_matches(loaded, cell)  # and it runs


@pytest.mark.parametrize("model", ["tiny-qwen2-sw", "tiny-mistral-sw", "tiny-gemma2", "tiny-phi3"])
def test_the_other_tiny_models_run_with_exact_bytes(model):
    cell = _cell(model, 20, 3)
    loaded = _build(cell)
    assert loaded.weights_mismatch() is None  # the dense MLX model is the torch model's size
    _generation_matches(loaded, cell)
    notes = loaded.kv(cell).extra_fields(None).get("kv_mlx_note", "")
    # mlx-lm 0.32.2 runs these windows as full attention: the record says so
    assert ("ignores the sliding window" in notes) == (model != "tiny-phi3")


def test_a_checkpoint_loads_through_mlx_lms_loader(tmp_path):
    """`source: checkpoint` (a `--models-dir` model file): mlx-lm's `load_model` reads the
    directory transformers saved; the weights are the checkpoint's, the bytes exact."""
    spec = load_model_spec("tiny-llama")
    torch_model = build_model(spec, torch.device("cpu"), torch.float32)
    torch_model.save_pretrained(tmp_path / "ckpt")
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny-ckpt.yaml").write_text(
        f"schema: 1\nname: tiny-ckpt\nsource: checkpoint\ncheckpoint: {tmp_path / 'ckpt'}\n"
    )
    cell = _cell("tiny-ckpt", 24, 3)
    loaded = _build(cell, models)
    assert loaded.weights_mismatch() is None
    embed = loaded.model.model.embed_tokens.weight
    expected = torch_model.model.embed_tokens.weight.detach().numpy()
    assert abs(float(embed[3, 5].item()) - float(expected[3, 5])) < 1e-6  # the saved weights
    _generation_matches(loaded, cell)


def test_each_check_fails_on_its_defect(tmp_path, monkeypatch):
    """A plan mlx-lm does not follow fails the build; a dense model of another size, and used
    bytes that are not the prediction's, are named mismatches."""
    cell = _cell("tiny-llama", 24, 3)
    loaded = _build(cell)
    wrong = replace(loaded, torch_dense_bytes=loaded.torch_dense_bytes + 4)
    assert "not the same architecture" in (wrong.weights_mismatch() or "")
    result = loaded.engine.generate(_prompt(loaded, cell), cell.new_tokens)
    off = replace(result, kv_used_bytes=(*result.kv_used_bytes[:-1], result.kv_used_bytes[-1] + 1))
    assert loaded.kv(cell).checks(None, off) == [
        f"after decode step 2: used bytes analytic {result.kv_used_bytes[-1]}, measured "
        f"{result.kv_used_bytes[-1] + 1}"
    ]
    rules = dict(kvplan._SLIDING_RULES)
    rules["llama"] = lambda config, layers: [None] * layers  # a rule that ignores the windows
    monkeypatch.setattr(kvplan, "_SLIDING_RULES", rules)
    with pytest.raises(ModelError, match=r"makes caches .*RotatingKVCache.* plan says"):
        _build(_cell("tiny-llama-swa", 24, 3), _sliding_llama(tmp_path))


def test_a_prompt_in_several_chunks_is_exact(monkeypatch):
    """mlx-lm's chunked prefill (2,048 positions a chunk; 64 here, so P = 300 takes five chunks
    and the last token): the cache grows and trims chunk by chunk, as predicted."""
    monkeypatch.setattr(mlx_engine, "PREFILL_STEP", 64)
    assert mlx_engine.prefill_updates(300) == [64, 64, 64, 64, 43, 1]
    cell = _cell("tiny-llama", 300, 4)
    _generation_matches(_build(cell), cell)
