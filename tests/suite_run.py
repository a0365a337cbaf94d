"""Run the benchmark suite on a matrix in a subprocess, as a user would, for end-to-end tests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def is_probe(record: dict[str, Any]) -> bool:
    """A host-probe record (`extra_info.host_probe`, benchmarks/suite/hostprobe.py)."""
    return bool(record.get("extra_info", {}).get("host_probe"))


def run_suite(
    base: Path,
    matrix: str,
    timeout_s: int = 600,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """`pytest benchmarks --matrix` on `matrix` (YAML text) in `base`, with `args` after (a `-p`
    plugin, say) and `env` for the process (default: this one's); asserts exit 0 and one
    history file; returns the terminal output and the saved benchmarks (the cells' records: the
    host probes' records are left out, `tests/suite/test_host_probe_e2e.py` reads them)."""
    (base / "m.yaml").write_text(matrix, encoding="utf-8")
    command = [
        sys.executable, "-m", "pytest", str(ROOT / "benchmarks"),
        "-c", str(ROOT / "pyproject.toml"),
        "-p", "no:cacheprovider", "-rs", "--peaks", "none", "--matrix", str(base / "m.yaml"),
        f"--benchmark-storage=file://{base / 'history'}", *args,
    ]  # fmt: skip
    done = subprocess.run(  # the exit code is asserted below, with the output
        command,
        check=False,
        cwd=base,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    files = sorted((base / "history").rglob("*.json"))
    assert len(files) == 1
    records = json.loads(files[0].read_text())["benchmarks"]
    return done.stdout, [r for r in records if not is_probe(r)]
