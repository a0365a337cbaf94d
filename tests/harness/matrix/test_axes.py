"""Run-mode axes in a matrix (DESIGN §9): optional, in the id only when present, validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.errors import MatrixError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.matrix.parse import load_matrix, parse_matrix

ROOT = Path(__file__).resolve().parents[3]
KNOWN = ("tiny-llama", "qwen2.5-0.5b")
WHERE = Path("matrix/test.yaml")

# The history keys of the shipped matrices' cells without run-mode axes: they must never change.
CPU_IDS = (
    "smollm2-135m-cpu-float32-b1-p128-n32",
    "smollm2-135m-cpu-float32-b1-p512-n32",
    "smollm2-135m-cpu-bfloat16-b1-p128-n32",
    "smollm2-135m-cpu-bfloat16-b1-p512-n32",
    "qwen2.5-0.5b-cpu-float32-b1-p128-n32",
    "qwen2.5-0.5b-cpu-float32-b1-p512-n32",
    "qwen2.5-0.5b-cpu-bfloat16-b1-p128-n32",
    "qwen2.5-0.5b-cpu-bfloat16-b1-p512-n32",
)
SMOKE_IDS = (
    "tiny-llama-cpu-float32-b1-p24-n8",
    "tiny-llama-cpu-float32-b2-p24-n8",
    "tiny-llama-cpu-bfloat16-b1-p24-n8",
    "tiny-llama-cpu-bfloat16-b2-p24-n8",
    "tiny-qwen2-sw-cpu-float32-b1-p24-n8",
    "tiny-qwen2-sw-cpu-bfloat16-b1-p24-n8",
    "tiny-mistral-sw-cpu-float32-b1-p24-n8",
    "tiny-mistral-sw-cpu-bfloat16-b1-p24-n8",
    "tiny-gemma2-cpu-float32-b1-p24-n8",
    "tiny-gemma2-cpu-bfloat16-b1-p24-n8",
    "tiny-gpt2-cpu-float32-b1-p24-n8",
    "tiny-gpt2-cpu-bfloat16-b1-p24-n8",
)


def base(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema": 1,
        "models": ["tiny-llama"],
        "devices": ["cpu"],
        "dtypes": ["float32"],
        "batch": [1],
        "prompt_len": [16],
        "new_tokens": [4],
    }
    data.update(overrides)
    return data


def parse(data: Any) -> Any:
    return parse_matrix(data, path=WHERE, known_models=KNOWN)


def error_of(data: Any) -> str:
    with pytest.raises(MatrixError) as info:
        parse(data)
    message = str(info.value)
    assert message.startswith(str(WHERE)), "every message names the file first"
    return message


def test_the_main_job_ids_are_unchanged():
    assert load_matrix(ROOT / "matrix" / "cpu.yaml").ids == CPU_IDS


def test_the_smoke_matrix_keeps_its_old_cells_and_adds_run_mode_cells_of_one_model():
    ids = load_matrix(ROOT / "matrix" / "smoke.yaml").ids
    assert ids[: len(SMOKE_IDS)] == SMOKE_IDS
    cells = load_matrix(ROOT / "matrix" / "smoke.yaml").cells[len(SMOKE_IDS) :]
    # The tp-2 cell is tests/harness/matrix/test_tp_axis.py's; the rest are run-mode cells.
    added = [cell for cell in cells if cell.tp is None]
    assert len(added) == len(cells) - 1
    assert len({cell.model for cell in added}) == 1
    assert {(c.attention, c.cache, c.compile) for c in added} == {
        (a, k, c)
        for a in ("sdpa", "eager")
        for k in ("dynamic", "static")
        for c in ("none", "default")
    }


def test_without_run_mode_axes_cells_have_none_and_the_old_ids_params_and_build_key():
    cell = parse(base()).cells[0]
    assert (cell.attention, cell.cache, cell.compile, cell.max_cache_len) == (None,) * 4
    assert cell.id == "tiny-llama-cpu-float32-b1-p16-n4"
    assert set(cell.axes()) == {"model", "device", "dtype", "batch", "prompt_len", "new_tokens"}
    assert cell.build_key == ("tiny-llama", "cpu", "float32")
    assert cell.cache_positions is None


def test_run_mode_axes_expand_innermost_and_join_the_id_params_and_build_key():
    matrix = parse(base(attention=["sdpa", "eager"], cache=["dynamic", "static"], compile="none"))
    assert matrix.ids == (
        "tiny-llama-cpu-float32-b1-p16-n4-attn_sdpa-cache_dynamic-compile_none",
        "tiny-llama-cpu-float32-b1-p16-n4-attn_sdpa-cache_static-compile_none",
        "tiny-llama-cpu-float32-b1-p16-n4-attn_eager-cache_dynamic-compile_none",
        "tiny-llama-cpu-float32-b1-p16-n4-attn_eager-cache_static-compile_none",
    )
    static = matrix.cells[1]
    assert static.axes() == {
        "model": "tiny-llama", "device": "cpu", "dtype": "float32", "batch": 1,
        "prompt_len": 16, "new_tokens": 4,
        "attention": "sdpa", "cache": "static", "compile": "none",
    }  # fmt: skip
    assert static.build_key == (
        "tiny-llama",
        "cpu",
        "float32",
        "attention=sdpa",
        "cache=static",
        "compile=none",
    )
    assert Cell.from_params(static.to_params()) == static
    # P + N - 1 = 19 positions, the final cache.
    assert static.cache_positions == 19


def test_only_the_named_axes_join_the_id():
    assert parse(base(compile=["default"])).ids == (
        "tiny-llama-cpu-float32-b1-p16-n4-compile_default",
    )
    assert parse(base(cache="static")).ids == ("tiny-llama-cpu-float32-b1-p16-n4-cache_static",)


def test_max_cache_len_sizes_static_cells_only_and_joins_their_id():
    matrix = parse(base(cache=["dynamic", "static"], max_cache_len=64))
    dynamic, static = matrix.cells
    assert (dynamic.max_cache_len, dynamic.cache_positions) == (None, None)
    assert (static.max_cache_len, static.cache_positions) == (64, 64)
    assert static.id == "tiny-llama-cpu-float32-b1-p16-n4-cache_static-len64"
    assert static.axes()["max_cache_len"] == 64


def test_one_new_token_still_leaves_room_for_the_decode_step():
    cell = parse(base(cache="static", new_tokens=[1])).cells[0]
    assert cell.cache_positions == 17  # P + 1


def test_include_entries_may_list_values_and_add_their_product():
    entry = {
        "model": "tiny-llama", "device": "cpu", "dtype": "float32", "batch": 2,
        "prompt_len": 8, "new_tokens": 4,
        "attention": ["sdpa", "eager"], "compile": ["none", "default"],
    }  # fmt: skip
    matrix = parse(base(include=[entry]))
    assert matrix.ids[1:] == (
        "tiny-llama-cpu-float32-b2-p8-n4-attn_sdpa-compile_none",
        "tiny-llama-cpu-float32-b2-p8-n4-attn_sdpa-compile_default",
        "tiny-llama-cpu-float32-b2-p8-n4-attn_eager-compile_none",
        "tiny-llama-cpu-float32-b2-p8-n4-attn_eager-compile_default",
    )


def test_exclude_may_name_run_mode_axes_of_the_matrix():
    matrix = parse(
        base(cache=["dynamic", "static"], compile=["none", "default"],
             exclude=[{"cache": "dynamic", "compile": "default"}])
    )  # fmt: skip
    assert matrix.excluded == 1
    assert "tiny-llama-cpu-float32-b1-p16-n4-cache_dynamic-compile_default" not in matrix.ids


@pytest.mark.parametrize(
    ("overrides", "fix"),
    [
        ({"attention": ["spda"]}, "attention[0]: unknown attention 'spda' (did you mean 'sdpa'?)"),
        ({"compile": ["reduce_overhead"]}, "did you mean 'reduce-overhead'?"),
        ({"cache": []}, "cache: the axis is empty"),
        ({"cache": ["static", "static"]}, "cache[1]: 'static' is listed twice"),
        ({"compile": [None]}, "compile[0]: unknown compile None"),
        (
            {"max_cache_len": 64},
            "max_cache_len sizes static caches, but no cell has `cache: static`",
        ),
        ({"cache": "static", "max_cache_len": 18}, "max_cache_len 18 is below the 19 positions"),
        ({"max_cache_len": 0, "cache": "static"}, "max_cache_len: 0 is not valid"),
        ({"exclude": [{"attention": "sdpa"}]}, "exclude[0]: unknown axis 'attention'"),
    ],
)
def test_bad_run_mode_input_names_the_field_and_the_fix(overrides, fix):
    assert fix in error_of(base(**overrides))
