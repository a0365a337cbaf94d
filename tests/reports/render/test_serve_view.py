"""The serving view: one table per group of cells, rows by rate, where the SLOs stop being met."""

from __future__ import annotations

from reports.history.runfile import BenchmarkResult
from reports.render.serve import file_url, serve_tables


def _record(rate: object, **extra: object) -> BenchmarkResult:
    return BenchmarkResult.from_json(
        {
            "group": "serve",
            "name": f"test_serve[c-{rate}]",
            "fullname": f"benchmarks/test_serve.py::test_serve[c-{rate}]",
            "params": {"model": "tiny-llama", "serve": "transformers", "request_rate": rate},
            "extra_info": {"schema": 1, "cell_id": f"c-{rate}", "measurement": "serve", **extra},
            "stats": {"data": [1.0, 1.1]},
        }
    )


def test_falloff_reads_the_share_of_requests_meeting_the_slos_not_goodput_over_the_rate():
    # 12 requests at 8 req/s: goodput over the rate reads ~80 % on a server that met every SLO.
    rows = [
        _record(2, goodput_req_per_s=1.7, slo_met_share=1.0, requests=12),
        _record(8, goodput_req_per_s=6.4, slo_met_share=1.0, requests=12),
        _record("inf", goodput_req_per_s=3.0, slo_met_share=0.5, requests=12),
    ]
    (table,) = serve_tables(rows)
    assert [r.rate_text for r in table.rows] == ["2", "8", "inf"]
    assert table.rows[1].goodput_share == 1.0
    assert table.falloff == (
        "goodput holds up to 8 req/s; falls off at rate inf: 50% of requests met the SLOs "
        "(3.00 req/s)"
    )


def test_records_from_before_the_share_still_read_goodput_over_the_offered_rate():
    (table,) = serve_tables([_record(8, goodput_req_per_s=4.0, requests=12)])
    assert table.rows[0].goodput_share == 0.5
    assert "falls off at rate 8: 4.00 req/s (50% of offered)" in table.falloff


def test_capacity_cells_are_left_to_the_capacity_view_and_rows_link_their_requests(tmp_path):
    export = tmp_path / "c.requests.jsonl"
    rows = [
        _record(4, slo_met_share=1.0, serve_requests_file=str(export)),
        _record("sla", sla_probes=[], sla_rate_req_per_s=5.0),
    ]
    (table,) = serve_tables(rows)
    assert [r.rate_text for r in table.rows] == ["4"]
    assert table.rows[0].requests_file == str(export)
    assert file_url(str(export)) == export.as_uri()
