#!/usr/bin/env python3
"""Claim the required check `phasebench/gate` on a pull request head nobody measured (stdlib).

Why: a required check is matched by name against check runs *and* commit statuses. A fork's
pull_request run executes the fork's own workflow files, so once a maintainer approves it, a job
named `phasebench/gate` creates a successful check run of exactly that name, from the GitHub
Actions app: the very source the ruleset pins (docs/ci.md). bench.yml measures no fork or
Dependabot head (its self-hosted jobs skip them; a maintainer's dispatch measures them), and those
runs hold a read-only token, so without this nothing of ours would stand on such a head. When a
check run and a commit status share the required name, GitHub requires both to pass ("If a check
and a commit status have the same name, both must pass when that name is required",
https://docs.github.com/en/pull-requests/how-tos/merge-and-close-pull-requests/troubleshooting-required-status-checks),
so the `error` status set here keeps the required check red until a maintainer's dispatch sets
the measured verdict on that commit.

Runs in bench-comment.yml (`workflow_run`, the default branch's code, its own token) when a
`bench` run is requested, i.e. before a maintainer can approve a fork's jobs (GitHub sends
`requested` when it creates the run, also for one that awaits approval), and again when it
completes. It believes only GitHub's event fields (`head_repository`, `head_sha`, `event`,
`pull_requests`) and API answers, never the run's artifacts.

It never overwrites a verdict: a head that already carries a `phasebench/gate` status set by the
workflows' bot (a maintainer's dispatch may have measured that very commit) is left alone, and a
verdict (gate_status.py: a description tagged with its runner classes) that lands between our
read and our write is set again on top of ours. bench-claim.yml (`pull_request_target`) makes the
same claim when the PR opens, whether or not a `bench` run starts.

Environment: `GITHUB_TOKEN`, `GITHUB_REPOSITORY`, `GITHUB_API_URL`, `GITHUB_SERVER_URL`, and
from `github.event.workflow_run`: `RUN_EVENT`, `RUN_HEAD_SHA`, `RUN_HEAD_REPOSITORY`,
`RUN_PULL_REQUESTS` (JSON list).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gate_status import (
    BOT_LOGIN,
    DEPENDABOT,
    STATUS_CONTEXT,
    bot_statuses,
    is_claim,
    unmeasured_description,
)
from github_api import SHA, ApiError, GitHub, Transport, from_env

# Re-exported: pr_comment.py and the tests know them as this module's.
__all__ = ["BOT_LOGIN", "STATUS_CONTEXT", "bot_statuses", "is_claim", "unmeasured_description"]


def unmeasured_because(
    api: GitHub, sha: str, head_repository: str, run_pull_requests: Sequence[Any]
) -> str | None:
    """Why bench.yml's pull_request run of `sha` measures nothing, or None when it measures.

    The same rule as the shard jobs' fork guard: a head outside this repository, or a PR whose
    author is Dependabot (its author, not the run's actor: a maintainer may reopen it).
    """
    if head_repository != api.repo:
        return "a fork's head"
    for entry in run_pull_requests:  # listed for branches of this repository only
        number = entry.get("number") if isinstance(entry, dict) else None
        if not isinstance(number, int) or isinstance(number, bool):
            continue
        pull = api.pull(number)
        head = pull.get("head") if isinstance(pull, dict) else None
        user = pull.get("user") if isinstance(pull, dict) else None
        if (
            isinstance(head, dict)
            and head.get("sha") == sha
            and isinstance(user, dict)
            and user.get("login") == DEPENDABOT
        ):
            return "Dependabot's head"
    return None


def claim(
    api: GitHub,
    *,
    event: str,
    sha: str,
    head_repository: str,
    run_pull_requests: Sequence[Any],
    docs_url: str = "",
) -> str:
    """Set `phasebench/gate=error` on an unmeasured head without a bot status; returns a log line.

    Raises `ApiError` when the API refuses (the commenter's step then fails, visibly).
    """
    if event != "pull_request":
        # A dispatch measures the commit it names; a push to main is measured.
        return f"a {event or 'unknown'} run: its head is measured, nothing to claim"
    if SHA.fullmatch(sha) is None:
        raise ApiError(f"RUN_HEAD_SHA {sha[:60]!r} is not 40 lowercase hex")
    why = unmeasured_because(api, sha, head_repository, run_pull_requests)
    if why is None:
        return f"{sha[:12]} is measured by its own run: its gate sets {STATUS_CONTEXT}"
    if bot_statuses(api.statuses(sha)):
        return f"{sha[:12]} already carries a {STATUS_CONTEXT} of ours: left as it is"
    body = {
        "state": "error",
        "context": STATUS_CONTEXT,
        "description": unmeasured_description(why)[:140],
        **({"target_url": docs_url} if docs_url.startswith("https://") else {}),
    }
    created = api.set_status(sha, body)
    mine = created.get("id") if isinstance(created, dict) else None
    return f"set {STATUS_CONTEXT}=error on {sha[:12]} ({why})" + _restore_race(api, sha, mine)


def _restore_race(api: GitHub, sha: str, mine: Any) -> str:
    """Put back a verdict that a measured run set between our read and our write.

    The newest status of a context is the one that counts, so ours would hide it.
    """
    after = bot_statuses(api.statuses(sha))
    if mine is None or not after or after[0].get("id") != mine:
        return ""  # ours is not on top: whatever is newer already counts
    verdicts = [s for s in after[1:] if not is_claim(s)]
    if not verdicts:
        return ""
    verdict = verdicts[0]
    url = str(verdict.get("target_url") or "")
    api.set_status(
        sha,
        {
            "state": str(verdict.get("state", "")),
            "context": STATUS_CONTEXT,
            "description": str(verdict.get("description") or "")[:140],
            **({"target_url": url} if url.startswith("https://") else {}),
        },
    )
    return f"; a measured {verdict.get('state')} landed meanwhile and was set again on top"


def claim_from_env(env: Mapping[str, str], transport: Transport | None = None) -> str:
    """`claim` with the commenter's environment (see the module docstring)."""
    try:
        run_prs = json.loads(env.get("RUN_PULL_REQUESTS") or "[]")
    except json.JSONDecodeError as exc:
        raise ApiError(f"RUN_PULL_REQUESTS is not JSON: {exc}") from exc
    api = from_env(env, transport)
    server = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    # `HEAD` in a blob URL is the default branch: the docs that match the running code.
    docs = f"{server}/{api.repo}/blob/HEAD/docs/ci.md#fork-and-dependabot-pull-requests"
    return claim(
        api,
        event=env.get("RUN_EVENT", "pull_request"),
        sha=env.get("RUN_HEAD_SHA", ""),
        head_repository=env.get("RUN_HEAD_REPOSITORY", ""),
        run_pull_requests=run_prs if isinstance(run_prs, list) else [],
        docs_url=docs,
    )
