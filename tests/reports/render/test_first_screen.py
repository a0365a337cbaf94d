"""The reviewer's first minute (issue 29): one row per changed cell and phase, numbers a reader
can use, columns that mean something, a summary.md that fits a PR comment, and the first
viewport of the HTML as headless Chromium shows it."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from reports.analysis.series import Verdict
from reports.cli import main
from reports.render.changes import FIRST_ROWS, changed_cells, interval_text, mde_text
from reports.render.tables import NowRow, now_axes
from reports.scenarios import CELLS, baseline_specs, make_doc, pr_spec
from tests.data.reports.make_history import Cell, current_spec, write_history
from tests.reports.render.test_browser import chromium, headless  # noqa: F401 - fixture


def _v(fullname: str, metric: str, verdict: str, ratio: float, kind: str = "timing") -> Verdict:
    return Verdict("m", fullname, metric, kind, verdict, 0.05, ratio=ratio)  # type: ignore[arg-type]


def test_numbers_beyond_what_the_data_tell_are_said_so():
    assert interval_text(0.962, 1.095) == "-3.8 % … +9.5 %"
    assert interval_text(0.784, 21.515) == "-21.6 % … ≥ +100 %"
    assert interval_text(2.5, 5.0) == "beyond +100 %"
    assert interval_text(None, None) == "n/a"
    one = Verdict("m", "b", "t", "timing", "inconclusive", 0.05, mde=177.567, baseline_runs=1)
    assert mde_text(one) == "cannot tell (1 baseline run)"
    many = Verdict("m", "b", "t", "timing", "inconclusive", 0.05, mde=3.2, baseline_runs=9)
    assert mde_text(many) == "≥ 100 %"
    fine = Verdict("m", "b", "t", "timing", "pass", 0.05, mde=0.072, baseline_runs=9)
    assert mde_text(fine) == "7.2 %"


def test_a_cell_is_one_row_led_by_its_own_timing_fails_first():
    verdicts = [
        _v("t::test_decode[a]", "decode_step_s", "pass", 1.01),
        _v("t::test_decode[a]", "ttft_s", "fail", 1.4, "scalar"),
        _v("t::test_decode[a]", "itl_p99_s", "inconclusive", 1.2, "scalar"),
        _v("t::test_prefill[b]", "prefill_s", "improved", 0.8),
        _v("t::test_prefill[c]", "prefill_s", "pass", 1.0),
    ]
    rows = changed_cells(verdicts)
    assert [(r.name, r.group) for r in rows] == [
        ("test_decode[a]", "fail"),
        ("test_prefill[b]", "improved"),
    ]
    assert rows[0].decisive.metric == "decode_step_s"
    assert rows[0].others_text == "1 fail, 1 inconclusive"
    many = [_v(f"t::test_decode[{i}]", "decode_step_s", "fail", 1.5) for i in range(40)]
    assert len(changed_cells(many)) == FIRST_ROWS


def _row(cell: str, params: dict[str, str]) -> NowRow:
    return NowRow(cell, params, *([None] * 11))


def test_a_run_mode_column_appears_only_when_a_cell_names_the_axis():
    plain = _row("c", {"attention": "None", "cache": "None"})
    assert now_axes([plain]) == ()
    named = _row("d", {"attention": "sdpa", "cache": "None"})
    assert now_axes([plain, named]) == ("attention",)


def _outside_details(text: str) -> list[str]:
    kept = re.sub(r"<details>.*?</details>", "", text, flags=re.S)
    return [line for line in kept.splitlines() if line.strip()]


def _check_summary(summary: str) -> None:
    lines = _outside_details(summary)
    assert len(lines) <= 30, "\n".join(lines)
    flags = [line for line in lines if line.startswith("- ")]
    assert len(flags) <= 5, "\n".join(flags)
    percentages = [float(p.replace(",", "")) for p in re.findall(r"([\d,]+\.\d) %", summary)]
    assert all(p <= 1000 for p in percentages), max(percentages)


def test_many_flagged_metrics_against_one_baseline_run_fit_a_pr_comment(tmp_path: Path):
    cells = tuple(Cell(prompt_len=p, batch=b) for p in (32, 128, 512, 2048) for b in (1, 4))
    write_history(
        tmp_path / "h",
        1,
        cells=cells,
        current=current_spec(days_after=5, slowdown={"decode": 3.0, "prefill": 0.2}),
    )
    out = tmp_path / "out"
    assert main(["render", "--history", str(tmp_path / "h"), "--out", str(out)]) == 0
    _check_summary((out / "summary.md").read_text(encoding="utf-8"))


def test_six_of_36_benchmarks_four_times_slower_against_one_run_fit_a_pr_comment(
    tmp_path: Path,
):
    rng = random.Random(3)
    folder = tmp_path / "h"
    folder.mkdir()
    slowed = {c.fullname: 4.0 for c in CELLS[:6]}
    for n, spec in enumerate([*baseline_specs(1), pr_spec(slow=slowed)], start=1):
        (folder / f"{n:04d}_{spec.commit[:8]}.json").write_text(json.dumps(make_doc(spec, rng)))
    out = tmp_path / "out"
    assert main(["render", "--history", str(folder), "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text(encoding="utf-8")
    _check_summary(summary)
    assert "### What changed" in summary
    assert summary.count(":x: fail") == 6


@pytest.mark.browser
def test_the_first_viewport_shows_the_headline_the_counts_and_the_changed_cells(
    chromium,  # noqa: F811 - the fixture
    tmp_path: Path,
):
    rng = random.Random(4)
    folder = tmp_path / "h"
    folder.mkdir()
    slowed = {c.fullname: 1.5 for c in CELLS[:6]}
    specs = [*baseline_specs(), pr_spec(slow=slowed)]
    for n, spec in enumerate(specs, start=1):
        (folder / f"{n:04d}_{spec.commit[:8]}.json").write_text(json.dumps(make_doc(spec, rng)))
    out = tmp_path / "out"
    assert main(["render", "--history", str(folder), "--out", str(out)]) == 0
    url = (out / "index.html").resolve().as_uri() + "#first-screen"
    done = headless(chromium, tmp_path, "--window-size=1400,900", "--dump-dom", url)
    found = re.search(r'data-first-screen="([^"]+)"', done.stdout)
    assert found, done.stderr[-500:]
    seen = json.loads(found.group(1).replace("&quot;", '"'))
    assert seen["headline"]
    assert seen["counts"]
    assert seen["changed_total"] >= 6  # the six fails, and any undecided one leaning slower
    assert seen["changed_rows"] == seen["changed_total"], seen
