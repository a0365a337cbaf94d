"""The gate with host-probe records, through the real CLI (issue 41): the SHIFT line quotes the
probes' ratio, a suite-wide move with steady probes fails as a group, a host move is not the
code's, and the report draws the host's own trend.

Histories are `reports.scenarios`' synthetic files (36 benchmarks, 20 main runs) with two probe
records per run (`extra_info.host_probe`: `memory`, `compute`), the probes' level scaled by the
run's host factor.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
from pathlib import Path
from typing import Any

from reports.cli import main as reports_cli
from reports.scenarios import CELLS, RunSpec, baseline_specs, make_doc, pr_spec


def _probes(rng: random.Random, host: float) -> list[dict[str, Any]]:
    out = []
    for kind, level in (("memory", 0.03), ("compute", 0.01)):
        state = host * math.exp(rng.gauss(0.0, 0.003))
        data = [level * state * math.exp(rng.gauss(0.0, 0.005)) for _ in range(12)]
        out.append(
            {
                "group": "host_probe",
                "name": f"host_probe[{kind}]",
                "fullname": f"host_probe::host_probe[{kind}]",
                "extra_info": {"schema": 1, "host_probe": kind},
                "stats": {"data": data, "median": sorted(data)[6]},
            }
        )
    return out


def _history(folder: Path, specs: list[RunSpec], hosts: list[float], seed: int) -> Path:
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    for n, (spec, host) in enumerate(zip(specs, hosts, strict=True), start=1):
        doc = make_doc(spec, rng)
        doc["benchmarks"] += _probes(rng, host)
        (folder / f"{n:04d}_{spec.commit[:8]}.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder


def _gate(folder: Path, tmp_path: Path) -> tuple[int, str, dict[str, Any]]:
    out = tmp_path / "gate.json"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = reports_cli(["gate", "--history", str(folder), "--json", str(out)])
    return code, printed.getvalue(), json.loads(out.read_text(encoding="utf-8"))


def test_every_timing_ten_percent_slower_with_steady_probes_fails_as_the_code(tmp_path):
    """Before issue 41 this read "SHIFT every timing moved +10 %: the host" and passed."""
    specs = [*baseline_specs(), pr_spec(factor=1.10)]
    folder = _history(tmp_path / "h", specs, [1.0] * len(specs), 1)
    code, printed, doc = _gate(folder, tmp_path)
    assert code == 1, printed
    assert doc["status"] == "fail"
    (machine,) = doc["machines"]
    shift = machine["shift"]
    assert shift["mode"] == "probes"
    assert not shift["probes"]["moved"]
    suite = next(g for g in shift["groups"] if g["group"].startswith("suite (every"))
    assert suite["verdict"] == "fail"
    assert suite["ratio"] > 1.05
    assert shift["mde_suite_wide"] < 0.10  # the suite-wide question's own MDE
    assert "SHIFT the host probes on hw0c0ffe held" in printed
    assert "FAIL suite (every primary timing)" in printed


def test_the_host_ten_percent_slower_with_the_probes_is_never_the_code_s_fail(tmp_path):
    specs = [*baseline_specs(), pr_spec(factor=1.10)]
    hosts = [1.0] * (len(specs) - 1) + [1.10]
    folder = _history(tmp_path / "h", specs, hosts, 2)
    code, printed, doc = _gate(folder, tmp_path)
    assert code == 3, printed
    assert doc["counts"]["fail"] == 0
    assert doc["counts"]["pass"] < len(CELLS)  # a timing that moved with the host: undecided
    (machine,) = doc["machines"]
    kinds = {k["kind"]: k["ratio"] for k in machine["shift"]["probes"]["kinds"]}
    shift = next(line for line in printed.splitlines() if line.startswith("SHIFT"))
    assert f"memory \u00d7{kinds['memory']:.2f}" in shift
    assert "moved" in shift
    assert "machine or code" in doc["status_reason"]
    assert doc["status_reason"].startswith("shift:")


def test_the_report_draws_the_host_s_own_trend(tmp_path):
    specs = [*baseline_specs(), pr_spec()]
    folder = _history(tmp_path / "h", specs, [1.0] * len(specs), 3)
    out = tmp_path / "out"
    assert reports_cli(["render", "--history", str(folder), "--out", str(out)]) == 0
    html = (out / "index.html").read_text(encoding="utf-8")
    assert "The machine's own trend (host probes)" in html
    assert 'data-kind="host"' in html
    assert '"h0-0"' in html  # its chart data
    assert "host probe: memory" in html
    # never a benchmark of the report
    assert "host_probe::host_probe" not in html


def test_probes_without_enough_history_are_said_and_judged_as_without(tmp_path):
    """The first runs with probes after a history without: the gate says why they are no
    evidence yet instead of crediting a move it cannot measure."""
    specs = [*baseline_specs(), pr_spec()]
    rng = random.Random(4)
    folder = tmp_path / "h"
    folder.mkdir()
    for n, spec in enumerate(specs, start=1):
        doc = make_doc(spec, rng)
        if n > len(specs) - 3:  # the probes arrived two runs before the current one
            doc["benchmarks"] += _probes(rng, 1.0)
        (folder / f"{n:04d}_{spec.commit[:8]}.json").write_text(json.dumps(doc), encoding="utf-8")
    code, printed, doc = _gate(folder, tmp_path)
    assert code in (0, 3), printed
    assert "PROBES hw0c0ffe: the current run's host probes are no evidence yet" in printed
    assert "2 quiet baseline run(s) with the probe, 5 needed" in printed
    (machine,) = doc["machines"]
    assert machine["shift"]["mode"] != "probes"
