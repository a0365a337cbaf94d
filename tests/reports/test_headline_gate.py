"""The headline through the real CLI on synthetic history files: a whole-run shift, undecided
timings that lean to a slowdown, a commit's runs pooled by default (issue 28)."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path

from reports.cli import main as reports_cli
from reports.scenarios import CELLS, RunSpec, _commit, baseline_specs, make_doc, pr_spec, run_gate


def _render(tmp_path: Path, specs: list[RunSpec], seed: int = 1) -> tuple[str, str]:
    rng = random.Random(seed)
    folder = tmp_path / "hist"
    folder.mkdir()
    for n, spec in enumerate(specs, start=1):
        (folder / f"{n:04d}_{spec.commit[:8]}.json").write_text(json.dumps(make_doc(spec, rng)))
    out = tmp_path / "out"
    assert reports_cli(["render", "--history", str(folder), "--out", str(out)]) == 0
    return (out / "index.html").read_text(), (out / "summary.md").read_text()


def test_without_probes_a_whole_run_move_is_machine_or_code_never_pass_never_fail(tmp_path):
    """Issue 41: this history has no host probe, so nothing measured tells a slower host from
    code that slowed every benchmark (before: "the host", each timing judged against it)."""
    specs = [*baseline_specs(), pr_spec(factor=1.10)]
    r = run_gate(specs, 21)
    assert r.code == 3
    assert r.status == "inconclusive"
    assert "fail" not in r.verdicts.values()
    assert "pass" not in r.verdicts.values()  # every timing moved with it: machine or code
    assert "SHIFT the suite's timings moved +" in r.output
    assert "moved +10" in r.output or "moved +9" in r.output
    assert "no host probe" in r.output
    assert "nox -s ab" in r.output
    html, summary = _render(tmp_path, specs)
    assert "INCONCLUSIVE" in html
    assert "together" in html
    assert "together" in summary
    assert "PASS" not in summary.splitlines()[0]


def test_undecided_timings_that_lean_to_a_slowdown_are_named_not_pass():
    # 6 benchmarks 5 % slower, 2 rounds: too few to decide each, together not a PASS
    slowed = {c.fullname: 1.05 for c in CELLS[:6]}
    r = run_gate([*baseline_specs(rounds=2), pr_spec(slow=slowed, rounds=2)], 22)
    assert r.code == 3
    assert r.status == "inconclusive"
    assert "undecided timings on hw0c0ffe lean to a slowdown" in r.output
    assert "(up to +" in r.output
    assert r.output.startswith("LEAN ")


def test_a_red_run_re_run_on_one_commit_is_judged_with_its_earlier_run_and_shows_it():
    commit = _commit(31, "red")
    slowed = {c.fullname: 1.5 for c in CELLS[:3]}
    base = baseline_specs()
    when = base[-1].when + timedelta(days=1)
    first = RunSpec(commit, when, "main", slow=slowed)
    second = RunSpec(commit, when + timedelta(minutes=30), "main", slow=slowed)
    r = run_gate([*base, first, second], 23)
    assert r.status == "fail"
    assert "POOLED" in r.output
    assert "judged with this commit's 1 earlier run(s)" in r.output
    assert "FAIL (" in r.output  # the earlier run alone failed too


def test_busy_baseline_runs_are_never_main_s_level():
    """Main's two newest runs were busy and 20 % slow everywhere; a PR 20 % slower everywhere
    must not match them as main's new level (it would read PASS)."""
    base = baseline_specs()
    busy = [RunSpec(s.commit, s.when, factor=1.2, other_cpu_pct=40.0) for s in base[-2:]]
    r = run_gate([*base[:-2], *busy, pr_spec(factor=1.2)], 24)
    assert r.status == "inconclusive"
    assert "fail" not in r.verdicts.values()
    # judged against main's quiet level: +20 % everywhere, no probe: machine or code
    assert "SHIFT the suite's timings moved +" in r.output
    assert "BUSY" not in r.output  # the PR's run was quiet; the busy runs were main's
