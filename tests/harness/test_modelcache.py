"""The one-model slot: built once per (model, device, dtype), released when the next starts."""

from __future__ import annotations

import gc
import shutil
import weakref
from pathlib import Path

import pytest

from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.modelcache import BuildFailedError, ModelCache, weights_bytes

MODELS = Path(__file__).resolve().parents[2] / "matrix" / "models"


def cell(model="tiny-llama", dtype="float32", prompt_len=16):
    return Cell(model, "cpu", dtype, 1, prompt_len, 4, warmup=0, rounds=1, seed=0)


def test_cells_of_one_model_device_dtype_share_one_build():
    events: list[str] = []
    cache = ModelCache(on_event=events.append)
    first = cache.get(cell(prompt_len=16))
    assert cache.get(cell(prompt_len=32)) is first
    assert [e for e in events if e.startswith("built ")] == [events[1]]
    assert first.weights_bytes == weights_bytes(first.model) > 0
    assert first.build_s > 0


def test_a_new_triple_releases_the_previous_model_before_building():
    events: list[str] = []
    cache = ModelCache(on_event=events.append)
    old = weakref.ref(cache.get(cell(dtype="float32")).model)
    cache.get(cell(dtype="bfloat16"))
    gc.collect()
    assert old() is None, "the float32 model is still referenced after the switch"
    assert "released tiny-llama on cpu" in events
    cache.release()
    assert cache.current is None


def test_a_failed_build_is_remembered_and_not_retried(tmp_path):
    text = (MODELS / "tiny-llama.yaml").read_text().replace("name: tiny-llama", "name: tiny-x")
    (tmp_path / "tiny-x.yaml").write_text(
        text.replace("vocab_size: 256", "vocab_size: 100000000000")
    )
    shutil.copy(MODELS / "tiny-llama.yaml", tmp_path)
    events: list[str] = []
    cache = ModelCache(tmp_path, on_event=events.append)
    with pytest.raises(RuntimeError, match="can't allocate memory"):
        cache.get(cell(model="tiny-x"))
    with pytest.raises(BuildFailedError, match="building tiny-x on cpu in float32 failed"):
        cache.get(cell(model="tiny-x", prompt_len=32))
    assert sum(e.startswith("building tiny-x") and "..." in e for e in events) == 1
    assert cache.get(cell()).model is not None  # the next model still builds


def test_a_quantized_build_measures_accuracy_once_where_it_quantizes(tmp_path, monkeypatch):
    """On a local checkpoint (`source: checkpoint` in `--models-dir`) as on random weights: the
    build measures every quantized cell's SQNR and KL once, and the record only reads them."""
    pytest.importorskip("torchao")
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    from benchmarks.harness import modelcache  # noqa: PLC0415
    from benchmarks.harness.model.models import load_model_spec  # noqa: PLC0415
    from benchmarks.harness.runmode import quantcheck  # noqa: PLC0415

    config = load_model_spec("tiny-llama", MODELS).hf_config()
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "ckpt")
    (tmp_path / "tiny-ckpt.yaml").write_text(
        f"schema: 1\nname: tiny-ckpt\nsource: checkpoint\ncheckpoint: {tmp_path / 'ckpt'}\n"
    )
    dense = Cell("tiny-ckpt", "cpu", "float32", 1, 16, 4, 0, 1, 0, quant="none")
    int8 = Cell("tiny-ckpt", "cpu", "float32", 1, 16, 4, 0, 1, 0, quant="int8wo")
    cache = ModelCache(tmp_path, cells=(dense, int8))
    loaded = cache.get(int8)
    fields = cache.measured[int8.id]
    assert fields["quant_sqnr_db_weights_bound"] < fields["quant_sqnr_db_min"] < 200.0
    assert fields["quant_logits_kl"] > 0.0
    assert fields["accuracy_flag"] is False

    def no_forward(*_args, **_kwargs):
        raise AssertionError("record assembly ran the model again")

    monkeypatch.setattr(quantcheck, "measure_accuracy", no_forward)
    assert modelcache.quant_fields(int8, loaded) == fields  # read, not measured
    assert modelcache.quant_fields(dense, cache.get(dense)) == {}
