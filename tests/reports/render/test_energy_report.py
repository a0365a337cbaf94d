"""Energy per token in the reports: the "now" table's column and a trend per phase.

Synthetic histories get `prefill_j_per_tok` / `decode_j_per_tok` written into their records (a
known value per run); the report must show the current run's figures with the counter's name,
chart every run's values in J/tok, say why where there is no counter, and read older history
without the fields.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from reports.cli import main as reports_main
from reports.history.load import load_history
from reports.render.html import fmt_joules_per_token
from reports.render.tables import now_rows
from tests.data.reports.make_history import current_spec, write_history

PREFILL_J = 0.0125  # J per prompt token
DECODE_J = 0.5  # J per generated token


def with_energy(paths: list[Path], *, reason: str | None = None) -> None:
    """Give every prefill/decode record of every file the energy fields (run i: i mJ more)."""
    for i, path in enumerate(paths):
        data = json.loads(path.read_text())
        for bench in data["benchmarks"]:
            info = bench["extra_info"]
            phase = info.get("measurement")
            if phase not in ("prefill", "decode"):
                continue
            base = PREFILL_J if phase == "prefill" else DECODE_J
            info[f"{phase}_j_per_tok"] = None if reason else base + i * 1e-3
            info["energy_source"] = None if reason else "nvml:total_energy"
            info["energy_reason"] = reason
        path.write_text(json.dumps(data))


def render(history: Path, out: Path) -> tuple[str, dict[str, dict[str, object]]]:
    assert reports_main(["render", "--history", str(history), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    charts: dict[str, dict[str, object]] = {}
    data = json.loads(re.search(r'id="chart-data">(.*?)</script>', html, re.S).group(1))
    for machine in data if isinstance(data, list) else data.values():
        charts.update(machine["trends"])
    return html, charts


def test_the_now_table_shows_joules_per_token_per_phase_and_their_source(tmp_path: Path):
    paths = write_history(tmp_path / "h", 2, seed=3, current=current_spec())
    with_energy(paths)
    (runs,) = load_history([tmp_path / "h"]).machines.values()
    current = runs[-1]
    rows = now_rows(current)
    assert rows
    assert all(r.prefill_j_per_tok == pytest.approx(PREFILL_J + 2e-3) for r in rows)
    assert all(r.decode_j_per_tok == pytest.approx(DECODE_J + 2e-3) for r in rows)
    assert {r.energy_source for r in rows} == {"nvml:total_energy"}
    html, _ = render(tmp_path / "h", tmp_path / "out")
    assert fmt_joules_per_token(PREFILL_J + 2e-3) in html  # "14.5 mJ/tok"
    assert "nvml:total_energy" in html


def test_each_phase_gets_a_trend_in_joules_per_token_over_every_run(tmp_path: Path):
    paths = write_history(tmp_path / "h", 3, seed=3, current=current_spec())
    with_energy(paths)
    _, charts = render(tmp_path / "h", tmp_path / "out")
    energy = {k: c for k, c in charts.items() if str(c["metric"]).endswith("_j_per_tok")}
    assert {c["metric"] for c in energy.values()} == {"prefill_j_per_tok", "decode_j_per_tok"}
    for chart in energy.values():
        assert chart["unit"] == "J/tok"
        base = PREFILL_J if chart["metric"] == "prefill_j_per_tok" else DECODE_J
        assert chart["y"] == pytest.approx([base + i * 1e-3 for i in range(4)])
    timings = [c for c in charts.values() if c not in energy.values()]
    assert timings
    assert all(c["unit"] == "s" for c in timings)


def test_no_counter_shows_n_a_with_the_reason_and_no_chart(tmp_path: Path):
    paths = write_history(tmp_path / "h", 1, seed=3, current=current_spec())
    with_energy(paths, reason="permission denied reading energy_uj")
    html, charts = render(tmp_path / "h", tmp_path / "out")
    assert 'title="permission denied reading energy_uj"' in html
    assert not any(str(c["metric"]).endswith("_j_per_tok") for c in charts.values())


def test_history_without_energy_fields_still_renders(tmp_path: Path):
    write_history(tmp_path / "h", 2, seed=3, current=current_spec())
    html, charts = render(tmp_path / "h", tmp_path / "out")
    assert "energy (prefill · decode)" in html
    assert not any(str(c["metric"]).endswith("_j_per_tok") for c in charts.values())


def test_joules_per_token_are_formatted_in_their_unit():
    assert fmt_joules_per_token(0.0125) == "12.5 mJ/tok"
    assert fmt_joules_per_token(2.5) == "2.5 J/tok"
    assert fmt_joules_per_token(None) == "n/a"
