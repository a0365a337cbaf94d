"""The capacity view on synthetic serving records with known figures: the rows, the Pareto
frontier, where the SLO and capacity lines sit, escaping, and the section as well-formed markup.

`python -m tests.reports.render.test_capacity [PATH]` writes a sample page (default
/tmp/capacity_sample.html) with the report's CSS, to look at in a browser:
`chromium --headless --screenshot=/tmp/cap.png --window-size=1200,900 file:///tmp/capacity_sample.html`.
"""

from __future__ import annotations

import itertools
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from reports.history.runfile import BenchmarkResult
from reports.render.capacity import (
    capacity_rows,
    capacity_section_html,
    frontier,
    latency_svg,
    pareto_points,
    pareto_svg,
)
from reports.render.svgplot import linear_ticks, log_ticks

SVG = "{http://www.w3.org/2000/svg}"
CELL = {"model": "tiny-llama", "device": "cpu", "dtype": "float32", "batch": 1,
        "prompt_len": 64, "new_tokens": 32}  # fmt: skip
SLOS = {"slo_ttft_s": 0.5, "slo_tpot_s": 0.05, "slo_e2el_s": None}


def bench(params, extra, measurement="serve"):
    cell_id = "-".join(str(v) for v in params.values())
    name = f"test_serve[{cell_id}]"
    return BenchmarkResult(
        fullname=f"benchmarks/test_serve.py::{name}",
        name=name,
        group="serve",
        params=params,
        rounds_s=(1.0,),
        extra={"measurement": measurement, "cell_id": cell_id, **extra},
    )


def probe(rate, share, ttft, tpot, tok, *, requests=24):
    return {"rate_req_per_s": rate, "slo_met_share": share, "requests": requests,
            "ttft_p90_s": ttft, "tpot_p50_s": tpot, "e2el_p50_s": ttft + 31 * tpot,
            "output_throughput_tok_per_s": tok}  # fmt: skip


def capacity_cell(serve, batching, probes, rate, bracket, *, stopped="bracketed", cell=CELL):
    params = {**cell, "serve": serve, "continuous_batching": batching, "request_rate": "sla"}
    extra = {"sla_rate_req_per_s": rate, "sla_bracket": list(bracket), "sla_probes": probes,
             "sla_share": 0.9, "sla_stopped": stopped, "sla_non_monotone": False,
             **SLOS}  # fmt: skip
    return bench(params, extra)


def rate_cell(serve, batching, rate, tok, tpot, *, cell=CELL):
    params = {**cell, "serve": serve, "continuous_batching": batching, "request_rate": rate}
    extra = {"request_throughput_req_per_s": tok and tok / 32, "output_throughput_tok_per_s": tok,
             "tpot_p50_s": tpot, "requests_completed": 12, "load_max_concurrency": 4}  # fmt: skip
    return bench(params, extra)


# Continuous batching holds about 6 req/s; one request at a time about 1.2 req/s.
# (rate req/s, share met, TTFT p90 s, TPOT p50 s, output tok/s) of each pass, in order.
BATCHED_PROBES = [
    probe(*figures)
    for figures in ((8.0, 0.42, 1.9, 0.045, 205.0), (4.0, 1.0, 0.12, 0.030, 126.0),
                    (5.657, 0.917, 0.30, 0.038, 178.0), (5.657, 0.958, 0.28, 0.037, 179.0))
]  # fmt: skip
SINGLE_PROBES = [
    probe(*figures)
    for figures in ((4.0, 0.0, 9.0, 0.0202, 45.0), (2.0, 0.21, 3.1, 0.0201, 44.0),
                    (1.0, 1.0, 0.35, 0.0200, 32.0), (1.414, 0.625, 0.9, 0.0201, 42.0))
]  # fmt: skip


def sample_records():
    return [
        capacity_cell("transformers", True, BATCHED_PROBES, 5.657, (5.657, 8.0)),
        capacity_cell("transformers", False, SINGLE_PROBES, 1.0, (1.0, 1.414)),
        *(rate_cell("transformers", True, r, tok, tpot)
          for r, tok, tpot in ((1, 32.0, 0.022), (2, 63.0, 0.025), (4, 125.0, 0.030),
                               ("inf", 230.0, 0.060))),
        *(rate_cell("transformers", False, r, tok, tpot)
          for r, tok, tpot in ((1, 32.0, 0.0200), (2, 44.0, 0.0201), (4, 45.0, 0.0202),
                               ("inf", 46.0, 0.0199))),
        bench(CELL, {"prefill_s": 0.01}, measurement="prefill"),
    ]  # fmt: skip


