"""Setting `phasebench/gate`, and when a run must leave it as it is (stdlib only).

- Only the read-only token's 403 is an expected failure: a fork's or Dependabot's pull_request
  run. Any other failure to set the status fails the gate job ("re-run this job").
- A head that only a maintainer's dispatch benchmarks (a fork's, or Dependabot's: bench.yml's
  fork guard skips the shards of their pull_request runs) can get a pull_request run with a
  write token: GitHub applies Dependabot's restrictions only to runs Dependabot initiated
  (`github.actor == 'dependabot[bot]'`, docs: "Troubleshooting Dependabot on GitHub Actions"),
  so a maintainer reopening the PR starts one. That run measured nothing; the dispatch did. A
  run that measured nothing on such a head therefore never replaces a `phasebench/gate` status
  the workflows' bot set on the commit (a verdict, or the placeholder below), and sets `error`
  with `unmeasured_description` only where there is none, so the required check says why
  instead of waiting as "Expected". bench-comment.yml sets the same placeholder on such heads
  (unmeasured_head.py: "not measured" marks it as no verdict).
- Which commit: a PR's head (A/B), a push to main, and the 40-hex `sha` of a maintainer's
  dispatch for a PR (`status_target`). A branch dispatch sets none: it would replace a PR's A/B
  verdict on the same commit. An inconsistent dispatch is an error and sets none.

Deliberately not here: the verdict (verdict.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from github_api import SHA, ApiError, GitHub
from judgement import Judgement

STATUS_CONTEXT = "phasebench/gate"
BOT_LOGIN = "github-actions[bot]"  # who GITHUB_TOKEN acts as: the statuses our workflows set
DEPENDABOT = "dependabot[bot]"


def unmeasured_description(why: str) -> str:
    """The placeholder status's description on a head nobody measured (`why`: whose head)."""
    return f"not measured ({why}): needs a maintainer's dispatch (review it, run bench: pr, sha)"


def status_target(env: Mapping[str, str], verdict: Judgement) -> str | None:
    """The commit that gets `phasebench/gate`, or None (with a note saying why)."""
    if env.get("EVENT_NAME") != "workflow_dispatch":
        sha = env.get("HEAD_SHA", "")
        return sha if SHA.fullmatch(sha) else None
    pr, sha = env.get("PR_NUMBER", ""), env.get("DISPATCH_SHA", "")
    if not pr and not sha:
        verdict.notes.append(
            f"a branch dispatch sets no {STATUS_CONTEXT}: that status is a PR head's A/B "
            "verdict or main's history verdict, and this run is neither"
        )
        return None
    if not pr:
        verdict.worsen("error", "the dispatch names `sha` without `pr`: give both, or neither")
        return None
    if SHA.fullmatch(sha) is None:
        verdict.worsen(
            "error", f"the dispatch's `sha` {sha[:60]!r} is not the full 40-hex commit you reviewed"
        )
        return None
    return sha


def read_only_expected(env: Mapping[str, str]) -> bool:
    """A fork's or Dependabot's pull_request run: its token is usually read-only."""
    return env.get("EVENT_NAME") == "pull_request" and bool(dispatch_only(env, None))


def dispatch_only(env: Mapping[str, str], pull: Any) -> str:
    """Whose head only a dispatch measures ("a fork's head", "Dependabot's head"), or "".

    A pull_request run reads its own payload (`HEAD_REPOSITORY`, `PR_AUTHOR`: the PR's author,
    not the run's actor); a dispatch reads the PR from the API (`pull`): its own head is the
    dispatched branch.
    """
    if env.get("EVENT_NAME") == "pull_request":
        repository, author = env.get("HEAD_REPOSITORY", ""), env.get("PR_AUTHOR", "")
    elif isinstance(pull, dict):
        head, user = _object(pull.get("head")), _object(pull.get("user"))
        repository = str(_object(head.get("repo")).get("full_name", ""))
        author = str(user.get("login", ""))
    else:
        return ""
    if repository != env.get("GITHUB_REPOSITORY", ""):
        return "a fork's head"
    return "Dependabot's head" if author == DEPENDABOT else ""


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def ours(api: GitHub, sha: str) -> dict[str, Any] | None:
    """The newest `phasebench/gate` status the workflows' bot set on `sha`, or None."""
    for status in api.statuses(sha):  # newest first
        if (
            isinstance(status, dict)
            and status.get("context") == STATUS_CONTEXT
            and _object(status.get("creator")).get("login") == BOT_LOGIN
        ):
            return status
    return None


def set_commit_status(
    api: GitHub, sha: str, state: str, description: str, env: Mapping[str, str]
) -> tuple[bool, str]:
    """(ok, log line): set `phasebench/gate` on `sha`. Only the read-only run's 403 is ok."""
    url = env.get("RUN_URL", "")
    body = {
        "state": state,
        "context": STATUS_CONTEXT,
        "description": description[:140],
        **({"target_url": url} if url.startswith("https://") else {}),
    }
    try:
        api.set_status(sha, body)
    except ApiError as exc:
        if exc.status == 403 and read_only_expected(env):
            return True, (
                f"::warning::could not set {STATUS_CONTEXT} ({exc}): a fork's or Dependabot's "
                "pull_request run holds a read-only token; a maintainer's dispatch sets it"
            )
        return False, (
            f"::error::could not set {STATUS_CONTEXT}={state} on {sha[:12]} ({exc}), so the "
            "required check is missing: re-run this job (the benchmarks are not re-run)"
        )
    return True, f"set {STATUS_CONTEXT}={state} on {sha[:12]}"


def publish(
    api: GitHub,
    sha: str,
    state: str,
    description: str,
    env: Mapping[str, str],
    *,
    unmeasured: str = "",
) -> tuple[bool, str]:
    """(ok, log line): `set_commit_status`, except on a head only a dispatch measures when this
    run measured nothing (`unmeasured`: whose head, see `dispatch_only`): then a status our bot
    set stays as it is, and only where there is none is `error` set, saying so."""
    if not unmeasured:
        return set_commit_status(api, sha, state, description, env)
    try:
        found = ours(api, sha)
    except ApiError as exc:
        # Unknown whether a dispatch's verdict is there: replacing it would be the worse error.
        return True, (
            f"::warning::{STATUS_CONTEXT} left as it is on {sha[:12]}: its statuses could not be "
            f"read ({exc}); this run measured nothing on {unmeasured}"
        )
    if found is not None:
        was = f"{found.get('state')}: {str(found.get('description') or '')[:80]!r}"
        return True, (
            f"{STATUS_CONTEXT} left as it is on {sha[:12]} ({was}): this run measured nothing "
            f"on {unmeasured}, which only a maintainer's dispatch benchmarks"
        )
    return set_commit_status(api, sha, "error", unmeasured_description(unmeasured), env)
