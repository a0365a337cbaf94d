"""The `tp` axis of a matrix (issue 32): in the id only when named, validated with the fix,
settable by an `include:` entry and an `exclude:` rule, its cells built apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.errors import MatrixError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.matrix.parse import load_matrix, parse_matrix

ROOT = Path(__file__).resolve().parents[3]
WHERE = Path("matrix/test.yaml")
BASE = "tiny-llama-cpu-float32-b1-p8-n4"
INCLUDE = {
    "model": "tiny-llama",
    "device": "cpu",
    "dtype": "float32",
    "batch": 1,
    "prompt_len": 8,
    "new_tokens": 4,
}


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


def test_ids_are_unchanged_without_the_axis_and_gain_tp_with_it():
    plain = parse()
    assert plain.ids == (BASE,)
    assert plain.cells[0].tp is None
    assert plain.cells[0].tp_size == 1
    assert "tp" not in plain.cells[0].axes()
    matrix = parse(tp=[1, 2])
    assert matrix.ids == (f"{BASE}-tp1", f"{BASE}-tp2")
    assert matrix.cells[1].axes()["tp"] == 2
    assert Cell.from_params(matrix.cells[1].to_params()) == matrix.cells[1]


def test_tp_comes_after_the_run_mode_axes_and_splits_the_build():
    cells = parse(cache=["dynamic"], tp=[1, 2]).cells
    assert [c.id for c in cells] == [f"{BASE}-cache_dynamic-tp1", f"{BASE}-cache_dynamic-tp2"]
    # A tp-1 cell builds in this process like a cell without the axis; a tp-2 cell builds
    # nothing here (its ranks load the model), so it never joins that build.
    assert cells[0].build_key == ("tiny-llama", "cpu", "float32", "cache=dynamic")
    assert cells[1].build_key[-1] == "tp=2"


def test_shipped_matrices_keep_their_ids():
    # Every shipped matrix without the axis: no id carries a -tp part.
    for path in sorted((ROOT / "matrix").glob("*.yaml")):
        matrix = load_matrix(path)
        named = any(cell.tp is not None for cell in matrix.cells)
        assert named == any("-tp" in cell_id for cell_id in matrix.ids), path.name


def test_an_include_sets_tp_and_an_exclude_matches_it():
    matrix = parse(include=[{**INCLUDE, "tp": 2}])
    assert matrix.ids == (BASE, f"{BASE}-tp2")
    pruned = parse(tp=[1, 2, 4], exclude=[{"tp": [1, 4]}])
    assert pruned.ids == (f"{BASE}-tp2",)
    assert pruned.excluded == 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tp": 3}, "matrix/test.yaml: tp[0]: tp 3 is not valid; use one of 1, 2, 4, 8"),
        ({"tp": [2, 16]}, "matrix/test.yaml: tp[1]: tp 16 is not valid; use one of 1, 2, 4, 8"),
        ({"tp": ["2"]}, "tp[0]: tp '2' is not valid"),
        ({"tp": True}, "tp[0]: tp True is not valid"),
        ({"tp": []}, "matrix/test.yaml: tp: the axis is empty; list at least one of 1, 2, 4, 8"),
        ({"tp": [2, 2]}, "tp[1]: 2 is listed twice, which would make duplicate cell ids"),
        ({"include": [{**INCLUDE, "tp": 0}]}, "matrix/test.yaml: include[0].tp[0]: tp 0"),
        ({"tp": [2], "exclude": [{"tp": 4}]}, "exclude[0].tp: 4 is not in the matrix's tp"),
    ],
)
def test_mistakes_name_the_file_the_field_and_the_fix(overrides, message):
    with pytest.raises(MatrixError) as raised:
        parse(**overrides)
    assert message in str(raised.value)


def test_shipped_tp_matrices_load():
    smoke = load_matrix(ROOT / "matrix" / "smoke.yaml")
    assert [c.id for c in smoke.cells if c.tp_size > 1] == ["tiny-llama-cpu-float32-b1-p24-n8-tp2"]
    cuda = load_matrix(ROOT / "matrix" / "cuda-tp.yaml")
    assert {c.tp for c in cuda.cells} == {4, 8}
    assert {c.model for c in cuda.cells} == {"llama-3.1-70b", "mixtral-8x7b"}
