"""The doctor's output: one line per finding for people, one JSON object for CI (`--json`).

A line is `LEVEL check: message | do: action`; the last line sums the levels and says whether
the machine is fit, with the exit status. The JSON object (`schema: 1`) holds the same findings
with their figures (`data`), the device, the counts and the exit status.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.doctor.findings import EXIT_FIT, Finding, counts, exit_status

JSON_SCHEMA = 1


def _one_line(text: str) -> str:
    return " ".join(text.split())


def format_finding(finding: Finding) -> str:
    """`WARN cpu.turbo: turbo on (...) | do: echo 1 | sudo tee ...`."""
    return (
        f"{finding.level.upper():<4} {finding.check}: {_one_line(finding.message)}"
        f" | do: {_one_line(finding.action)}"
    )


def summary_line(device: str, findings: Sequence[Finding]) -> str:
    """`doctor cuda:0: 0 bad, 2 warn, 14 ok, 1 skip: fit to benchmark (exit 0)`."""
    found = counts(findings)
    status = exit_status(findings)
    verdict = "fit to benchmark" if status == EXIT_FIT else "NOT fit to benchmark"
    tally = ", ".join(f"{found[level]} {level}" for level in ("bad", "warn", "ok", "skip"))
    return f"doctor {device}: {tally}: {verdict} (exit {status})"


def format_lines(device: str, findings: Sequence[Finding]) -> list[str]:
    """Every finding's line, then the summary."""
    return [*(format_finding(f) for f in findings), summary_line(device, findings)]


def to_json(device: str, dtype: str, findings: Sequence[Finding]) -> dict[str, object]:
    """The `--json` object."""
    status = exit_status(findings)
    return {
        "schema": JSON_SCHEMA,
        "device": device,
        "dtype": dtype,
        "fit": status == EXIT_FIT,
        "exit_status": status,
        "counts": counts(findings),
        "findings": [f.to_json() for f in findings],
    }


def write_json(path: Path, payload: dict[str, object]) -> None:
    """Write the object (its folder is created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