def write_sample(path: Path) -> Path:
    """A page with the report's CSS and the sample section."""
    css = (Path(__file__).resolve().parents[3] / "reports/render/static/report.css").read_text()
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><style>{css}</style></head>"
        f"<body><main>{capacity_section_html(sample_records())}</main></body></html>"
    )
    path.write_text(page, encoding="utf-8")
    return path


def parse(markup: str) -> ET.Element:
    """The markup as XML: it must be well-formed (escaped text, closed elements)."""
    return ET.fromstring(markup)


def test_a_capacity_cell_becomes_a_row_and_other_records_do_not():
    rows = capacity_rows(sample_records())
    assert [r.title for r in rows] == [
        "tiny-llama cpu float32 b1 p64 n32 serve=transformers continuous_batching=True",
        "tiny-llama cpu float32 b1 p64 n32 serve=transformers continuous_batching=False",
    ]
    batched = rows[0]
    assert batched.sla_rate_req_per_s == 5.657
    assert batched.bracket == (5.657, 8.0)
    assert batched.share == 0.9
    assert batched.slos == SLOS
    assert [p.rate_req_per_s for p in batched.probes] == [8.0, 4.0, 5.657, 5.657]
    assert [p.met for p in batched.probes] == [False, True, True, True]
    assert batched.probes[0].figures["ttft_p90_s"] == 1.9
    assert batched.capacity_text == "5.66"
    assert batched.bracket_text == "[5.66, 8]"
    assert batched.slo_text == "TTFT ≤ 500 ms · TPOT ≤ 50 ms"
    assert batched.share_text == "90 %"


def test_the_texts_say_an_open_side_and_no_capacity():
    met_at_top = capacity_cell("vllm", True, [probe(8.0, 1.0, 0.1, 0.02, 250.0)], 8.0, (8.0, None),
                               stopped="met at the highest rate allowed")  # fmt: skip
    none_met = capacity_cell("vllm", False, [probe(0.5, 0.2, 2.0, 0.02, 16.0)], 0.0, (None, 0.5),
                             stopped="missed at the lowest rate allowed")  # fmt: skip
    top, bottom = capacity_rows([met_at_top, none_met])
    assert top.capacity_text == "≥ 8"
    assert top.bracket_text == "[8, —]"
    assert bottom.capacity_text == "0 (none met)"
    assert bottom.bracket_text == "[—, 0.5]"
    assert bottom.stopped == "missed at the lowest rate allowed"


def test_a_pass_at_the_share_meets_and_one_without_a_share_has_no_verdict():
    probes = [probe(1.0, 9 / 10, 0.1, 0.02, 30.0, requests=10), probe(2.0, 0.89, 0.1, 0.02, 60.0),
              {**probe(3.0, 0.5, 0.1, 0.02, 90.0), "slo_met_share": None},
              {"rate_req_per_s": None}, "not a probe", {"rate_req_per_s": 0}]  # fmt: skip
    (row,) = capacity_rows([capacity_cell("t", True, probes, 1.0, (1.0, 2.0))])
    assert [(p.rate_req_per_s, p.met) for p in row.probes] == [(1.0, True), (2.0, False),
                                                               (3.0, None)]  # fmt: skip


def test_the_frontier_is_the_points_nothing_dominates():
    points = [(1.0, 10.0), (2.0, 8.0), (3.0, 3.0), (2.0, 2.0), (3.0, 3.0), (1.0, 9.0)]
    # (2, 2) is under (2, 8); (1, 9) under (1, 10); the two (3, 3) tie and both stay.
    assert frontier(points) == {0, 1, 2, 4}
    assert frontier([]) == set()


