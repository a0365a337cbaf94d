"""An achieved rate above a measured peak is confirmed against a fresh peak before it fails."""

from __future__ import annotations

import pytest

from benchmarks.harness.roofline.peaks import Peaks
from benchmarks.harness.roofline.roofline import RooflineError
from benchmarks.suite.roofline import roofline_confirmed

MEASURED = Peaks(1e11, 5e10, "measured:copy/matmul", "float32")
TABLE = Peaks(1e11, 5e10, "table:H100 SXM (NVIDIA datasheet)", "bfloat16")


def compute_at(rate_flop_per_s: float):
    """A stand-in for roofline_extra_info: raises above 100 % of the given peak."""

    def compute(peaks: Peaks) -> dict[str, float]:
        assert peaks.flop_per_s is not None
        if rate_flop_per_s > peaks.flop_per_s:
            raise RooflineError(f"{rate_flop_per_s} above {peaks.flop_per_s}")
        return {"prefill_pct_of_peak_flops": 100 * rate_flop_per_s / peaks.flop_per_s}

    return compute


def test_a_rate_under_the_peak_needs_no_remeasurement():
    def never() -> Peaks:
        raise AssertionError("remeasured without cause")

    assert roofline_confirmed(compute_at(5e10), MEASURED, never) == {
        "prefill_pct_of_peak_flops": 50.0
    }


def test_an_excess_over_a_measured_peak_is_judged_again_against_a_fresh_one():
    calls = []

    def again() -> Peaks:
        calls.append(1)
        return Peaks(2e11, 5e10, "measured:copy/matmul", "float32")

    fields = roofline_confirmed(compute_at(1.5e11), MEASURED, again)
    assert calls == [1]
    assert fields["prefill_pct_of_peak_flops"] == pytest.approx(75.0)


def test_a_confirmed_excess_still_fails_loudly():
    with pytest.raises(RooflineError):
        roofline_confirmed(compute_at(3e11), MEASURED, lambda: MEASURED)


def test_an_excess_over_a_table_peak_fails_without_remeasuring():
    def never() -> Peaks:
        raise AssertionError("table peaks are not measured")

    with pytest.raises(RooflineError):
        roofline_confirmed(compute_at(3e11), TABLE, never)
