"""Where the benchmark history lives: one answer for every job that reads or writes it (stdlib).

The gate job reads main's history and the store job writes it. When they resolved the location
separately, setting `PHASEBENCH_HISTORY_REPOSITORY` moved the writes to that repository while
the gate kept reading this one, found no branch there (`ls-remote` exit 2, "no such ref") and
judged every later push `no-baseline`, a success, forever. Both now call `resolve` with the
same settings: the workflow passes the variable to both steps, and nothing else chooses.

Settings (environment): `PHASEBENCH_HISTORY_REPOSITORY` (owner/name; empty or unset: this
repository), `GITHUB_REPOSITORY`, `GITHUB_SERVER_URL` (default https://github.com).

Deliberately not here: credentials (history_store.py reads `GITHUB_TOKEN`) and git itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

VARIABLE = "PHASEBENCH_HISTORY_REPOSITORY"
_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}")


class LocationError(ValueError):
    """The settings name no usable history repository; the message says which and how to fix."""


@dataclass(frozen=True)
class HistoryLocation:
    """A history repository: `owner/name`, its git URL, and the setting that chose it."""

    repository: str
    url: str
    chosen_by: str


def resolve(env: Mapping[str, str]) -> HistoryLocation:
    """The history repository of these settings; raises `LocationError` on a malformed one."""
    configured = env.get(VARIABLE, "").strip()
    repository = configured or env.get("GITHUB_REPOSITORY", "").strip()
    chosen_by = VARIABLE if configured else f"GITHUB_REPOSITORY ({VARIABLE} is not set)"
    if _REPOSITORY.fullmatch(repository) is None or ".." in repository:
        raise LocationError(
            f"{chosen_by} is {repository!r}: set the repository variable {VARIABLE} to "
            "owner/name, or leave it empty to keep history in this repository"
        )
    server = env.get("GITHUB_SERVER_URL", "").strip().rstrip("/") or "https://github.com"
    return HistoryLocation(repository, f"{server}/{repository}.git", chosen_by)
