"""The matrix file format (DESIGN §2): expansion, exclude/include, cell ids, and every error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.errors import MatrixError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.matrix.parse import load_matrix, parse_matrix

ROOT = Path(__file__).resolve().parents[3]
KNOWN = ("qwen2.5-0.5b", "smollm2-135m", "llama-3.1-8b")
WHERE = Path("matrix/test.yaml")


def base(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema": 1,
        "models": ["qwen2.5-0.5b", "smollm2-135m"],
        "devices": ["cpu"],
        "dtypes": ["float32", "bfloat16"],
        "batch": [1],
        "prompt_len": [128, 512],
        "new_tokens": [32],
        "warmup": 1,
        "rounds": 3,
        "seed": 7,
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


def parse(data: Any) -> Any:
    return parse_matrix(data, path=WHERE, known_models=KNOWN)


def error_of(data: Any) -> str:
    with pytest.raises(MatrixError) as info:
        parse(data)
    message = str(info.value)
    assert message.startswith(str(WHERE)), "every message names the file first"
    return message


def test_the_product_expands_in_axis_order_with_stable_ids():
    matrix = parse(base())
    assert matrix.ids == (
        "qwen2.5-0.5b-cpu-float32-b1-p128-n32",
        "qwen2.5-0.5b-cpu-float32-b1-p512-n32",
        "qwen2.5-0.5b-cpu-bfloat16-b1-p128-n32",
        "qwen2.5-0.5b-cpu-bfloat16-b1-p512-n32",
        "smollm2-135m-cpu-float32-b1-p128-n32",
        "smollm2-135m-cpu-float32-b1-p512-n32",
        "smollm2-135m-cpu-bfloat16-b1-p128-n32",
        "smollm2-135m-cpu-bfloat16-b1-p512-n32",
    )
    assert {(c.warmup, c.rounds, c.seed) for c in matrix.cells} == {(1, 3, 7)}
    assert (matrix.warmup, matrix.rounds, matrix.seed, matrix.excluded) == (1, 3, 7, 0)


def test_cell_id_names_every_axis_including_a_numbered_cuda_device():
    cell = Cell("llama-3.1-8b", "cuda:1", "float16", 8, 4096, 256, warmup=2, rounds=5, seed=0)
    assert cell.id == "llama-3.1-8b-cuda:1-float16-b8-p4096-n256"
    assert cell.build_key == ("llama-3.1-8b", "cuda:1", "float16")
    assert cell.final_positions == 4096 + 256 - 1


def test_axes_are_the_flat_params_and_to_params_round_trips():
    cell = parse(base()).cells[0]
    assert cell.axes() == {
        "model": "qwen2.5-0.5b",
        "device": "cpu",
        "dtype": "float32",
        "batch": 1,
        "prompt_len": 128,
        "new_tokens": 32,
    }
    assert Cell.from_params(cell.to_params()) == cell
    with pytest.raises(MatrixError, match=r"Cell\.to_params"):
        Cell.from_params(cell.axes())


def test_a_scalar_axis_reads_as_a_list_of_one():
    matrix = parse(base(models="smollm2-135m", dtypes="float32", prompt_len=64))
    assert matrix.ids == ("smollm2-135m-cpu-float32-b1-p64-n32",)


def test_settings_default_when_omitted():
    matrix = parse(base(warmup=None, rounds=None, seed=None))
    assert (matrix.warmup, matrix.rounds, matrix.seed, matrix.min_timed_s) == (1, 5, 0, 0)
    assert {c.min_timed_s for c in matrix.cells} == {0}


# A whole cell for `include:`, outside the product `base()` spans.
EXTRA_CELL = {
    "model": "llama-3.1-8b",
    "device": "cpu",
    "dtype": "bfloat16",
    "batch": 2,
    "prompt_len": 64,
    "new_tokens": 8,
}


def test_min_timed_s_reaches_every_cell_and_an_include_may_override_it():
    matrix = parse(base(min_timed_s=5, include=[{**EXTRA_CELL, "min_timed_s": 0}]))
    *product, last = matrix.cells
    assert {c.min_timed_s for c in product} == {5}
    assert last.min_timed_s == 0
    assert matrix.min_timed_s == 5
    # A setting, not an axis: the history key of a cell does not change with it.
    assert "min_timed_s" not in product[0].axes()
    assert product[0].id.endswith("-n32")


def test_exclude_removes_every_cell_matching_all_given_axes():
    matrix = parse(base(exclude=[{"model": "smollm2-135m", "dtype": "bfloat16"}]))
    assert matrix.excluded == 2
    assert not [i for i in matrix.ids if i.startswith("smollm2-135m-cpu-bfloat16")]
    assert len(matrix.cells) == 6


def test_exclude_values_may_be_lists():
    matrix = parse(base(exclude=[{"prompt_len": [128, 512], "model": "qwen2.5-0.5b"}]))
    assert all(i.startswith("smollm2") for i in matrix.ids)


def test_include_adds_whole_cells_after_the_product_with_optional_settings():
    matrix = parse(base(include=[{**EXTRA_CELL, "rounds": 1}]))
    last = matrix.cells[-1]
    assert last.id == "llama-3.1-8b-cpu-bfloat16-b2-p64-n8"
    assert (last.warmup, last.rounds, last.seed) == (1, 1, 7)
    assert matrix.cell(last.id) is last


def test_load_matrix_reads_a_file_and_checks_models_against_a_directory(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny.yaml").write_text("schema: 1\nname: tiny\n")
    path = tmp_path / "m.yaml"
    path.write_text(
        "schema: 1\nmodels: [tiny]\ndevices: [cpu]\ndtypes: [float32]\n"
        "batch: [1]\nprompt_len: [8]\nnew_tokens: [4]\n"
    )
    matrix = load_matrix(path, models_dir=models)
    assert matrix.ids == ("tiny-cpu-float32-b1-p8-n4",)
    assert matrix.path == path


def test_every_checked_in_matrix_loads():
    for path in sorted((ROOT / "matrix").glob("*.yaml")):
        assert load_matrix(path).cells, path


# ---- errors: one sentence naming the file, the field and the fix -------------------------


def test_missing_file_is_named_with_the_available_matrices(tmp_path):
    (tmp_path / "cpu.yaml").write_text("schema: 1\n")
    with pytest.raises(MatrixError, match=r"matrix file not found.*has: cpu\.yaml"):
        load_matrix(tmp_path / "gpu.yaml", models_dir=tmp_path)


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("schema: 1\nmodels: [a\n")
    with pytest.raises(MatrixError, match=r"not valid YAML at line \d+"):
        load_matrix(path, models_dir=tmp_path)


def test_an_empty_file_or_a_list_is_refused():
    assert "the file is empty" in error_of(None)
    assert "the file is a list" in error_of([1, 2])


def test_unknown_schema_is_refused_with_the_supported_one():
    assert "unknown schema 2" in error_of(base(schema=2))
    assert "add `schema: 1`" in error_of(base(schema=None))


def test_a_typo_d_axis_is_an_unknown_key_with_a_suggestion():
    data = base()
    data["prompt_lens"] = data.pop("prompt_len")
    message = error_of(data)
    assert "unknown key 'prompt_lens'" in message
    assert "did you mean 'prompt_len'?" in message


def test_a_missing_axis_says_how_to_add_it():
    assert "missing axis `dtypes`; add it as a list" in error_of(base(dtypes=None))


def test_an_empty_axis_is_refused():
    assert "devices: the axis is empty" in error_of(base(devices=[]))


def test_unknown_model_suggests_the_closest_name_and_the_file_to_add():
    message = error_of(base(models=["qwen2.5-0.5b", "qwen2.5-05b"]))
    assert "models[1]: unknown model 'qwen2.5-05b'" in message
    assert "did you mean 'qwen2.5-0.5b'?" in message
    assert "matrix/models/qwen2.5-05b.yaml" in message


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "CPU", 0])
def test_unknown_device_lists_the_accepted_forms(device):
    message = error_of(base(devices=[device]))
    assert f"unknown device {device!r}; use cpu, mps, cuda or cuda:N" in message


def test_unknown_dtype_suggests_the_closest():
    message = error_of(base(dtypes=["bf16", "float61"]))
    assert "dtypes[0]: unknown dtype 'bf16'" in message
    assert "use one of float32, float16, bfloat16" in message
    assert "did you mean 'float16'?" in error_of(base(dtypes=["float61"]))


@pytest.mark.parametrize(
    ("field", "value", "fix"),
    [
        ("batch", [0], "batch[0]: 0 is not valid; use a positive integer"),
        ("prompt_len", [-1], "prompt_len[0]: -1 is not valid; use a positive integer"),
        ("new_tokens", ["32"], "new_tokens[0]: '32' is not valid; use a positive integer"),
        ("new_tokens", [True], "new_tokens[0]: True is not valid"),
        ("rounds", 0, "rounds: 0 is not valid; use a positive integer"),
        ("warmup", -1, "warmup: -1 is not valid; use an integer >= 0"),
        ("seed", 1.5, "seed: 1.5 is not valid; use an integer >= 0"),
        ("min_timed_s", -5, "min_timed_s: -5 is not valid; use an integer >= 0"),
    ],
)
def test_non_positive_or_non_integer_counts_are_refused(field, value, fix):
    assert fix in error_of(base(**{field: value}))


def test_warmup_zero_is_allowed():
    assert parse(base(warmup=0)).warmup == 0


def test_a_value_listed_twice_would_duplicate_ids():
    assert "prompt_len[1]: 128 is listed twice" in error_of(base(prompt_len=[128, 128]))


def test_an_include_repeating_a_product_cell_is_a_duplicate_id():
    cell = parse(base()).cells[0].axes()
    message = error_of(base(include=[cell]))
    assert "cell 'qwen2.5-0.5b-cpu-float32-b1-p128-n32' appears twice" in message


def test_excluding_everything_is_an_empty_product():
    message = error_of(base(exclude=[{"device": "cpu"}]))
    assert "the matrix has no cells" in message


@pytest.mark.parametrize(
    ("exclude", "fix"),
    [
        ({"models": "smollm2-135m"}, "exclude[0]: unknown axis 'models' (did you mean 'model'?)"),
        ({"model": "llama-3.1-8b"}, "exclude[0].model: 'llama-3.1-8b' is not in the matrix's"),
        ({}, "exclude[0]: expected a non-empty mapping"),
        ("model", "exclude[0]: expected a non-empty mapping"),
    ],
)
def test_exclude_entries_are_checked(exclude, fix):
    assert fix in error_of(base(exclude=[exclude]))


def test_exclude_and_include_must_be_lists():
    assert "exclude must be a list" in error_of(base(exclude={"model": "x"}))
    assert "include must be a list" in error_of(base(include={"model": "x"}))


def test_include_entries_need_every_axis_and_valid_values():
    partial = {"model": "llama-3.1-8b", "device": "cpu", "dtype": "float16"}
    assert "include[0]: an included cell needs every axis; add batch, prompt_len, new_tokens" in (
        error_of(base(include=[partial]))
    )
    bad = {**partial, "batch": 1, "prompt_len": 8, "new_tokens": 0}
    assert "include[0].new_tokens: 0 is not valid" in error_of(base(include=[bad]))
    typo = {**partial, "batch": 1, "prompt_len": 8, "new_tokens": 2, "round": 2}
    assert "include[0]: unknown key 'round' (did you mean 'rounds'?)" in error_of(
        base(include=[typo])
    )


def test_measurements_default_to_every_timed_module():
    assert parse(base()).measurements == ("prefill", "decode", "generate", "overhead", "serve")


def test_measurements_select_timed_modules_in_file_order_without_repeats():
    matrix = parse(base(measurements=["generate", "prefill", "generate"]))
    assert matrix.measurements == ("generate", "prefill")


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        (["prefil"], "did you mean 'prefill'"),
        (["kv"], "allowed: prefill, decode, generate, overhead"),
        ([], "to run prefill, decode, generate, overhead, serve (interleaved only"),
        ("prefill", "non-empty list"),
    ],
)
def test_bad_measurements_name_the_field_and_the_fix(value, fix):
    message = error_of(base(measurements=value))
    assert "measurements" in message
    assert fix in message
