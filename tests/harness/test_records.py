"""Derived metrics of a history record: percentiles, decode slope, TPOT, KV checks, plain JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from benchmarks.harness.records import (
    GenerationFigures,
    KVCheck,
    decode_slope_s_per_ktok,
    generation_metrics,
    jsonable,
    least_squares_slope,
    percentile,
    tpot_s,
)


@pytest.mark.parametrize("q", [0, 10, 50, 90, 99, 100])
def test_percentile_matches_numpys_linear_method(q):
    values = [0.031, 0.012, 0.045, 0.02, 0.019, 0.5, 0.022]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_refuses_nothing_and_out_of_range_q():
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)


def test_least_squares_slope_recovers_a_line_and_declines_a_point():
    xs = [1, 2, 3, 4]
    assert least_squares_slope(xs, [3 + 2 * x for x in xs]) == pytest.approx(2)
    assert least_squares_slope([1], [1.0]) is None
    assert least_squares_slope([2, 2], [1.0, 3.0]) is None


def test_decode_slope_is_seconds_per_thousand_cached_tokens():
    # Step i runs with P + i positions; time grows 1 ms per 100 positions = 10 ms per 1,000.
    steps = [0.010 + 0.00001 * (512 + i) for i in range(1, 32)]
    assert decode_slope_s_per_ktok(steps, 512) == pytest.approx(0.010)
    assert decode_slope_s_per_ktok([0.01], 512) is None


def test_tpot_excludes_the_first_token_and_needs_two():
    assert tpot_s(e2e_s=1.0, ttft_s=0.2, new_tokens=5) == pytest.approx(0.2)
    assert tpot_s(e2e_s=1.0, ttft_s=1.0, new_tokens=1) is None


def test_generation_metrics_name_every_unit_and_take_itl_from_client_gaps():
    figures = GenerationFigures(
        e2e_s=0.5,
        ttft_s=0.2,
        prefill_s=0.19,
        step_s=(0.09, 0.1, 0.1),
        gap_s=(0.1, 0.1, 0.1),
        kv_bytes_after_prefill=100,
        kv_bytes_per_step=(104, 108, 112),
    )
    metrics = generation_metrics([figures], prompt_len=25)
    assert metrics["tpot_s"] == pytest.approx(0.1)
    assert metrics["itl_p50_s"] == metrics["itl_p99_s"] == pytest.approx(0.1)
    assert metrics["step_s"] == [0.09, 0.1, 0.1]
    assert metrics["kv_bytes_per_step"] == [104, 108, 112]
    assert (metrics["itl_samples"], metrics["ttft_samples"], metrics["e2e_samples"]) == (3, 1, 1)
    json.dumps(metrics)


def _round(ttft_s: float, gaps: tuple[float, ...], e2e_s: float = 9.9) -> GenerationFigures:
    return GenerationFigures(e2e_s, ttft_s, ttft_s / 2, gaps, gaps, 100, (104,) * len(gaps))


def test_generation_metrics_pool_every_round_and_say_how_many_samples_p99_rests_on():
    """ITL percentiles over the gaps of all rounds, TTFT the median over rounds, e2e the
    benchmark's own rounds: a slow round that is not the last still shows."""
    rounds = [_round(0.2, (0.1, 0.1)), _round(0.4, (0.5, 0.1)), _round(0.3, (0.1, 0.1))]
    metrics = generation_metrics(rounds, prompt_len=10, e2e_rounds_s=[1.0, 3.0, 2.0])
    assert metrics["e2e_s"] == 2.0  # the median of the gated statistic's own rounds
    assert metrics["ttft_s"] == pytest.approx(0.3)
    assert metrics["tpot_s"] == pytest.approx((2.0 - 0.3) / 2)
    assert metrics["itl_samples"] == 6
    assert metrics["itl_p99_s"] == pytest.approx(percentile([0.1] * 5 + [0.5], 99))
    assert metrics["itl_p99_s"] > 0.45  # the second round's slow gap is not lost
    assert metrics["step_s"] == [0.1, 0.1]  # per-position medians over rounds
    assert metrics["step_samples"] == 6


def test_generation_metrics_without_benchmark_rounds_use_the_rounds_own_e2e():
    metrics = generation_metrics([_round(0.2, (0.1,), e2e_s=0.35)], prompt_len=4)
    assert metrics["e2e_s"] == 0.35


def test_generation_metrics_of_one_token_have_no_itl_or_tpot():
    figures = GenerationFigures(0.2, 0.2, 0.19, (), (), 100, ())
    metrics = generation_metrics([figures], prompt_len=25)
    assert metrics["tpot_s"] is metrics["itl_p50_s"] is metrics["decode_slope_s_per_ktok"] is None
    assert metrics["itl_samples"] == 0


def test_kv_check_names_every_point_that_differs():
    check = KVCheck(
        bytes_per_token=4,
        analytic_bytes=(100, 104, 108),
        measured_bytes=(100, 105, 108),
        storage_final_bytes=108,
    )
    assert check.mismatches() == ["after decode step 1: analytic 104 bytes, measured 105 bytes"]
    assert check.fields()["kv_measured_final_bytes"] == 108
    short = KVCheck(4, (100, 104), (100,), None)
    assert short.mismatches() == ["1 measured points against 2 analytic ones"]


def test_jsonable_turns_torch_numpy_and_dataclasses_into_plain_json():
    @dataclass(frozen=True)
    class Sample:
        phase: str
        value: object

    raw = {
        "dtype": torch.bfloat16,
        "np": np.float32(1.5),
        "tensor": torch.tensor(3),
        "samples": (Sample("after_prefill", np.int64(7)),),
        "nan": float("nan"),
    }
    assert jsonable(raw) == {
        "dtype": "torch.bfloat16",
        "np": 1.5,
        "tensor": 3,
        "samples": [{"phase": "after_prefill", "value": 7}],
        "nan": None,
    }
