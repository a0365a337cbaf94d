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
        ("request_rate", [0], "request_rate[0]: 0 is not valid; use requests per second > 0, inf"),
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


def test_capacity_and_workload_axes_join_the_id_after_the_first_pass_axes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "chat.jsonl").write_text('{"prompt_len": 40, "output_len": 8}\n')
    matrix = parse(
        base(
            models=["smollm2-135m"], dtypes=["float32"], prompt_len=[128],
            serve=["transformers"], request_rate=["sla", 4], slo_ttft_ms=[500],
            range_ratio=[0.5], prefix_len=[32],
            include=[{"model": "smollm2-135m", "device": "cpu", "dtype": "float32", "batch": 1,
                      "prompt_len": 128, "new_tokens": 32, "serve": "url",
                      "request_rate": "sla", "sla_share": 0.95, "slo_tpot_ms": 40,
                      "dataset": "chat.jsonl"}],
        )
    )  # fmt: skip
    assert list(matrix.ids) == [
        "smollm2-135m-cpu-float32-b1-p128-n32-serve_transformers-rate_sla-slo_ttft_500ms-rr_0.5"
        "-prefix_32",
        "smollm2-135m-cpu-float32-b1-p128-n32-serve_transformers-rate_4-slo_ttft_500ms-rr_0.5"
        "-prefix_32",
        "smollm2-135m-cpu-float32-b1-p128-n32-serve_url-rate_sla-slo_tpot_40ms-share_0.95-ds_chat",
    ]
    capacity = matrix.cells[0]
    assert capacity.request_rate == "sla"
    assert capacity.axes()["request_rate"] == "sla"
    assert Cell.from_params(capacity.to_params()) == capacity
    assert matrix.cells[2].dataset == "chat.jsonl"


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        (
            {"request_rate": ["sla"]},
            "request_rate sla searches the highest rate that meets the "
            "SLOs, and the cell has none; add slo_ttft_ms",
        ),
        (
            {"request_rate": [2], "slo_ttft_ms": [500], "sla_share": [0.9]},
            "sla_share applies to `request_rate: sla` cells only",
        ),
        (
            {"request_rate": ["fast"]},
            "request_rate[0]: 'fast' is not valid; use requests per second > 0, inf, or sla",
        ),
        ({"sla_share": [1.0]}, "sla_share[0]: 1.0 is not valid; use a fraction > 0 and < 1"),
        ({"range_ratio": [-0.1]}, "range_ratio[0]: -0.1 is not valid; use a fraction >= 0"),
        ({"prefix_len": [128]}, "prefix_len 128 leaves no prompt of its own (P = 128)"),
        ({"dataset": ["missing.jsonl"]}, "dataset missing.jsonl: no such file"),
        (
            {"dataset": ["d.jsonl"], "range_ratio": [0.2]},
            "a dataset gives each request its own lengths; remove range_ratio",
        ),
    ],
)
def test_capacity_and_workload_misuse_is_refused_with_the_fix(axes, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.jsonl").write_text('{"prompt_len": 4, "output_len": 2}\n')
    assert message in error_of(base(serve=["transformers"], **axes))
