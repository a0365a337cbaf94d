"""What a bisection leaves (`benchmarks.bisect.output`) and how it reads the scan (`run`), on
results made by the real search over exact ranges: no A/B run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.ab.sides import ABError
from benchmarks.bisect.commits import Commit
from benchmarks.bisect.output import Context, levels, picture, write_outputs
from benchmarks.bisect.run import _nothing_to_search, parse, selector, tracked_timing
from reports.analysis.bisection import Estimate, Plan, bisect

COMMITS = [Commit(f"{i:040x}", f"commit {i}") for i in range(9)]
RELEASES = [Commit("f" * 40, f"pkg 1.{i}", f"pkg==1.{i}") for i in range(5)]


def exact(levels_: list[float]):
    def measure(lo: int, hi: int, look: int) -> Estimate:
        return Estimate(levels_[hi] - levels_[lo], 0.005, 200.0, 120)

    return measure


def test_the_document_names_the_culprit_with_its_interval_and_steps(tmp_path: Path):
    result = bisect(8, exact([0.0] * 5 + [math.log(1.3)] * 4))
    tracked = {"fullname": "m::t[x]", "metric": "decode_step_s", "ratio": 1.31}
    context = Context(tracked, Plan(), 60.0, [5.0], "nox")
    doc = write_outputs(tmp_path, COMMITS, result, context, repo=None)
    on_disk = json.loads((tmp_path / "bisect.json").read_text(encoding="utf-8"))
    assert on_disk == doc
    assert doc["schema"] == 1
    assert doc["verdict"] == "culprit"
    [culprit] = doc["culprits"]
    assert culprit["ref"] == COMMITS[5].sha
    assert culprit["parent"] == COMMITS[4].sha
    assert culprit["ci_low"] < 1.3 < culprit["ci_high"]
    assert culprit["ci_high"] < 1.35
    assert culprit["explained"] == pytest.approx(1.0)
    assert doc["steps"][0]["purpose"] == "reproduce"
    assert doc["steps"][-1]["purpose"] == "verify"
    # every commit the search measured sits at its level against good
    assert levels(doc)[5][0] == pytest.approx(math.log(1.3))
    assert levels(doc)[4][0] == pytest.approx(0.0)
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "CULPRIT" in summary
    assert f"`{COMMITS[5].sha[:12]}`" in summary
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert page.count("<circle") == len(levels(doc))
    assert "#c0392b" in picture(doc)  # the culprit in red


def test_a_release_is_named_by_its_pin_and_its_index_page(tmp_path: Path):
    result = bisect(4, exact([0.0, 0.0, 0.2, 0.2, 0.2]))
    doc = write_outputs(tmp_path, RELEASES, result, Context(None, Plan(), 1.0, [], "nox"))
    assert doc["culprits"][0]["ref"] == "pkg==1.2"
    assert doc["culprits"][0]["parent"] == "pkg==1.1"
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "https://pypi.org/project/pkg/1.2/" in summary
    assert "(4 releases after the good one)" in summary
    assert "`pkg==1.2`" in summary


def _timing(verdict: str, ratio: float, metric: str = "decode_step_s", **extra: object):
    return {"kind": "timing", "fullname": f"b::t[{ratio}]", "metric": metric,
            "verdict": verdict, "ratio": ratio, "unstable": "", **extra}  # fmt: skip


def test_the_scan_picks_the_largest_suspect_timing():
    scan = {"benchmarks": [
        _timing("fail", 1.2), _timing("fail", 1.4, "prefill_s"), _timing("pass", 1.01),
        {"kind": "exact", "metric": "weights_bytes", "verdict": "fail", "ratio": 9.0},
    ]}  # fmt: skip
    assert tracked_timing(scan, None)["ratio"] == 1.4
    assert tracked_timing(scan, "decode_step_s")["ratio"] == 1.2
    # undecided at A/B's precision, estimate beyond the threshold: the search looks again
    assert tracked_timing({"benchmarks": [_timing("inconclusive", 1.07)]}, None) is not None
    assert tracked_timing({"benchmarks": [_timing("inconclusive", 1.03)]}, None) is None
    # wild pairs (a busy machine) do not hide a slowdown: the reproduction decides
    unstable = _timing("inconclusive", 1.5, unstable="wild pairs")
    assert tracked_timing({"benchmarks": [unstable]}, None) is unstable
    calm = _timing("inconclusive", 1.02, unstable="wild pairs")
    assert tracked_timing({"benchmarks": [calm]}, None) is None


def test_the_one_cell_selector_is_the_test_name_with_its_parameters():
    name = "benchmarks/test_decode.py::test_decode[tiny-llama-cpu-float32-b1-p16-n4]"
    assert selector(name) == "test_decode[tiny-llama-cpu-float32-b1-p16-n4]"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--good", "a", "--threshold", "5"], "--threshold 5.0"),
        (["--good", "a", "--looks", "9"], "--looks 9"),
        (["--good", "a", "--metric", "weights_bytes"], "--metric weights_bytes"),
        (["--good", "a", "--head", "b"], "--head is set by each step"),
        (["--good", "1.0", "--package", "pkg"], "--package needs --bad"),
        (["--good", "a", "--process-cv", "-1"], "--process-cv -1.0"),
    ],
)
def test_bad_options_are_one_line_errors(argv: list[str], says: str):
    with pytest.raises(ABError, match=says.replace("-", r"\-").replace(".", r"\.")):
        parse(argv)


def test_unknown_options_go_to_every_ab_run():
    opts = parse(["--good", "a", "-k", "decode", "--cpus", "none"])
    assert opts.ab_args == ("-k", "decode", "--cpus", "none")
    assert opts.bad == "HEAD"


def test_with_no_suspect_only_an_unstable_interval_reaching_the_threshold_is_inconclusive():
    calm = _timing("inconclusive", 1.0, unstable="wild pairs", ci_high=1.03)
    assert _nothing_to_search({"benchmarks": [calm]}, 0.05).verdict == "not-reproducible"
    wide = _timing("inconclusive", 1.0, unstable="wild pairs", ci_high=1.09)
    result = _nothing_to_search({"benchmarks": [wide, calm]}, 0.05)
    assert result.verdict == "inconclusive"
    assert "wild pairs" in result.reason
