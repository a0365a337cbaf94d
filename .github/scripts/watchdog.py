#!/usr/bin/env python3
"""The watchdog of queued benchmarks: a pending `phasebench/gate` never waits unexplained.

A self-hosted job waits for a runner with its labels; with none online it sits queued until
GitHub cancels it, 24 to 48 hours later ("Usage limits for self-hosted runners"), and until then
the PR shows only "queued". bench-watchdog.yml runs this every 30 minutes (default branch code,
`python -I -S`): for each head whose newest status of ours is `pending` (bench-claim.yml's or
announce.py's placeholder) and older than `WAIT_HOURS` (default 6), it finds the bench runs of
that commit and sets `error` with the reason:
- a job still queued: "no runner with labels self-hosted,Linux,X64,gpu,phasebench-ab took
  bench-cuda 1/1 in 6 h (GitHub cancels it at 24-48 h)";
- no run queued or running at all: "no bench run measures this commit (pending 6 h): ...".
A run that is measuring is left to its jobs' own timeouts. The error is a placeholder, not a
verdict (gate_status.py): when a runner does pick the job up, the gate's verdict replaces it.

Which heads: open PRs updated in the last `LOOKBACK_DAYS`, and the commits of bench runs that
are queued or in progress (a push to main, a merge queue's commit; a dispatch's commit is an
open PR's head). Every call shares the job's deadline (github_api.py).

Environment: `WAIT_HOURS`, `RUN_URL`, and the API's (github_api.from_env).
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python -I` (how the workflow runs this) leaves the script's own folder off sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from commit_status import set_commit_status
from gate_status import bot_statuses
from github_api import SHA, ApiError, GitHub, Transport, from_env
from workflow_log import emit, emit_command

WORKFLOW = ".github/workflows/bench.yml"
LOOKBACK_DAYS = 7
_RUN_URL = re.compile(r"/actions/runs/(\d+)")


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def active_runs(api: GitHub) -> list[dict[str, Any]]:
    """bench.yml's runs that are queued or in progress."""
    found: dict[int, dict[str, Any]] = {}
    for status in ("queued", "in_progress", "waiting"):
        for run in api.runs(f"status={status}", max_pages=3):
            if isinstance(run, dict) and str(run.get("path", "")).split("@")[0] == WORKFLOW:
                found[int(run["id"])] = run
    return list(found.values())


def candidates(api: GitHub, runs: Sequence[Mapping[str, Any]], now: float) -> list[str]:
    """Open PR heads updated lately, then the commits of active runs: each once."""
    shas: list[str] = []
    for pull in api.open_pulls():
        updated = _epoch(pull.get("updated_at")) if isinstance(pull, dict) else None
        if updated is None or now - updated > LOOKBACK_DAYS * 86400:
            break  # newest first: the rest are older
        head = pull.get("head")
        shas.append(str(head.get("sha", "")) if isinstance(head, dict) else "")
    shas += [str(run.get("head_sha", "")) for run in runs]
    return [sha for sha in dict.fromkeys(shas) if SHA.fullmatch(sha)]


def stuck_jobs(
    api: GitHub, runs: Sequence[Mapping[str, Any]], wait_s: float, now: float
) -> list[dict[str, Any]]:
    """The jobs of `runs` that have been queued for `wait_s` or longer."""
    stuck = []
    for run in runs:
        for job in api.jobs(int(run["id"])):
            created = _epoch(job.get("created_at")) if isinstance(job, dict) else None
            if job.get("status") == "queued" and created is not None and now - created >= wait_s:
                stuck.append(job)
    return stuck


def reason(stuck: Sequence[Mapping[str, Any]], hours: float, pending_s: float) -> str:
    """The error's description: the labels nobody serves, or that no run measures the commit."""
    if stuck:
        job = stuck[0]
        labels = ",".join(str(x) for x in job.get("labels") or []) or "(none)"
        more = f" and {len(stuck) - 1} more" if len(stuck) > 1 else ""
        return (
            f"no runner with labels {labels} took {job.get('name')}{more} in {hours:g} h "
            "(GitHub cancels it at 24-48 h)"
        )[:140]
    return (
        f"no bench run measures this commit (pending {pending_s / 3600:.0f} h): push again or "
        "re-run bench"
    )


def check(
    api: GitHub,
    sha: str,
    runs: Sequence[Mapping[str, Any]],
    *,
    wait_s: float,
    now: float,
    env: Mapping[str, str],
) -> str:
    """Mark `sha` when its pending status is stale; returns a log line ('' when nothing to say)."""
    ours = bot_statuses(api.statuses(sha))
    if not ours or ours[0].get("state") != "pending":
        return ""  # a verdict or an error stands, or the claim has not run yet
    since = _epoch(ours[0].get("created_at")) or now
    if now - since < wait_s:
        return ""
    linked = _RUN_URL.search(str(ours[0].get("target_url") or ""))
    mine = [r for r in runs if r.get("head_sha") == sha or (linked and str(r["id"]) == linked[1])]
    stuck = stuck_jobs(api, mine, wait_s, now)
    if mine and not stuck:
        return f"{sha[:12]}: its run is measuring"
    line = reason(stuck, wait_s / 3600, now - since)
    ok, _, message = set_commit_status(api, sha, "error", line, env)
    if not ok:
        raise ApiError(message)
    return f"{message}: {line}"


def sweep(
    env: Mapping[str, str],
    transport: Transport | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """One pass over the candidates; 1 when an API call failed (after the others ran)."""
    api = from_env(env, transport)
    hours = float(env.get("WAIT_HOURS") or 6)
    now = clock()
    runs = active_runs(api)
    failed = 0
    for sha in candidates(api, runs, now):
        try:
            line = check(api, sha, runs, wait_s=hours * 3600, now=now, env=env)
        except ApiError as exc:
            emit_command("warning", f"{sha[:12]}: {exc}")
            failed = 1
            if exc.deadline:
                break
            continue
        if line:
            emit(line)
    return failed


def main() -> int:
    """Command line: no arguments; see the module docstring."""
    try:
        return sweep(os.environ)
    except (ApiError, ValueError) as exc:
        emit_command("error", f"watchdog: {exc}", sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