def test_pareto_points_take_every_pass_and_judge_the_frontier_per_series():
    points = pareto_points(sample_records())
    assert len(points) == 16  # 4 + 4 probes, 4 + 4 fixed-rate cells; the prefill record not
    batched = [p for p in points if p.series == "transformers · continuous batching on"]
    single = [p for p in points if p.series == "transformers · continuous batching off"]
    assert len(batched) == len(single) == 8
    inf = next(p for p in batched if p.label == "rate inf (all at once)")
    assert inf.output_tok_per_s == 230.0
    assert inf.per_user_tok_per_s == pytest.approx(1 / 0.060)
    # Batched, (tok/s, tok/s per user): inf (230, 16.7), probe 8 (205, 22.2), probe 5.66 twice
    # (178, 26.3) and (179, 27.0), probe 4 (126, 33.3), rate 4 (125, 33.3), rate 2 (63, 40),
    # rate 1 (32, 45.5). The first pass at 5.66 is under the second, rate 4 under probe 4.
    assert {(p.label, p.output_tok_per_s) for p in batched if not p.frontier} == {
        ("capacity probe 5.66 req/s", 178.0),
        ("rate 4 req/s", 125.0),
    }
    # One at a time: inf gives the most of both (46 tok/s, 50.3 per user); all else is under.
    assert [p.label for p in single if p.frontier] == ["rate inf (all at once)"]
    # Judged per series: the batched points would bury the single ones' frontier otherwise.


def test_passes_without_a_throughput_or_a_positive_tpot_are_left_out_and_workloads_apart():
    other = {**CELL, "model": "other"}
    records = [rate_cell("t", True, 1, 32.0, None), rate_cell("t", True, 2, None, 0.02),
               rate_cell("t", True, 4, 120.0, 0.0), rate_cell("t", True, 8, 200.0, 0.05),
               rate_cell("t", True, 8, 100.0, 0.10, cell=other)]  # fmt: skip
    points = pareto_points(records)
    kept = [(p.workload.split()[0], p.output_tok_per_s) for p in points]
    assert kept == [("tiny-llama", 200.0), ("other", 100.0)]
    assert all(p.frontier for p in points)  # each alone in its workload


def test_a_pareto_chart_draws_passes_of_no_throughput_and_says_when_there_is_none():
    root = parse(pareto_svg(pareto_points([rate_cell("t", True, 1, 0.0, 0.02)])))
    assert len(list(root.iter(f"{SVG}g"))) == 1
    assert "no pass" in "".join(parse(pareto_svg([])).itertext())


def svg_of(row, metric):
    root = parse(latency_svg(row, metric))
    assert root.tag == f"{SVG}svg"
    return root


def test_the_slo_line_sits_at_its_latency_and_the_capacity_line_at_its_rate():
    row = capacity_rows(sample_records())[0]
    root = svg_of(row, "ttft_p90_s")
    (slo,) = [e for e in root.iter(f"{SVG}line") if e.get("data-role") == "slo"]
    (cap,) = [e for e in root.iter(f"{SVG}line") if e.get("data-role") == "capacity"]
    assert slo.get("stroke-dasharray")
    frame = root.find(f"{SVG}rect[@fill='none']")
    bottom_px = float(frame.get("y")) + float(frame.get("height"))
    groups = list(root.iter(f"{SVG}g"))
    assert len(groups) == 4
    assert sorted(g.get("class") for g in groups) == ["probe met"] * 3 + ["probe missed"]
    slo_px = float(slo.get("y1"))
    for group in groups:
        value_ms = float(group.get("data-value"))
        mark = group.find(f"{SVG}circle")
        if mark is None:  # a cross: its centre is the middle of its path's first stroke
            coords = [float(v) for v in re.findall(r"[-\d.]+", group.find(f"{SVG}path").get("d"))]
            y_px = (coords[1] + coords[3]) / 2
        else:
            y_px = float(mark.get("cy"))
        # Heights above the axis are proportional to the values, the SLO line's to 500 ms
        # (to the SVG's 0.1 px rounding).
        height_px = (bottom_px - slo_px) * value_ms / 500
        assert bottom_px - y_px == pytest.approx(height_px, abs=0.2)
        assert (y_px > slo_px) == (value_ms < 500)  # under the SLO lies lower on the page
    # The capacity line lies between the passes at 4 and 8 req/s, at 5.657 on the log axis.
    xs = {float(g.get("data-rate")): g for g in groups}
    assert set(xs) == {4.0, 8.0, 5.657}
    cap_px = float(cap.get("x1"))
    circle_4 = float(xs[4.0].find(f"{SVG}circle").get("cx"))
    circle_5 = float(xs[5.657].find(f"{SVG}circle").get("cx"))
    assert circle_4 < cap_px
    assert cap_px == pytest.approx(circle_5, abs=0.1)
    assert "TTFT p90 of each capacity probe" in root.get("aria-label")
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "TTFT p90 (ms)" in texts
    assert "offered rate (req/s, log scale)" in texts
    assert "SLO 500 ms" in texts


