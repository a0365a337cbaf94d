"""A finding: one check's verdict on this machine, with the figure it rests on and the fix.

Levels, worst last: `skip` (the check does not apply here, said so), `ok`, `warn` (results stay
usable but noisier or less comparable: the fix is recommended) and `bad` (results would be
untrustworthy: the doctor exits 1). The exit status follows DESIGN §10: 0 fit, 1 a `bad`
finding, 2 bad input (raised as `PhasebenchError` before any check runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Level = Literal["skip", "ok", "warn", "bad"]
LEVELS: tuple[Level, ...] = ("skip", "ok", "warn", "bad")
NOTHING_TO_DO = "nothing to do"

EXIT_FIT = 0
EXIT_UNFIT = 1
EXIT_BAD_INPUT = 2

JsonValue = str | int | float | bool | None


@dataclass(frozen=True)
class Finding:
    """One check's result: `check` names it (`cpu.governor`), `action` is what to do about it."""

    check: str
    level: Level
    message: str
    action: str = NOTHING_TO_DO
    data: Mapping[str, JsonValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"unknown finding level {self.level!r}; use one of {LEVELS}")
        if not self.action.strip():
            raise ValueError(f"{self.check}: a finding always says what to do")

    def to_json(self) -> dict[str, object]:
        """Plain JSON for `--json`."""
        return {
            "check": self.check,
            "level": self.level,
            "message": self.message,
            "action": self.action,
            "data": dict(self.data),
        }


def ok(check: str, message: str, **data: JsonValue) -> Finding:
    """A check that passed: nothing to do."""
    return Finding(check, "ok", message, NOTHING_TO_DO, data)


def skip(check: str, message: str, **data: JsonValue) -> Finding:
    """A check that does not apply to this device or OS (the message says why)."""
    return Finding(check, "skip", message, NOTHING_TO_DO, data)


def exit_status(findings: Iterable[Finding]) -> int:
    """0 when no finding is `bad`, else 1."""
    return EXIT_UNFIT if any(f.level == "bad" for f in findings) else EXIT_FIT


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    """How many findings of each level."""
    found: dict[str, int] = dict.fromkeys(LEVELS, 0)
    for finding in findings:
        found[finding.level] += 1
    return found
