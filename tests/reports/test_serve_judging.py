"""How serving records are judged (DESIGN §13): a finite-rate cell's rounds are its passes' E2EL,
a capacity cell's its found rates (higher is better, in A/B as in the gate), and `errors` is
compared exactly."""

from __future__ import annotations

import math
import random

import pytest

from reports.ab import ABConfig, judge
from reports.analysis.metrics import _log_location, metric_values, primary_metric
from reports.history.runfile import BenchmarkResult


def serve_record(name: str, timer_s: list[float], **extra: object) -> dict:
    return {
        "group": "serve",
        "name": f"test_serve[{name}]",
        "fullname": f"benchmarks/test_serve.py::test_serve[{name}]",
        "params": {"model": name},
        "extra_info": {"schema": 1, "cell_id": name, "measurement": "serve", **extra},
        "stats": {"data": timer_s, "median": sorted(timer_s)[len(timer_s) // 2]},
    }


def test_a_finite_rate_cell_is_judged_on_its_passes_e2el_not_the_arrival_schedule():
    raw = serve_record(
        "c", [5.5, 5.6, 5.4], rounds_statistic="e2el_p50_s",
        round_series={"e2el_p50_s": [0.30, 0.31, 0.29], "tpot_p50_s": [0.01, 0.01, 0.011]},
    )  # fmt: skip
    bench = BenchmarkResult.from_json(raw)
    assert bench.rounds_s == (0.30, 0.31, 0.29)
    assert primary_metric(bench) == "e2el_p50_s"
    values = metric_values(bench)
    assert values["e2el_p50_s"] == ("timing", (0.30, 0.31, 0.29))
    assert "serve_pass_s" not in values
    # An inf-rate cell (no rounds_statistic) keeps the timer's rounds: the drain is the server's.
    plain = BenchmarkResult.from_json(serve_record("d", [1.0, 1.1]))
    assert plain.rounds_s == (1.0, 1.1)
    assert primary_metric(plain) == "serve_pass_s"


def test_a_statistic_with_a_missing_round_falls_back_to_the_timer_and_a_null_round_is_left_out():
    raw = serve_record(
        "c", [5.5, 5.6], rounds_statistic="e2el_p50_s",
        round_series={"e2el_p50_s": [0.3, None], "ttft_p50_s": [0.1, None]},
    )  # fmt: skip
    bench = BenchmarkResult.from_json(raw)
    assert bench.rounds_s == (5.5, 5.6)
    assert metric_values(bench)["ttft_p50_s"] == ("timing", (0.1,))


def test_errors_are_exact_and_one_more_failed_request_fails_a_b():
    base = serve_record("c", [1.0] * 12, errors=0)
    head = serve_record("c", [1.0] * 12, errors=2)
    assert metric_values(BenchmarkResult.from_json(head))["errors"] == ("exact", (2.0,))
    entries = judge(
        {base["fullname"]: BenchmarkResult.from_json(base)},
        {head["fullname"]: BenchmarkResult.from_json(head)},
        ABConfig(),
    )
    errors = next(e for e in entries if e.metric == "errors")
    assert errors.verdict == "fail"
    assert "grew by 2" in errors.note


def _capacity(rates: list[float]) -> dict:
    return serve_record(
        "cap", [60.0] * len(rates), rounds_statistic="sla_rate_req_per_s",
        round_series={"sla_rate_req_per_s": rates},
    )  # fmt: skip


def test_a_capacity_cells_rounds_are_its_rates_and_zero_is_the_floor():
    bench = BenchmarkResult.from_json(_capacity([4.0, 0.0, 4.5]))
    assert primary_metric(bench) == "sla_rate_req_per_s"
    assert bench.rounds_s[0] == 4.0
    assert 0 < bench.rounds_s[1] < 1e-5


@pytest.mark.parametrize(("shift", "verdict"), [(-0.30, "fail"), (0.0, "pass"), (0.30, "improved")])
def test_a_b_judges_a_capacity_as_higher_is_better(shift, verdict):
    rng = random.Random(4)
    base = [5.0 * math.exp(rng.gauss(0, 0.02)) for _ in range(20)]
    head = [b * (1 + shift) * math.exp(rng.gauss(0, 0.02)) for b in base]
    b, h = _capacity(base), _capacity(head)
    entries = judge(
        {b["fullname"]: BenchmarkResult.from_json(b)},
        {h["fullname"]: BenchmarkResult.from_json(h)},
        ABConfig(),
    )
    capacity = [e for e in entries if e.metric == "sla_rate_req_per_s"]
    assert len(capacity) == 1  # the rounds, not judged twice as a series
    assert capacity[0].verdict == verdict


def test_a_capacity_cell_stays_out_of_the_run_wide_speed_estimate():

    assert _log_location(BenchmarkResult.from_json(_capacity([4.0, 5.0])), 2) is None
