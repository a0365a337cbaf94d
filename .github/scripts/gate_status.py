"""The `phasebench/gate` commit status as data: whose it is and what its description says.

Every writer of the required status speaks this vocabulary (bench-claim.yml's shell step too,
which tests/ci keeps equal to it):
- **a verdict** (verdict.py; the merge queue's pass-through, announce.py) ends with the runner
  classes it judged, ` [cuda+mps]` (` []`: nothing measured). A later verdict replaces it only
  when it covers at least those classes, or when it blocks a merge the older one allowed
  (`replaces`): a dispatch of fewer classes never hides a failure another class found;
- **placeholders** carry no such tag: `queued: ...` (pending, claimed when a PR opens or a run
  starts), `not measured (...)` (error on a head only a maintainer's dispatch measures), the
  watchdog's `no runner ...` / `no bench run ...` (error). None of them replaces a verdict.
Only statuses the workflows' bot set count (`BOT_LOGIN`): anyone with write access can set a
status of that name, and GitHub's own rule pins the required check to the GitHub Actions app.

Deliberately not here: API calls (github_api.py) and choosing the state (verdict.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

STATUS_CONTEXT = "phasebench/gate"
BOT_LOGIN = "github-actions[bot]"  # who GITHUB_TOKEN acts as: the GitHub Actions app's bot
DEPENDABOT = "dependabot[bot]"
MAX_DESCRIPTION = 140  # GitHub cuts a status description here
CLAIM_PREFIX = "not measured"
PENDING_PREFIX = "queued:"
_TAG = re.compile(r" \[(?P<classes>[a-z0-9_-]+(?:\+[a-z0-9_-]+)*)?\]$")
_CLASS = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


def unmeasured_description(why: str) -> str:
    """The placeholder on a head nobody measured (`why`: whose head)."""
    return f"{CLAIM_PREFIX} ({why}): needs a maintainer's dispatch (review it, run bench: pr, sha)"


def pending_description(pool: str, classes: Sequence[str]) -> str:
    """The pending placeholder: which runners the benchmarks wait for."""
    what = ", ".join(classes) if classes else "no runner class is enabled"
    return f"{PENDING_PREFIX} waiting for a runner labelled {pool} ({what})"[:MAX_DESCRIPTION]


def tagged(line: str, classes: Sequence[str]) -> str:
    """A verdict's description: `line`, cut to fit, then the classes it judged."""
    names = sorted({c for c in classes if _CLASS.fullmatch(c)})
    tag = f" [{'+'.join(names)}]"
    return line[: MAX_DESCRIPTION - len(tag)].rstrip() + tag


def classes_of(status: Mapping[str, Any]) -> frozenset[str] | None:
    """The classes a verdict judged; None for a placeholder (or a status from before tags)."""
    match = _TAG.search(str(status.get("description") or ""))
    if match is None:
        return None
    return frozenset(filter(None, (match.group("classes") or "").split("+")))


def bot_statuses(statuses: Sequence[Any]) -> list[dict[str, Any]]:
    """The `phasebench/gate` statuses the workflows' bot set, newest first (as the API lists)."""
    return [
        status
        for status in statuses
        if isinstance(status, dict)
        and status.get("context") == STATUS_CONTEXT
        and isinstance(status.get("creator"), dict)
        and status["creator"].get("login") == BOT_LOGIN
    ]


def newest_verdict(statuses: Sequence[Any]) -> dict[str, Any] | None:
    """The newest of our statuses that is a verdict (placeholders above it skipped)."""
    return next((s for s in bot_statuses(statuses) if classes_of(s) is not None), None)


def is_claim(status: Mapping[str, Any]) -> bool:
    """Whether a status of ours is a placeholder rather than a judged verdict."""
    return classes_of(status) is None


def replaces(state: str, classes: Sequence[str], old: Mapping[str, Any] | None) -> tuple[bool, str]:
    """(whether a verdict `state` over `classes` may replace `old`, the reason when not)."""
    if old is None:
        return True, ""
    covered = classes_of(old) or frozenset()
    if covered <= set(classes):
        return True, ""
    if old.get("state") == "success" and state != "success":
        return True, ""  # a newly found failure or error is never hidden behind an older pass
    had = "+".join(sorted(covered))
    now = "+".join(sorted(classes)) or "no class"
    return False, (
        f"the standing {old.get('state')} judged {had} and this run only {now}: it stays "
        f"(dispatch with runner_class `all` to replace it)"
    )
