"""Roofline chart data: points at (FLOP/byte, achieved FLOP/s) under the device's roofs."""

from __future__ import annotations

import json
import math
import re

import pytest

from reports.cli import main
from reports.history.load import BenchmarkResult
from reports.render.html import roofline_data
from reports.render.roofline import Roof, RooflineChart
from tests.data.reports.make_history import Cell, current_spec, write_history

PEAKS = {
    "peak_flop_per_s": 1e12,
    "peak_bandwidth_bytes_per_s": 1e11,  # ridge at 10 FLOP/byte
    "peak_source": "measured:copy/matmul",
}


def bench(name: str, dtype: str = "float32", **extra) -> BenchmarkResult:
    return BenchmarkResult(
        fullname=f"benchmarks/test_x.py::test_x[{name}]",
        name=f"test_x[{name}]",
        group="x",
        params={"dtype": dtype},
        rounds_s=(1.0,),
        extra={"cell_id": name, **extra},
    )


PREFILL = {"prefill_flop": 1e9, "prefill_bytes": 1e7, "prefill_flop_per_s": 5e10, **PEAKS}
DECODE = {"decode_flop": 2e6, "decode_bytes": 4e6, "decode_step_s": 1e-3, **PEAKS}


def test_points_sit_at_flop_per_byte_and_achieved_flop_per_s_under_their_roof():
    chart = RooflineChart.from_benchmarks([bench("p", **PREFILL), bench("d", **DECODE)])
    prefill, decode = chart.points
    assert (prefill.cell_id, prefill.phase) == ("p", "prefill")
    assert prefill.intensity_flop_per_byte == pytest.approx(100.0)
    assert prefill.achieved_flop_per_s == pytest.approx(5e10)
    # right of the ridge: the compute ceiling
    assert prefill.attainable_flop_per_s == pytest.approx(1e12)
    assert prefill.pct_of_roof == pytest.approx(5.0)
    assert (decode.cell_id, decode.phase) == ("d", "decode")
    assert decode.intensity_flop_per_byte == pytest.approx(0.5)
    # decode achieved FLOP/s = decode_flop / decode_step_s
    assert decode.achieved_flop_per_s == pytest.approx(2e9)
    # left of the ridge: the bandwidth slope, 1e11 B/s x 0.5 FLOP/B
    assert decode.attainable_flop_per_s == pytest.approx(5e10)
    assert decode.pct_of_roof == pytest.approx(4.0)
    assert chart.roofs == (Roof("measured:copy/matmul", "float32", 1e12, 1e11),)
    assert chart.roofs[0].ridge_flop_per_byte == pytest.approx(10.0)


def test_one_roof_per_peak_source_and_dtype():
    chart = RooflineChart.from_benchmarks(
        [
            bench("a", **PREFILL),
            bench("b", **DECODE),
            bench("c", "bfloat16", **{**PREFILL, "peak_flop_per_s": 4e12}),
        ]
    )
    assert [r.label for r in chart.roofs] == [
        "measured:copy/matmul · float32",
        "measured:copy/matmul · bfloat16",
    ]
    assert [p.roof for p in chart.points] == [chart.roofs[0], chart.roofs[0], chart.roofs[1]]


def test_one_benchmark_with_both_phases_gives_two_points():
    chart = RooflineChart.from_benchmarks([bench("both", **{**PREFILL, **DECODE})])
    assert [p.phase for p in chart.points] == ["prefill", "decode"]


@pytest.mark.parametrize(
    "broken",
    [
        {"prefill_flop": None},
        {"prefill_bytes": 0},
        {"prefill_flop": True},
        {"prefill_flop": "n/a"},
        {"prefill_bytes": math.nan},
        {"prefill_flop_per_s": None},
    ],
)
def test_a_phase_without_positive_counts_and_rate_is_not_placed(broken):
    assert RooflineChart.from_benchmarks([bench("p", **{**PREFILL, **broken})]).points == ()


def test_history_without_counts_gives_no_chart():
    old = {k: v for k, v in PREFILL.items() if k not in ("prefill_flop", "prefill_bytes")}
    assert RooflineChart.from_benchmarks([bench("p", **old)]) == RooflineChart()


def test_prefill_rate_falls_back_to_flop_over_time_and_decode_to_the_bytes_rate():
    prefill = {**PREFILL, "prefill_flop_per_s": None, "prefill_s": 0.02}
    decode = {**DECODE, "decode_step_s": None, "decode_bytes_per_s": 4e9}
    chart = RooflineChart.from_benchmarks([bench("p", **prefill), bench("d", **decode)])
    assert [p.achieved_flop_per_s for p in chart.points] == pytest.approx([5e10, 2e9])


def test_unknown_peaks_keep_the_point_without_a_roof():
    unknown = {**PREFILL, "peak_flop_per_s": None, "peak_bandwidth_bytes_per_s": None}
    chart = RooflineChart.from_benchmarks([bench("p", **{**unknown, "peak_source": "n/a"})])
    (point,) = chart.points
    assert chart.roofs == ()
    assert point.roof is None
    assert point.attainable_flop_per_s is None
    assert point.pct_of_roof is None


def test_a_roof_with_one_known_peak_is_that_line_alone():
    bandwidth_only = Roof("table:Apple M2", "float16", None, 1e11)
    assert bandwidth_only.attainable_flop_per_s(100.0) == pytest.approx(1e13)
    assert bandwidth_only.ridge_flop_per_byte is None
    compute_only = Roof("table:x", "float16", 1e12, None)
    assert compute_only.attainable_flop_per_s(0.01) == pytest.approx(1e12)


def test_chart_json_numbers_points_and_refers_to_roofs_by_index():
    chart = RooflineChart.from_benchmarks([bench("p", **PREFILL), bench("d", **DECODE)])
    data = roofline_data(chart)
    assert data["roofs"] == [{"label": "measured:copy/matmul · float32", "flop": 1e12, "bw": 1e11}]
    assert [(p["n"], p["phase"], p["cell"], p["roof"]) for p in data["points"]] == [
        (1, "prefill", "p", 0),
        (2, "decode", "d", 0),
    ]
    assert data["points"][0]["x"] == pytest.approx(100.0)
    assert data["points"][1]["y"] == pytest.approx(2e9)


def test_the_html_report_has_a_roofline_chart_of_the_current_run(tmp_path):
    write_history(
        tmp_path / "h",
        3,
        cells=(Cell(prompt_len=32, new_tokens=4), Cell(batch=4, prompt_len=256)),
        current=current_spec(days_after=5),
    )
    assert main(["render", "--history", str(tmp_path / "h"), "--out", str(tmp_path / "o")]) == 0
    page = (tmp_path / "o" / "index.html").read_text(encoding="utf-8")
    assert 'data-kind="roofline"' in page
    raw = re.search(r'<script type="application/json" id="chart-data">(.*?)</script>', page, re.S)
    assert raw is not None
    roofline = json.loads(raw.group(1))[0]["roofline"]["r0"]
    # two cells, each with a prefill and a decode benchmark: four points, one roof
    assert sorted((p["phase"], p["cell"]) for p in roofline["points"]) == [
        ("decode", "tiny-llama-cpu-float32-b1-p32-n4"),
        ("decode", "tiny-llama-cpu-float32-b4-p256-n16"),
        ("prefill", "tiny-llama-cpu-float32-b1-p32-n4"),
        ("prefill", "tiny-llama-cpu-float32-b4-p256-n16"),
    ]
    assert len(roofline["roofs"]) == 1
    assert "% of roof" in page
