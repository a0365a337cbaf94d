"""Scale: 1,000 runs x 100 benchmarks render in time linear in the history, into at most 5 MB."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reports.cli import main
from reports.history.scale import write_synthetic_history


def _render_cpu_s(tmp_path: Path, runs: int) -> tuple[float, int]:
    history, out = tmp_path / f"h{runs}", tmp_path / f"o{runs}"
    write_synthetic_history(history, runs=runs, benchmarks=100)
    start = time.process_time()
    assert main(["render", "--history", str(history), "--out", str(out)]) == 0
    return time.process_time() - start, (out / "index.html").stat().st_size


@pytest.mark.slow
def test_a_thousand_runs_of_a_hundred_benchmarks_render_in_linear_time_and_small(tmp_path):
    """4x the runs may cost at most 8x the CPU (linear is 4x, quadratic 16x), and the page
    stays under 5 MB. The seconds themselves depend on the CPU: they are a benchmark
    (`python -m reports bench-scale`), with figures in docs/reports.md, not an assertion here."""
    quarter_s, _ = _render_cpu_s(tmp_path, 250)
    whole_s, size_bytes = _render_cpu_s(tmp_path, 1000)
    assert whole_s / quarter_s < 8.0, (quarter_s, whole_s)
    assert size_bytes <= 5 * 1024 * 1024


def test_a_long_history_is_aggregated_per_chart(tmp_path):
    """Fast check of the same mechanism: 300 runs give charts capped at 200 points."""
    write_synthetic_history(tmp_path / "h", runs=300, benchmarks=4)
    out = tmp_path / "o"
    assert main(["render", "--history", str(tmp_path / "h"), "--out", str(out)]) == 0
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "older runs aggregated" in page
