"""The lean is named only where it says something: a failing run whose lean names no undecided
timing repeats its failures (the screenshot fixture's PR once read "Leaning to a slowdown: 0
undecided timings together" under three fails)."""

from __future__ import annotations

from pathlib import Path

from reports.cli import main
from tests.data.reports.make_history import current_spec, write_history

LEAN_BOX = "Leaning to a slowdown"


def _render(tmp_path: Path, slowdown: dict[str, float]) -> tuple[str, str]:
    history, out = tmp_path / "history", tmp_path / "out"
    write_history(history, 20, seed=1, current=current_spec(days_after=21, slowdown=slowdown))
    main(["render", "--history", str(history), "--out", str(out)])
    return (out / "index.html").read_text(), (out / "summary.md").read_text()


def test_a_failing_run_whose_lean_names_no_undecided_timing_shows_no_lean(tmp_path):
    html, summary = _render(tmp_path, {"decode": 0.5})
    assert summary.startswith("## :x: phasebench: FAIL")
    assert LEAN_BOX not in html
    assert LEAN_BOX not in summary
