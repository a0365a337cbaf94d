"""Scale: 1,000 runs x 100 benchmarks render within 10 s of CPU into at most 5 MB."""

from __future__ import annotations

import time

import pytest

from reports.cli import main
from reports.history.scale import write_synthetic_history


@pytest.mark.slow
def test_a_thousand_runs_of_a_hundred_benchmarks_render_fast_and_small(tmp_path):
    write_synthetic_history(tmp_path / "h", runs=1000, benchmarks=100)
    start = time.process_time()
    assert main(["render", "--history", str(tmp_path / "h"), "--out", str(tmp_path / "o")]) == 0
    cpu_s = time.process_time() - start
    size_bytes = (tmp_path / "o" / "index.html").stat().st_size
    assert cpu_s <= 10.0
    assert size_bytes <= 5 * 1024 * 1024


def test_a_long_history_is_aggregated_per_chart(tmp_path):
    """Fast check of the same mechanism: 300 runs give charts capped at 200 points."""
    write_synthetic_history(tmp_path / "h", runs=300, benchmarks=4)
    out = tmp_path / "o"
    assert main(["render", "--history", str(tmp_path / "h"), "--out", str(out)]) == 0
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "older runs aggregated" in page
