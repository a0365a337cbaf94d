"""The gate's status vocabulary, and reading a status from a gate or A/B JSON (stdlib only).

A status comes from the JSON, never from an exit code alone: nox turns every failing exit
status into 1, so "cannot judge" (2) would read as "regression". A missing JSON, one of the
wrong shape, or one whose status contradicts the exit code or its own verdicts is `error`.

Deliberately not here: combining the shards (verdict.py), setting the status (commit_status.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# In rising severity: a shard that fails outweighs one that could not decide.
STATUSES = ("pass", "no-baseline", "inconclusive", "fail", "error")
_EXPECTED_EXIT = {
    "pass": {0},
    "no-baseline": {0},
    "inconclusive": {3},
    "fail": {1},
    "error": {1, 2},
}


@dataclass
class Judgement:
    """The suite's status, and the lines that explain it."""

    status: str = "pass"
    notes: list[str] = field(default_factory=list)

    def worsen(self, status: str, note: str) -> None:
        """Raise the status to `status` if that is worse; keep the note either way."""
        if STATUSES.index(status) > STATUSES.index(self.status):
            self.status = status
        self.notes.append(note)


def _load(path: Path) -> tuple[dict[str, Any] | None, str]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"{path.name} was not written (the step stopped early; see its log)"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{path.name} is not JSON: {exc}"
    if not isinstance(raw, dict) or raw.get("schema") != 1:
        return None, f"{path.name}: expected an object with schema 1"
    return raw, ""


def status_from_json(path: Path, exit_code: int | None = None) -> tuple[str, str]:
    """(status, reason) from a gate or A/B JSON file; `error` for anything untrustworthy."""
    raw, problem = _load(path)
    if raw is None:
        return "error", problem
    status = raw.get("status")
    benchmarks = raw.get("benchmarks", [])
    if not isinstance(benchmarks, list):
        return "error", f"{path.name}: `benchmarks` is {type(benchmarks).__name__}, not a list"
    failing = [b for b in benchmarks if isinstance(b, dict) and b.get("verdict") == "fail"]
    if status not in STATUSES:
        problem = f"{path.name}: status {status!r} is not one of {list(STATUSES)}"
    elif exit_code is not None and exit_code not in _EXPECTED_EXIT[str(status)]:
        problem = f"{path.name} says {status} but the command exited {exit_code}"
    elif status in ("pass", "no-baseline") and failing:
        problem = f"{path.name} says {status} but lists {len(failing)} failing verdict(s)"
    if problem:
        return "error", problem
    return str(status), str(raw.get("status_reason", ""))


def decide(status: str, accepted: bool) -> bool:
    """Whether the check passes: pass and no-baseline do; fail only when accepted; inconclusive
    (re-run it) and error never."""
    return status in ("pass", "no-baseline") or (status == "fail" and accepted)
