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

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "reports"
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
