"""The `quant` / `kv_quant` axes and the `kv_group_size` / `kv_residual` settings of a matrix:
in the id only when named, kept only where they mean something, validated with the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.errors import MatrixError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.matrix.parse import load_matrix, parse_matrix

ROOT = Path(__file__).resolve().parents[3]
WHERE = Path("matrix/test.yaml")


def parse(**overrides: Any):
    data: dict[str, Any] = {
        "schema": 1,
        "models": ["tiny-llama"],
        "devices": ["cpu"],
        "dtypes": ["float32"],
        "batch": [1],
        "prompt_len": [8],
        "new_tokens": [4],
        **overrides,
    }
    return parse_matrix(data, path=WHERE, known_models=("tiny-llama",))


def test_ids_gain_q_and_kvq_only_when_named():
    assert parse().ids == ("tiny-llama-cpu-float32-b1-p8-n4",)
    ids = parse(quant=["none", "int4wo-g64"], kv_quant=["none", "hqq4"]).ids
    assert ids == (
        "tiny-llama-cpu-float32-b1-p8-n4-q_none-kvq_none",
        "tiny-llama-cpu-float32-b1-p8-n4-q_none-kvq_hqq4",
        "tiny-llama-cpu-float32-b1-p8-n4-q_int4wo-g64-kvq_none",
        "tiny-llama-cpu-float32-b1-p8-n4-q_int4wo-g64-kvq_hqq4",
    )


def test_kv_settings_stay_on_quantized_kv_cells_and_join_their_id():
    matrix = parse(kv_quant=["none", "quanto2"], kv_group_size=32, kv_residual=6)
    plain, quantized = matrix.cells
    assert (plain.kv_group_size, plain.kv_residual) == (None, None)
    assert (quantized.kv_group, quantized.kv_residual_len) == (32, 6)
    assert quantized.id.endswith("-kvq_quanto2-g32-r6")
    assert quantized.axes()["kv_group_size"] == 32
    assert Cell.from_params(quantized.to_params()) == quantized
    # Defaults (transformers'): group 64, residual 128, and no suffix.
    default = parse(kv_quant=["hqq4"]).cells[0]
    assert (default.kv_group, default.kv_residual_len) == (64, 128)
    assert default.id.endswith("-kvq_hqq4")


def test_kv_quant_shares_the_weight_build_and_quant_does_not():
    cells = parse(quant=["none", "int8wo"], kv_quant=["none", "hqq4"]).cells
    keys = {cell.id: cell.build_key for cell in cells}
    assert len(set(keys.values())) == 2
    none_none, none_hqq, int8_none, _ = cells
    assert none_none.build_key == none_hqq.build_key != int8_none.build_key
    assert not none_none.quantized
    assert none_hqq.quantized
    assert int8_none.quantized


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"quant": ["int3"]}, "unknown quant 'int3'"),
        ({"kv_quant": ["hqq3"]}, "unknown kv_quant 'hqq3'"),
        ({"kv_residual": 6}, "no cell has a `kv_quant` other than none"),
        ({"kv_quant": ["hqq4"], "kv_group_size": 0}, "kv_group_size"),
        ({"quant": ["nf4", "nf4"]}, "listed twice"),
    ],
)
def test_mistakes_name_the_field_and_the_fix(overrides, message):
    with pytest.raises(MatrixError, match=message):
        parse(**overrides)


def test_an_include_may_set_its_own_kv_settings():
    matrix = parse(
        include=[
            {"model": "tiny-llama", "device": "cpu", "dtype": "float32", "batch": 1,
             "prompt_len": 8, "new_tokens": 4, "kv_quant": "hqq2", "kv_residual": 3},
        ]
    )  # fmt: skip
    assert matrix.cells[-1].id == "tiny-llama-cpu-float32-b1-p8-n4-kvq_hqq2-r3"


@pytest.mark.parametrize("name", ["cpu-quant.yaml", "cuda-quant.yaml"])
def test_shipped_quant_matrices_load(name):
    matrix = load_matrix(ROOT / "matrix" / name)
    assert any(cell.weight_quant != "none" for cell in matrix.cells)
    assert any(cell.kv_quantized for cell in matrix.cells)


def test_interleaved_is_a_measurement_a_matrix_names_to_get():
    assert "interleaved" not in parse().measurements  # opt-in: not in the default set
    named = parse(quant=["none", "int8wo"], measurements=["decode", "interleaved"])
    assert named.measurements == ("decode", "interleaved")


def test_the_shipped_cpu_matrix_runs_in_bfloat16_compiled_and_interleaved():
    matrix = load_matrix(ROOT / "matrix" / "cpu-quant.yaml")
    assert "interleaved" in matrix.measurements
    int4 = [c for c in matrix.cells if c.weight_quant.startswith("int4wo")]
    assert {c.dtype for c in int4 if c.dtype != "bfloat16"} == {"float32"}  # skipped, said why
    compiled = {c.weight_quant for c in matrix.cells if c.compile == "default"}
    assert {"none", "int8wo", "int4wo-g64"} <= compiled
    assert all(c.cache == "static" for c in matrix.cells if c.compile == "default")
    # the library default residual with enough tokens to cross it twice
    default_r = [c for c in matrix.cells if c.kv_quantized and c.kv_residual_len == 128]
    assert default_r
    assert all(c.new_tokens >= 256 for c in default_r)
