"""The serving axes (DESIGN §13): ids extend only when named, values checked, misuse refused."""

from __future__ import annotations

import math

import pytest

from benchmarks.harness.matrix.cells import Cell
from tests.harness.matrix.test_matrix import base, error_of, parse


def test_a_matrix_without_serving_axes_keeps_its_ids_and_params():
    plain = parse(base())
    assert plain.ids[0] == "qwen2.5-0.5b-cpu-float32-b1-p128-n32"
    assert "serve" not in plain.cells[0].axes()


def test_serving_axes_join_the_id_and_params_in_a_fixed_order():
    matrix = parse(
        base(
            models=["smollm2-135m"], dtypes=["float32"], prompt_len=[128],
            serve=["transformers"], continuous_batching=[False, True],
            request_rate=[2, "inf"], max_concurrency=8, num_prompts=[32], slo_tpot_ms=[50],
        )
    )  # fmt: skip
    assert list(matrix.ids) == [
        "smollm2-135m-cpu-float32-b1-p128-n32-serve_transformers-cb_off-rate_2-conc_8-np_32"
        "-slo_tpot_50ms",
        "smollm2-135m-cpu-float32-b1-p128-n32-serve_transformers-cb_off-rate_inf-conc_8-np_32"
        "-slo_tpot_50ms",
        "smollm2-135m-cpu-float32-b1-p128-n32-serve_transformers-cb_on-rate_2-conc_8-np_32"
        "-slo_tpot_50ms",
        "smollm2-135m-cpu-float32-b1-p128-n32-serve_transformers-cb_on-rate_inf-conc_8-np_32"
        "-slo_tpot_50ms",
    ]
    cell = matrix.cells[1]
    assert cell.request_rate == math.inf
    assert cell.axes()["request_rate"] == "inf"  # JSON has no infinity
    assert cell.axes()["continuous_batching"] is False
    assert Cell.from_params(cell.to_params()) == cell
    # Cells of one server (model, device, dtype, serve, cb) build together.
    assert cell.build_key == matrix.cells[0].build_key != matrix.cells[2].build_key


def test_yaml_inf_and_include_entries_work_like_the_product():
    matrix = parse(
        base(
            models=["smollm2-135m"], dtypes=["float32"], prompt_len=[128],
            include=[{"model": "smollm2-135m", "device": "cpu", "dtype": "float32", "batch": 1,
                      "prompt_len": 128, "new_tokens": 32, "serve": "url",
                      "request_rate": [math.inf, 0.5]}],
        )
    )  # fmt: skip
    assert list(matrix.ids[1:]) == [
        "smollm2-135m-cpu-float32-b1-p128-n32-serve_url-rate_inf",
        "smollm2-135m-cpu-float32-b1-p128-n32-serve_url-rate_0.5",
    ]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("serve", ["sglang"], "serve[0]: unknown serve 'sglang'; use one of transformers, vllm"),
        ("continuous_batching", ["yes"], "continuous_batching[0]: 'yes' is not valid; use true"),
        ("request_rate", [0], "request_rate[0]: 0 is not valid; use a number > 0 or inf"),
        ("max_concurrency", [1.5], "max_concurrency[0]: 1.5 is not valid; use a whole number"),
        ("num_prompts", [True], "num_prompts[0]: True is not valid"),
        ("slo_ttft_ms", [math.inf], "slo_ttft_ms[0]: inf is not valid; use a number > 0"),
        ("request_rate", [2, 2.0], "request_rate[1]: 2.0 is listed twice"),
        ("burstiness", [], "burstiness: the axis is empty"),
    ],
)
def test_bad_serving_values_name_the_field_and_the_fix(field, value, message):
    assert message in error_of(base(**{"serve": ["transformers"], field: value}))


def test_a_serving_axis_without_serve_and_a_batched_serving_cell_are_refused():
    assert "request_rate apply to serving cells only; add `serve: [transformers]`" in error_of(
        base(request_rate=[1])
    )
    assert "a serving cell sends one prompt per request; set `batch: [1]`" in error_of(
        base(serve=["transformers"], batch=[1, 4])
    )
