"""`nox -s <session> --install-only` builds a session's environment without aborting.

A CI image is built with `--install-only`, under which nox's `session.run` runs nothing and
returns None; `session.run_install` still runs. The noxfile asks the session's interpreter
which torch it has while it installs (`_probe`, `_torch_constraint`); through `session.run`
those answers were None under `--install-only`, and every session stopped with "torch is not
importable after installing it".

These tests call the noxfile's own session functions with nox's real `Session` (so `run`,
`run_install` and `install` decide what runs, as under the nox command line) and fake only the
process layer, `nox.command.run`: a `python -c` probe runs in this interpreter (which has torch),
and a pip install is recorded, not run.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

nox = pytest.importorskip("nox", reason="nox is in the test group: pip install nox")
from nox import sessions, virtualenv  # noqa: E402 - after the importorskip

import noxfile  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class Processes:
    """`nox.command.run`'s stand-in: probes run here, installs and other commands recorded."""

    def __init__(self) -> None:
        self.installs: list[list[str]] = []
        self.commands: list[list[str]] = []

    def __call__(self, args: Any, **_kwargs: Any) -> str | bool:
        args = [str(a) for a in args]
        if args[:2] == ["python", "-c"]:
            done = subprocess.run(
                [sys.executable, "-c", args[2]],
                check=False,
                capture_output=True,
                text=True,
                timeout=120,
            )
            return done.stdout
        if args[:4] == ["python", "-m", "pip", "install"]:
            self.installs.append(args[4:])
            return ""
        self.commands.append(args)
        return ""


def a_session(tmp_path: Path, *, install_only: bool, reused: bool = False) -> Any:
    """nox's own `Session` over an environment at `tmp_path` (never created: installs and
    runs go to `Processes`)."""
    env = virtualenv.VirtualEnv(str(tmp_path / "venv"), venv_backend="venv")
    env._reused = reused
    (tmp_path / "venv").mkdir(exist_ok=True)
    config = argparse.Namespace(
        install_only=install_only,
        no_install=reused,
        verbose=False,
        error_on_external_run=False,
        invoked_from=str(ROOT),
        posargs=[],
    )
    runner = argparse.Namespace(
        global_config=config,
        venv=env,
        posargs=[],
        friendly_name="test-session",
        envdir=str(tmp_path / "venv"),
    )
    return sessions.Session(runner)  # type: ignore[arg-type]


@pytest.fixture
def processes(monkeypatch: pytest.MonkeyPatch) -> Processes:
    fake = Processes()
    monkeypatch.setattr(nox.command, "run", fake)
    monkeypatch.delenv("PHASEBENCH_TORCH", raising=False)
    return fake


@pytest.mark.parametrize(
    ("name", "call"),
    [
        # One session per path through the noxfile: `_install` then a command (tests; lint
        # and tests-tp are the same path), `_run_matrix` (smoke), `_bench`'s device check
        # (bench-cuda), `_run_verdict` (doctor).
        ("tests", functools.partial(noxfile.tests.func, transformers="5.24.0")),
        ("smoke", noxfile.smoke.func),
        ("bench-cuda", noxfile.bench_cuda.func),
        ("doctor", noxfile.doctor.func),
    ],
)
def test_install_only_installs_with_the_torch_constraint_and_runs_nothing(
    tmp_path: Path, processes: Processes, name: str, call: Any
) -> None:
    session = a_session(tmp_path, install_only=True)
    call(session)  # raises nox's error on an abort ("torch is not importable ...")
    assert processes.commands == [], f"{name} ran commands under --install-only"
    groups = processes.installs[-1]  # torch is here already: only the groups are installed
    assert groups[-2] == "-c"
    constraint = Path(groups[-1]).read_text(encoding="utf-8")
    import torch  # noqa: PLC0415 - the version the probe saw

    assert constraint == f"torch=={torch.__version__}\n"


def test_without_install_only_the_session_runs_its_command(
    tmp_path: Path, processes: Processes
) -> None:
    noxfile.tests.func(a_session(tmp_path, install_only=False), "5.24.0")
    assert processes.commands[0][:4] == ["python", "-m", "pytest", "tests"]


def test_no_install_on_a_reused_environment_installs_nothing_and_still_runs(
    tmp_path: Path, processes: Processes
) -> None:
    noxfile.tests.func(a_session(tmp_path, install_only=False, reused=True), "5.24.0")
    assert processes.installs == []
    assert processes.commands[0][:4] == ["python", "-m", "pytest", "tests"]


def test_the_quantized_session_builds_quantos_extension_as_an_install_step(
    tmp_path: Path, processes: Processes
) -> None:
    """Under --install-only too: compiling quanto is installing, not measuring (~40 s a fresh
    environment would otherwise spend inside the matrix's run)."""
    noxfile.bench_cpu_quant.func(a_session(tmp_path, install_only=True))
    assert processes.commands == [["python", "-m", "benchmarks.harness.kvquant.quantobuild", "cpu"]]
