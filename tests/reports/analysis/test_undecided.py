"""No headline PASS unless the timings were decided (issue 51): the memory peaks' and scalar
timings' passes do not make one, and the reason names how many timings stayed undecided and
the MDE they would need."""

from __future__ import annotations

from reports.analysis.judge import SuiteJudgement, undecided
from reports.analysis.series import Verdict


def _v(name: str, kind: str, verdict: str, mde: float | None = 0.3) -> Verdict:
    return Verdict("m", name, "decode_step_s" if kind == "timing" else "peak_rss_bytes", kind,  # type: ignore[arg-type]
                   verdict, 0.05, mde=mde)  # type: ignore[arg-type]  # fmt: skip


def _outcome(verdicts: list[Verdict]) -> str:
    return SuiteJudgement(tuple(verdicts), {}, {}).outcome(0.05)


def test_memory_passes_do_not_make_a_pass_over_undecided_timings():
    """The real-host calibration before issue 51: four timings undecided, their memory peaks
    and KV bytes passing, read PASS."""
    timings = [_v(f"t{i}", "timing", "inconclusive", 0.25 + 0.1 * i) for i in range(4)]
    peaks = [_v(f"p{i}", "scalar", "pass") for i in range(4)]
    assert _outcome([*timings, *peaks]) == "undecided"
    left = undecided([*timings, *peaks])
    assert (left.compared, left.undecided) == (4, 4)
    assert left.median_mde is not None
    assert abs(left.median_mde - 0.4) < 1e-9
    assert left.text(0.05) == "4 of 4 timings undecided (median MDE 40%, against a 5% threshold)"


def test_a_pass_needs_most_timings_decided():
    three = [_v("a", "timing", "pass"), _v("b", "timing", "pass"), _v("c", "timing", "pass")]
    assert _outcome([*three, _v("d", "timing", "inconclusive")]) == "pass"
    half = [_v("a", "timing", "pass"), _v("b", "timing", "improved")]
    assert (
        _outcome([*half, _v("c", "timing", "inconclusive"), _v("d", "timing", "inconclusive")])
        == "undecided"
    )
    # new and missing timings are not among those compared (missing fails on its own)
    assert undecided([_v("n", "timing", "new"), _v("a", "timing", "pass")]).compared == 1
    # without a timing compared, every noisy metric undecided is still not a PASS
    assert _outcome([_v("x", "scalar", "inconclusive")]) == "undecided"
    assert _outcome([_v("x", "scalar", "pass"), _v("y", "scalar", "inconclusive")]) == "pass"
