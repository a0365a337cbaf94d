"""Whether the `perf-regression-accepted` label accepts a failing gate (stdlib only).

A label alone proves little: anyone with triage access can add one, the PR's author among them,
and it stays on across pushes. The label accepts a regression only when the issue events show
that it was added (and not removed since)
- by someone with write access to the repository (`permission` admin or write; GitHub folds
  maintain into write and triage into read),
- who is not the PR's author (nobody accepts their own regression),
- after the newest push: later than the newest `pull_request` workflow run GitHub created for
  the judged commit (opened, synchronize, reopened). That time is GitHub's, not the commit's
  own date, which its author sets.
Anything that cannot be verified (an API error, no run for the commit) is "not accepted", with
the reason; the gate then fails as it would without the label.

Deliberately not here: the verdict itself (verdict.py), and changing labels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from github_api import ApiError, GitHub

ACCEPT_LABEL = "perf-regression-accepted"
WRITERS = frozenset({"admin", "write"})


@dataclass(frozen=True)
class Acceptance:
    """Whether the label accepts the regression, and the line that says who or why not."""

    accepted: bool
    reason: str


def _when(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _login(value: Any) -> str:
    return str(value.get("login", "")) if isinstance(value, dict) else ""


def newest_push(runs: Sequence[Any], sha: str) -> datetime | None:
    """When GitHub created the newest `pull_request` run for `sha` (None: no such run)."""
    times = [
        when
        for run in runs
        if isinstance(run, dict) and run.get("head_sha") == sha
        for when in [_when(run.get("created_at"))]
        if when is not None
    ]
    return max(times, default=None)


def decide(
    pull: Any,
    events: Sequence[Any],
    pushed: datetime | None,
    permission_of: Callable[[str], str],
) -> Acceptance:
    """The acceptance from the PR (`GET /pulls/N`), its issue events and the newest push."""
    labels = pull.get("labels") if isinstance(pull, dict) else None
    names = {str(x.get("name")) for x in labels or [] if isinstance(x, dict)}
    if ACCEPT_LABEL not in names:
        return Acceptance(False, f"the PR does not carry {ACCEPT_LABEL}")
    if pushed is None:
        why = "no pull_request run shows when the judged commit was pushed"
        return Acceptance(False, f"{ACCEPT_LABEL} ignored: {why}")
    author = _login(pull.get("user"))
    given: Acceptance | None = None
    refused = f"{ACCEPT_LABEL} ignored: no event shows who added it"
    ordered = sorted(
        (e for e in events if isinstance(e, dict)),
        key=lambda e: (str(e.get("created_at", "")), int(e.get("id") or 0)),
    )
    for event in ordered:
        label = event.get("label")
        if not isinstance(label, dict) or label.get("name") != ACCEPT_LABEL:
            continue
        if event.get("event") == "unlabeled":
            given = None
            continue
        if event.get("event") != "labeled":
            continue
        actor, when = _login(event.get("actor")), _when(event.get("created_at"))
        stamp = when.isoformat() if when else "an unknown time"
        if when is None or when <= pushed:
            refused = (
                f"{ACCEPT_LABEL} ignored: added by @{actor} at {stamp}, before the newest "
                f"push ({pushed.isoformat()}); remove it and add it again to accept this commit"
            )
        elif actor.lower() == author.lower():
            refused = f"{ACCEPT_LABEL} ignored: added by the PR's author @{actor}"
        elif (level := permission_of(actor)) not in WRITERS:
            refused = f"{ACCEPT_LABEL} ignored: @{actor} has {level} access, write is needed"
        else:
            after = f"after the newest push, {pushed.isoformat()}"
            given = Acceptance(True, f"regression accepted by @{actor} at {stamp} ({after})")
    return given or Acceptance(False, refused)


def check(api: GitHub, pull: Any, sha: str) -> Acceptance:
    """`decide` with the answers of the API; an API failure is "not accepted", with why."""
    number = pull.get("number") if isinstance(pull, dict) else None

    def permission_of(login: str) -> str:
        try:
            answer = api.permission(login)
        except ApiError as exc:
            return f"unknown ({exc})"
        return str(answer.get("permission", "none")) if isinstance(answer, dict) else "none"

    try:
        events = api.issue_events(int(number or 0))
        pushed = newest_push(api.runs_for(sha, "pull_request"), sha)
    except ApiError as exc:
        return Acceptance(False, f"{ACCEPT_LABEL} could not be verified: {exc}")
    return decide(pull, events, pushed, permission_of)