def test_the_tpot_chart_holds_the_tpot_slo_and_a_chart_without_an_slo_has_no_line():
    row = capacity_rows(sample_records())[0]
    root = svg_of(row, "tpot_p50_s")
    assert "SLO 50 ms" in [t.text for t in root.iter(f"{SVG}text")]
    e2el = svg_of(row, "e2el_p50_s")
    assert not [e for e in e2el.iter(f"{SVG}line") if e.get("data-role") == "slo"]
    with pytest.raises(ValueError, match="ttft_p90_s"):
        latency_svg(row, "ttft_p50_s")


def tick_labels_apart(root, min_gap_px):
    """The x tick labels (on one baseline, centred) are at least `min_gap_px` apart."""
    by_y: dict[str, list[float]] = {}
    for text in root.iter(f"{SVG}text"):
        if text.get("text-anchor") == "middle" and text.get("font-size") == "10":
            by_y.setdefault(text.get("y"), []).append(float(text.get("x")))
    (xs,) = by_y.values()
    xs.sort()
    assert len(xs) >= 2
    assert all(b - a >= min_gap_px for a, b in itertools.pairwise(xs))


def test_ticks_are_round_numbers_that_cover_the_range():
    assert linear_ticks(525.0) == (600.0, [0.0, 200.0, 400.0, 600.0])
    assert linear_ticks(0.0216)[0] == pytest.approx(0.025)
    assert log_ticks(0.7, 5.4) == [1.0, 2.0, 5.0]
    assert log_ticks(2.2, 10.8) == [3.0, 5.0, 7.0, 10.0]  # 1-2-5 gives two: finer


def test_axis_labels_do_not_crowd():
    for row in capacity_rows(sample_records()):
        tick_labels_apart(svg_of(row, "ttft_p90_s"), 30)
    tick_labels_apart(parse(pareto_svg(pareto_points(sample_records()))), 34)


def test_every_text_from_a_record_is_escaped():
    evil = {**CELL, "model": '<script>alert("x")</script>&'}
    records = [
        capacity_cell("t<b>", True, BATCHED_PROBES, 5.657, (5.657, 8.0), cell=evil),
        rate_cell('s"><i>', False, 2, 40.0, 0.02, cell=evil),
    ]
    html = capacity_section_html(records)
    assert "<script>" not in html
    assert "<b>" not in html
    assert "<i>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in html
    parse(html)  # still well-formed: nothing broke out of an attribute


def test_the_section_is_empty_without_a_serving_record():
    assert capacity_section_html([]) == ""
    assert capacity_section_html([bench(CELL, {"prefill_s": 0.01}, measurement="prefill")]) == ""


def test_serving_records_without_a_capacity_cell_give_the_pareto_view_alone():
    html = capacity_section_html([rate_cell("t", True, 2, 60.0, 0.02)])
    root = parse(html)
    assert root.tag == "section"
    assert "No capacity cell in this run" in html
    assert root.find(".//table") is None
    assert len(list(root.iter(f"{SVG}svg"))) == 1


def test_the_section_holds_the_heading_the_table_and_the_charts():
    root = parse(capacity_section_html(sample_records()))
    assert root.get("id") == "capacity"
    assert root.find("h3").text == "Capacity within the SLOs (current run)"
    headers = ["".join(th.itertext()) for th in root.find(".//thead").iter("th")]
    assert headers == ["cell", "SLOs", "share", "capacity (req/s)", "bracket (req/s)", "probes"]
    cells = [["".join(c.itertext()) for c in tr] for tr in root.find(".//tbody")]
    assert cells[0][1:] == ["TTFT ≤ 500 ms · TPOT ≤ 50 ms", "90 %", "5.66", "[5.66, 8]", "4"]
    assert cells[1][3:] == ["1", "[1, 1.41]", "4"]
    # Two latency charts per capacity cell (no E2EL SLO), one Pareto chart for the workload.
    assert len(list(root.iter(f"{SVG}svg"))) == 2 * 2 + 1
    assert all(svg.get("aria-label") for svg in root.iter(f"{SVG}svg"))


def test_a_sample_page_renders(tmp_path):
    page = write_sample(tmp_path / "capacity.html").read_text(encoding="utf-8")
    assert "Capacity within the SLOs" in page
    assert page.count("<svg") == 5


if __name__ == "__main__":
    print(write_sample(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/capacity_sample.html")))
