"""The HTML report in headless Chromium: it loads from file:// without script errors, draws charts.

The page's first script records `error` events and `console.error` calls into `#js-errors`;
Chromium's `--dump-dom` then shows whether anything was recorded. The screenshot is kept in
`out/report-screenshot.png` (git-ignored) for a person to look at.

Skipped without Chromium, unless PHASEBENCH_REQUIRE_BROWSER=1 (CI), where that is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from reports.cli import main
from tests.data.reports.make_history import Cell, RunSpec, current_spec, write_history

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parents[2] / "data" / "reports"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def chromium():
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("PHASEBENCH_REQUIRE_BROWSER") == "1":
        pytest.fail("PHASEBENCH_REQUIRE_BROWSER=1 but no Chromium found: apt-get install chromium")
    pytest.skip("headless Chromium not installed (apt-get install chromium)")


def headless(chromium, tmp_path, *args):
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
        "--window-size=1400,3000",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def report_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    assert main(["render", "--history", str(DATA / "small_history"), "--out", str(out)]) == 0
    return out / "index.html"


def errors_in(dom: str) -> list[str]:
    box = re.search(r'<div id="js-errors"[^>]*>(.*?)</div>', dom, re.S)
    assert box is not None, "the error box is missing from the page"
    return re.findall(r"<li>(.*?)</li>", box.group(1), re.S)


def test_report_loads_with_no_script_errors_and_draws_charts(chromium, report_page, tmp_path):
    # #all-charts draws every chart at once (by default they are drawn when scrolled into view)
    proc = headless(chromium, tmp_path, "--dump-dom", report_page.as_uri() + "#all-charts")
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert errors_in(dom) == []
    assert 'data-ready="1"' in dom  # our script ran to the end
    charts = dom.count('class="chart"')
    assert charts >= 5
    assert dom.count('class="uplot') == charts  # every chart was drawn by uPlot


def test_roofline_chart_is_drawn_with_its_roof_and_numbered_points(chromium, report_page, tmp_path):
    proc = headless(chromium, tmp_path, "--dump-dom", report_page.as_uri() + "#all-charts")
    dom = proc.stdout
    assert errors_in(dom) == []
    roofline = re.search(
        r'<div class="chart"([^>]*data-kind="roofline"[^>]*)>(.*?)</figure>', dom, re.S
    )
    assert roofline is not None, "no roofline chart on the page"
    attributes, chart = roofline.groups()
    assert 'class="uplot' in chart
    assert "<canvas" in chart
    # the draw hook ran to the end: one label per point (one cell: a prefill and a decode point)
    assert 'data-labelled="2"' in attributes
    for series in ("roof table: generic x86 2-core · float32", "prefill", "decode"):
        assert series in chart  # the legend names the roof and both phases


def test_the_error_capture_sees_a_broken_script(chromium, report_page, tmp_path):
    """The check above can fail: a page with a throwing script reports the error."""
    broken = tmp_path / "broken.html"
    page = report_page.read_text(encoding="utf-8")
    broken.write_text(page.replace("</body>", "<script>throw new Error('boom');</script></body>"))
    dom = headless(chromium, tmp_path, "--dump-dom", broken.as_uri()).stdout
    assert any("boom" in e for e in errors_in(dom))


def test_screenshot_is_kept_for_review(chromium, report_page, tmp_path):
    shot = tmp_path / "report.png"
    proc = headless(
        chromium, tmp_path, f"--screenshot={shot}", report_page.as_uri() + "#all-charts"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.stat().st_size > 50_000  # a drawn page, not a blank one
    keep = ROOT / "out"
    keep.mkdir(exist_ok=True)
    shutil.copy(shot, keep / "report-screenshot.png")


@pytest.fixture(scope="module")
def stack_change_page(tmp_path_factory):
    """12 main runs on torch 2.13.0, then a PR run on torch 2.14.1 whose decode is 30 % slower."""
    hist = tmp_path_factory.mktemp("stack-history")
    out = tmp_path_factory.mktemp("stack-report")
    cells = tuple(
        Cell(model=m, dtype=d, prompt_len=p, new_tokens=8)
        for m in ("tiny-llama", "tiny-qwen")
        for d in ("float32", "bfloat16")
        for p in (32, 128)
    )
    hw = {"hardware_id": "hw1234abcd", "round_cv": 0.01, "run_cv": 0.01}
    write_history(
        hist,
        12,
        seed=3,
        cells=cells,
        base=RunSpec(commit="", when=current_spec().when, **hw),
        current=current_spec(days_after=13, slowdown={"decode": 0.3}, torch="2.14.1", **hw),
    )
    assert main(["render", "--history", str(hist), "--out", str(out)]) == 0
    return out / "index.html"


def test_new_sections_render_the_stack_change_now_table_grid_and_axis_ticks(
    chromium, stack_change_page, tmp_path
):
    proc = headless(chromium, tmp_path, "--dump-dom", stack_change_page.as_uri() + "#all-charts")
    dom = proc.stdout
    assert errors_in(dom) == []
    # the stack diff at the top, naming the field and both versions
    box = re.search(r'<div class="stack-change"[^>]*>(.*?)</div>', dom, re.S)
    assert box is not None
    assert "<code>torch</code></td><td>2.13.0</td><td>2.14.1</td>" in box.group(1)
    # the llama-bench style table: one row per cell with throughput filled in
    now = re.search(r'<table[^>]*id="m0-nowtable"[^>]*>(.*?)</table>', dom, re.S)
    assert now is not None
    assert now.group(1).count("<tr>") == 1 + 8  # header + 8 cells
    assert "tok/s" in now.group(1)
    # the consistency line: the PR slowed test_decode only (the fixture's slowdown), so every
    # cell's decode inside generate disagrees with it; prefill agrees
    line = re.search(r'id="m0-consistency-line"[^>]*>(.*?)</p>', dom, re.S)
    assert line is not None
    assert "of 16 within the noise" in line.group(1)
    table = re.search(r'<table[^>]*id="m0-consistencytable"[^>]*>(.*?)</table>', dom, re.S)
    assert table is not None
    row = r'<tr data-consistent="(yes|no)"><td>[^<]*</td><td>(\w+)</td>'
    rows = re.findall(row, table.group(1))
    assert len(rows) == 16
    assert all(ok == "no" for ok, phase in rows if phase == "decode")
    assert sum(ok == "yes" for ok, phase in rows if phase == "prefill") >= 7
    # the matrix overview: decode panels are red (fail), one square per model x prompt length
    grids = re.findall(
        r'<table class="grid compact" data-grid="([^"]+)"[^>]*>(.*?)</table>', dom, re.S
    )
    decode = [body for title, body in grids if title.startswith("decode")]
    assert len(decode) == 2  # float32 and bfloat16
    assert all(body.count('data-verdict="fail"') == 4 for body in decode)
    # trend charts: commit short SHA and date on the x axis, the stack change drawn
    trend = re.search(r'<div class="chart"([^>]*data-kind="trend"[^>]*)>', dom)
    assert trend is not None
    ticks = re.search(r'data-ticks="([^"]*)"', trend.group(1))
    assert ticks is not None
    assert re.search(r"[0-9a-f]{7}\n01-\d\d", ticks.group(1).replace("&#10;", "\n"))
    assert 'data-stack-marks="1"' in trend.group(1)
    # the methodology states the rule
    assert "1 + threshold" in dom
    assert "Holm" in dom


def test_the_run_mode_section_renders_with_its_axes_and_the_grid_keeps_modes_in_rows(
    chromium, tmp_path
):
    from tests.reports.render.test_runmode import FACTORS, run_mode_history  # noqa: PLC0415 - shared data

    out = tmp_path / "out"
    assert main(["render", "--history", str(run_mode_history(tmp_path)), "--out", str(out)]) == 0
    proc = headless(chromium, tmp_path, "--dump-dom", (out / "index.html").as_uri())
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert errors_in(dom) == []
    assert 'id="m0-runmodes"' in dom
    tables = re.findall(r'<table class="runmode compact" data-runmode="([^"]+)"[^>]*>(.*?)</table>',
                        dom, re.S)  # fmt: skip
    assert len(tables) == 3  # the synthetic suite's three cells
    for _title, body in tables:
        assert "<th>sdpa \u00d7 dynamic</th>" in body
        assert "<th>sdpa \u00d7 static</th>" in body
        assert body.count("compile none</th>") == 1
        assert body.count("compile default</th>") == 1
        rates = {}
        for row, cells in re.findall(r"<tr><th>sdpa \u00d7 (\w+)</th>(.*?)</tr>", body, re.S):
            values = re.findall(r'data-tok-per-s="([^"]+)"', cells)
            rates[(row, "none")], rates[(row, "default")] = map(float, values)
        # the rates keep the ratios the history was written with
        for key, factor in FACTORS.items():
            assert rates[key] / rates[("dynamic", "none")] == pytest.approx(factor)
    # the run-mode axes are rows of one decode panel per dtype/batch, not a panel per mode
    grids = re.findall(r'<table class="grid compact" data-grid="([^"]+)"', dom)
    assert not any("attention=" in g for g in grids)
    shot = tmp_path / "runmode.png"
    proc = headless(chromium, tmp_path, f"--screenshot={shot}", (out / "index.html").as_uri())
    assert shot.stat().st_size > 50_000


def test_the_quantization_section_renders_with_ratios_and_flags(chromium, tmp_path):
    from tests.reports.render.test_quant_view import quant_history  # noqa: PLC0415 - shared data

    out = tmp_path / "out"
    assert main(["render", "--history", str(quant_history(tmp_path)), "--out", str(out)]) == 0
    proc = headless(chromium, tmp_path, "--dump-dom", (out / "index.html").as_uri())
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert errors_in(dom) == []
    assert 'data-ready="1"' in dom  # the page's script ran to the end with the section on it
    assert 'id="m0-quant"' in dom
    tables = re.findall(r'<table class="quant compact" data-quant="([^"]+)"[^>]*>(.*?)</table>',
                        dom, re.S)  # fmt: skip
    assert len(tables) == 3  # the synthetic suite's three cells
    for _title, body in tables:
        rows = dict(re.findall(r'<tr data-quant-row="([^"]+)"[^>]*>(.*?)</tr>', body, re.S))
        assert list(rows) == ["none/none", "none/hqq4", "int8wo/hqq4", "int4wo-g32/none"]
        ratios = [float(r) for r in re.findall(r'data-ratio="([^"]+)"', rows["int4wo-g32/none"])]
        # prefill, decode, GB/s (not scaled in the synthetic history: 1.0), weights
        assert ratios[:4] == pytest.approx([2.0, 2.0, 1.0, 0.25])
        assert 'data-ratio=""' in rows["none/none"]  # the baseline has no ratio to itself
        # the agreement outside its bound (these synthetic records carry no SQNR: n/a)
        assert rows["int8wo/hqq4"].count("\u2691") == 1
    box = re.search(r'<li class="accuracy">(.*?)</li>\s*</ul>', dom, re.S)
    assert box is not None
    assert "Accuracy outside the bound" in box.group(1)
