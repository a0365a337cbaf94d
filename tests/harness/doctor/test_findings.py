"""Findings, exit status and the output: a line per finding with its level and its fix."""

from __future__ import annotations

import json

import pytest

from benchmarks.harness.doctor.findings import Finding, counts, exit_status, ok, skip
from benchmarks.harness.doctor.report import format_finding, format_lines, to_json, write_json


def test_a_finding_always_says_what_to_do_and_has_a_known_level():
    with pytest.raises(ValueError, match="what to do"):
        Finding("cpu.x", "warn", "something", action="  ")
    with pytest.raises(ValueError, match="unknown finding level"):
        Finding("cpu.x", "fatal", "something", action="fix it")  # type: ignore[arg-type]


def test_one_bad_finding_makes_the_machine_unfit_and_warnings_do_not():
    warned = [ok("a", "fine"), skip("b", "n/a"), Finding("c", "warn", "meh", "tune it")]
    assert exit_status(warned) == 0
    assert exit_status([*warned, Finding("d", "bad", "busy", "stop it")]) == 1
    assert counts(warned) == {"skip": 1, "ok": 1, "warn": 1, "bad": 0}


def test_a_line_is_level_check_message_and_action_even_for_multiline_text():
    line = format_finding(Finding("cpu.turbo", "warn", "turbo\non", "echo 1 |\n sudo tee x"))
    assert line == "WARN cpu.turbo: turbo on | do: echo 1 | sudo tee x"


def test_the_summary_names_the_verdict_and_the_exit_status_and_json_agrees(tmp_path):
    findings = [ok("a", "fine"), Finding("d", "bad", "busy", "stop it", {"others_cores": 1.5})]
    lines = format_lines("cuda:0", findings)
    assert lines[-1] == "doctor cuda:0: 1 bad, 0 warn, 1 ok, 0 skip: NOT fit to benchmark (exit 1)"
    path = tmp_path / "out" / "doctor.json"
    write_json(path, to_json("cuda:0", "bfloat16", findings))
    data = json.loads(path.read_text())
    assert data["schema"] == 1
    assert (data["fit"], data["exit_status"]) == (False, 1)
    assert data["findings"][1] == {
        "check": "d",
        "level": "bad",
        "message": "busy",
        "action": "stop it",
        "data": {"others_cores": 1.5},
    }
