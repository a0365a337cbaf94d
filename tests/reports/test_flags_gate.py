"""Busy machine, nothing decided, implausible change, drift, a second run of one commit: what
the gate, summary.md and the HTML say (synthetic history files through the real CLI)."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path

from reports.cli import main as reports_cli
from reports.scenarios import (
    CELLS,
    T0,
    RunSpec,
    _commit,
    baseline_specs,
    make_doc,
    pr_spec,
    run_gate,
)


def _write(tmp_path: Path, specs: list[RunSpec], seed: int = 1) -> Path:
    rng = random.Random(seed)
    folder = tmp_path / "hist"
    folder.mkdir()
    for n, spec in enumerate(specs, start=1):
        (folder / f"{n:04d}_{spec.commit[:8]}.json").write_text(json.dumps(make_doc(spec, rng)))
    return folder


def test_a_busy_run_is_inconclusive_never_pass_and_named(tmp_path, capsys):
    slowed = {c.fullname: 3.0 for c in CELLS}
    r = run_gate([*baseline_specs(), pr_spec(slow=slowed, other_cpu_pct=40.0)], 3)
    assert r.code == 3
    assert r.status == "inconclusive"
    assert not [v for v in r.verdicts.values() if v == "fail"]
    assert "BUSY" in r.output
    assert "other processes used 40 % of the CPU" in r.output
    folder = _write(tmp_path, [*baseline_specs(), pr_spec(slow=slowed, other_cpu_pct=40.0)])
    assert reports_cli(["render", "--history", str(folder), "--out", str(tmp_path / "out")]) == 0
    html = (tmp_path / "out" / "index.html").read_text()
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "INCONCLUSIVE" in html
    assert "Busy machine" in html
    assert "INCONCLUSIVE" in summary
    assert "Busy machine" in summary
    assert "PASS" not in summary


def test_older_files_without_other_cpu_pct_are_quiet():
    r = run_gate([*baseline_specs(), pr_spec()], 4)
    assert r.status == "pass"
    assert "BUSY" not in r.output


def test_a_second_run_with_three_1_5x_slowdowns_fails_them():
    commit = _commit(6, "local")
    slowed = {c.fullname: 1.5 for c in CELLS[:3]}
    first = RunSpec(commit, T0, "main", rounds=10)
    second = RunSpec(commit, T0 + timedelta(minutes=20), "main", rounds=10, slow=slowed)
    r = run_gate([first, second], 5)
    assert r.code == 1
    assert {n for (n, _), v in r.verdicts.items() if v == "fail"} == set(slowed)


def test_nothing_decided_is_inconclusive_with_exit_3_not_pass():
    slowed = {c.fullname: 1.045 for c in CELLS}  # at the threshold: nothing can be decided
    commit = _commit(7, "local")
    first = RunSpec(commit, T0, "main", rounds=3)
    second = RunSpec(commit, T0 + timedelta(minutes=20), "main", rounds=3, slow=slowed)
    r = run_gate([first, second], 6)
    timed = list(r.verdicts.values())
    if all(v == "inconclusive" for v in timed):
        assert r.status == "inconclusive"
        assert r.code == 3
        assert f"{len(timed)} of {len(timed)} timings undecided" in r.output
    assert r.status != "pass" or any(v in ("pass", "improved") for v in timed)


def test_an_implausible_change_is_flagged_for_a_human(tmp_path):
    cell = CELLS[0]
    specs = [*baseline_specs(), pr_spec(slow={cell.fullname: 0.1})]
    r = run_gate(specs, 7)
    assert f"IMPLAUSIBLE {cell.fullname}" in r.output
    assert "check that the benchmark still does its work" in r.output
    folder = _write(tmp_path, specs)
    out = tmp_path / "out"
    reports_cli(
        ["render", "--history", str(folder), "--out", str(out), "--json", str(out / "g.json")]
    )
    assert "Implausible" in (out / "index.html").read_text()
    assert "Implausible" in (out / "summary.md").read_text()
    doc = json.loads((out / "g.json").read_text())
    assert any(b["implausible"] for b in doc["benchmarks"] if b["fullname"] == cell.fullname)


def test_slow_drift_is_named_per_benchmark_and_suite_wide():
    specs = [RunSpec(_commit(i), T0 + timedelta(days=i), factor=1.005**i) for i in range(60)]
    r = run_gate(specs, 8)
    assert "DRIFT suite-wide" in r.output
    assert sum(line.startswith("DRIFT benchmarks/") for line in r.output.splitlines()) >= 30


def test_a_history_of_one_run_says_one_run_so_far(tmp_path):
    folder = _write(tmp_path, [RunSpec(_commit(1), T0)])
    reports_cli(["render", "--history", str(folder), "--out", str(tmp_path / "out")])
    html = (tmp_path / "out" / "index.html").read_text()
    assert "One run so far" in html


def test_the_pct_of_peak_column_names_its_peak_source(tmp_path):
    folder = tmp_path / "hist"
    folder.mkdir()
    doc = make_doc(RunSpec(_commit(1), T0), random.Random(1))
    for bench in doc["benchmarks"]:
        bench["extra_info"].update(prefill_pct_of_peak_flops=12.5, peak_source="spec-sheet")
    (folder / "0001_a.json").write_text(json.dumps(doc))
    reports_cli(["render", "--history", str(folder), "--out", str(tmp_path / "out")])
    assert "of spec-sheet peak" in (tmp_path / "out" / "index.html").read_text()
