"""`doctor --self-check --also-transformers`: overlay environments made once and reused, a
failed install said and cleaned up, the compile probe run with the overlay's Python and named
for its version (fakes for venv, pip and the probe's process; the real overlay is measured in
the issue note: it downloads transformers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.harness import cli
from benchmarks.harness.doctor import run
from benchmarks.harness.doctor.findings import ok
from benchmarks.harness.doctor.selfcheck import run as selfcheck
from benchmarks.harness.doctor.selfcheck import versions
from benchmarks.harness.errors import MatrixError

CPU = torch.device("cpu")


def test_versions_are_parsed_once_each_in_order_and_bad_ones_name_the_flag():
    assert versions.parse_versions(None) == ()
    assert versions.parse_versions("4.57.1, 5.24.0,4.57.1") == ("4.57.1", "5.24.0")
    assert versions.parse_versions("4.46.3") == ("4.46.3",)
    with pytest.raises(MatrixError, match="--also-transformers: latest is not a version"):
        versions.parse_versions("4.57.1,latest")
    with pytest.raises(MatrixError, match="--also-transformers"):
        versions.parse_versions(",")


def test_also_transformers_without_the_self_check_is_bad_input(monkeypatch, capsys):
    monkeypatch.setattr(run, "run_checks", lambda *_a, **_k: pytest.fail("checks ran"))
    assert cli.main(["doctor", "--device", "cpu", "--also-transformers", "4.57.1"]) == 2
    assert "--also-transformers applies to the self-check only" in capsys.readouterr().err


class FakeTools:
    """`python -m venv` makes the interpreter's file; pip succeeds unless told to fail."""

    def __init__(self, pip_code: int = 0) -> None:
        self.pip_code = pip_code
        self.commands: list[list[str]] = []
        self.pins: list[str] = []

    def __call__(self, command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        if command[1:3] == ["-m", "venv"]:
            python = Path(command[-1]) / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.write_text("")
            versions._site_packages(Path(command[-1])).mkdir(parents=True)
            return subprocess.CompletedProcess(command, 0, "", "")
        assert command[1:4] == ["-m", "pip", "install"]
        self.pins.append(Path(command[command.index("-c") + 1]).read_text())
        error = "ERROR: No matching distribution found for transformers==9.9.9"
        return subprocess.CompletedProcess(command, self.pip_code, "", error)


def test_an_overlay_is_made_once_with_torch_pinned_and_reused(tmp_path):
    tools = FakeTools()
    python = versions.ensure_overlay("4.57.1", tmp_path, tools)
    assert isinstance(python, Path)
    assert python.parent.parent == versions.overlay_dir("4.57.1", tmp_path)
    assert "--system-site-packages" in tools.commands[0]
    assert tools.commands[0][0] == sys.executable
    assert tools.commands[1][0] == str(python)
    assert tools.commands[1][-1] == "transformers==4.57.1"
    assert tools.pins == [f"torch=={torch.__version__}\n"]  # pip may never swap torch
    # This environment's packages (torch) are on the overlay's path, after its own.
    pth = versions._site_packages(python.parent.parent) / "phasebench-parent.pth"
    assert str(Path(torch.__file__).resolve().parents[1]) in pth.read_text().splitlines()
    assert versions.ensure_overlay("4.57.1", tmp_path, tools) == python
    assert len(tools.commands) == 2  # reused: nothing run again


def test_a_failed_install_is_said_and_leaves_no_half_made_overlay(tmp_path):
    why = versions.ensure_overlay("9.9.9", tmp_path, FakeTools(pip_code=1))
    assert isinstance(why, str)
    assert why.startswith("pip install transformers==9.9.9 failed: ERROR: No matching")
    assert not versions.overlay_dir("9.9.9", tmp_path).exists()


def test_a_half_made_overlay_from_a_killed_install_is_made_again(tmp_path):
    folder = versions.overlay_dir("4.57.1", tmp_path)
    (folder / "bin").mkdir(parents=True)  # no marker: the install never finished
    (folder / "bin" / "python").write_text("stale")
    tools = FakeTools()
    assert isinstance(versions.ensure_overlay("4.57.1", tmp_path, tools), Path)
    assert len(tools.commands) == 2
    assert (folder / versions.MARKER).is_file()


def test_each_version_runs_the_compile_probe_with_its_overlay_python_named_for_it(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("PHASEBENCH_OVERLAY_DIR", str(tmp_path))
    tools = FakeTools()
    spawned: list[list[str]] = []

    def probe_process(command, timeout_s):
        spawned.append(command)
        steps = ok("selfcheck.compile_steps", "0 graph break(s)", compile_graph_breaks=0)
        fields = ok("selfcheck.record_fields", "fields")
        line = selfcheck.MARKER + json.dumps([steps.to_json(), fields.to_json()])
        return subprocess.CompletedProcess(command, 0, line + "\n", "")

    request = selfcheck.SelfCheckRequest(CPU, also_transformers=("4.57.1", "9.9.9"))

    def install(command, timeout_s):
        if "transformers==9.9.9" in command:
            return FakeTools(pip_code=1)(command, timeout_s)
        return tools(command, timeout_s)

    found = list(selfcheck.self_check(request, probes=(), run=probe_process, install=install))
    assert [(f.check, f.level) for f in found] == [
        ("selfcheck.compile_steps@transformers-4.57.1", "ok"),
        ("selfcheck.compile_steps@transformers-9.9.9", "warn"),
    ]
    assert found[0].data == {"compile_graph_breaks": 0}
    overlay = versions.overlay_dir("4.57.1", tmp_path)
    assert spawned == [
        [str(overlay / "bin" / "python"), "-m", "benchmarks.harness.doctor.selfcheck",
         "compile_steps", "--device", "cpu", "--model", selfcheck.DEFAULT_MODEL]
    ]  # fmt: skip
    assert "not checked on transformers 9.9.9: pip install" in found[1].message
