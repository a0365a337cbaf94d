"""`doctor --self-check --also-transformers 4.57.1,5.24.0`: the compiled-step probe on other
transformers versions, each in an environment of its own.

Why: a graph break can be one transformers version's own (issue 30, row 1: 4.46-4.57 asked a
static cache its length inside every step; 5.x does not), and transformers cannot be switched in
a running process. So each version gets an overlay environment (`python -m venv
--system-site-packages`, plus a `.pth` file naming this environment's site-packages: torch,
the GPU stack and phasebench's other dependencies are this environment's own, never downloaded
again) with only
`transformers==VERSION` and what it needs installed into it, torch pinned to this one
(`-c`, so pip can never swap in another build). The environment is made once per (version,
Python, torch) under `overlay_root()` and reused; a marker file written last says it is
complete, and a half-made one (a killed install) is removed and made again.

Each version's `compile_steps` probe runs with that environment's Python from this checkout;
its line is renamed `selfcheck.compile_steps@transformers-VERSION`. A version whose install
fails (no network, no wheel for this Python) is a `warn` with pip's last line: it says nothing
about this machine's fitness, only that the version was not checked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from benchmarks.harness.doctor.findings import Finding
from benchmarks.harness.errors import MatrixError

VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?([.-]?(post|rc|dev)\d+)?$")
INSTALL_TIMEOUT_S = 600.0
MARKER = "phasebench-overlay-complete"

Run = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


def parse_versions(text: str | None) -> tuple[str, ...]:
    """`4.57.1,5.24.0` -> the versions, in order, once each; bad input names the flag."""
    if not text:
        return ()
    versions = tuple(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
    bad = [v for v in versions if not VERSION_RE.match(v)]
    if bad or not versions:
        raise MatrixError(
            f"--also-transformers: {', '.join(bad) or repr(text)} is not a version list; "
            "give released versions separated by commas, e.g. --also-transformers 4.57.1,5.24.0"
        )
    return versions


def overlay_root() -> Path:
    """`$PHASEBENCH_OVERLAY_DIR`, else `$XDG_CACHE_HOME/phasebench/overlays`, else
    `~/.cache/phasebench/overlays`."""
    if explicit := os.environ.get("PHASEBENCH_OVERLAY_DIR"):
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "phasebench" / "overlays"


def overlay_dir(version: str, root: Path) -> Path:
    """One folder per (transformers version, Python, torch): a new torch gets a new overlay."""
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    torch_version = re.sub(r"[^0-9A-Za-z.]+", "_", torch.__version__)
    return root / f"transformers-{version}-{python}-torch{torch_version}"


def _python_in(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in f"{done.stdout or ''}\n{done.stderr or ''}".splitlines() if line]
    return lines[-1].strip() if lines else f"exit {done.returncode}"


def ensure_overlay(version: str, root: Path, run: Run) -> Path | str:
    """The overlay's Python (made now if needed), or why it could not be made."""
    folder = overlay_dir(version, root)
    if (folder / MARKER).is_file():
        return _python_in(folder)
    shutil.rmtree(folder, ignore_errors=True)  # a half-made overlay: a killed install
    folder.parent.mkdir(parents=True, exist_ok=True)
    made = run([sys.executable, "-m", "venv", "--system-site-packages", str(folder)], 120.0)
    if made.returncode != 0:
        return f"python -m venv failed: {_last_line(made)}"
    _see_this_environment(folder)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as pins:
        pins.write(f"torch=={torch.__version__}\n")  # never another torch build
    try:
        installed = run(
            [
                str(_python_in(folder)), "-m", "pip", "install", "--quiet",
                "--disable-pip-version-check", "-c", pins.name, f"transformers=={version}",
            ],
            INSTALL_TIMEOUT_S,
        )  # fmt: skip
    finally:
        Path(pins.name).unlink(missing_ok=True)
    if installed.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        return f"pip install transformers=={version} failed: {_last_line(installed)}"
    (folder / MARKER).write_text(f"transformers=={version}\n", encoding="utf-8")
    return _python_in(folder)


def _site_packages(folder: Path) -> Path:
    if os.name == "nt":
        return folder / "Lib" / "site-packages"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return folder / "lib" / version / "site-packages"


def _see_this_environment(folder: Path) -> None:
    """Put this environment's site-packages on the overlay's path, after its own.

    `--system-site-packages` reaches the *base* interpreter's packages only: run from a
    virtual environment (the usual case: nox's), torch would be missing. A `.pth` file's
    folders are appended after the overlay's own site-packages, so the transformers installed
    there wins and everything else is this environment's."""
    paths = sysconfig.get_paths()
    ours = dict.fromkeys(str(Path(paths[key]).resolve()) for key in ("purelib", "platlib"))
    (_site_packages(folder) / "phasebench-parent.pth").write_text(
        "".join(f"{path}\n" for path in ours), encoding="utf-8"
    )


def spawn(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, 124, "", f"timed out after {timeout_s:.0f} s")


def renamed(findings: Sequence[Finding], version: str) -> list[Finding]:
    """The `compile_steps` line of another version, named for it (the other lines of the
    probe, the record's fields and the versions hint, are this version's too: dropped)."""
    return [
        Finding(f"{f.check}@transformers-{version}", f.level, f.message, f.action, dict(f.data))
        for f in findings
        if f.check == "selfcheck.compile_steps"
    ]


def not_installed(version: str, why: str, root: Path) -> Finding:
    return Finding(
        f"selfcheck.compile_steps@transformers-{version}",
        "warn",
        f"not checked on transformers {version}: {why}",
        f"check the network and the Python version; the overlay goes to {root} "
        "(PHASEBENCH_OVERLAY_DIR moves it)",
        {"transformers": version},
    )
