"""Setting `phasebench/gate`, and when a run must leave it as it is (stdlib only).

- Only the read-only token's 403 is an expected failure: a fork's or Dependabot's pull_request
  run. Any other failure to set the status fails the gate job ("re-run this job").
- A verdict replaces the newest verdict of ours on the commit only when it judged at least the
  same runner classes, or when it blocks a merge the older one allowed (gate_status.py
  `replaces`): a newer dispatch of fewer classes never overwrites an older failure. When it
  may not, the status stays and the summary says why; statuses that cannot be read fail the
  step (replacing blindly could hide a failure).
- A head that only a maintainer's dispatch benchmarks (a fork's, or Dependabot's: bench.yml's
  fork guard skips the shards of their pull_request runs) can get a pull_request run with a
  write token: GitHub applies Dependabot's restrictions only to runs Dependabot initiated
  (`github.actor == 'dependabot[bot]'`, docs: "Troubleshooting Dependabot on GitHub Actions"),
  so a maintainer reopening the PR starts one. That run measured nothing; the dispatch did. A
  run that measured nothing on such a head therefore never replaces a `phasebench/gate` status
  the workflows' bot set on the commit (a verdict, or the placeholder below), and sets `error`
  with `unmeasured_description` only where there is none, so the required check says why
  instead of waiting as "Expected". bench-claim.yml and bench-comment.yml set the same
  placeholder on such heads.
- Which commit: a PR's head (A/B), a merge queue's merge commit, a push to main, and the 40-hex
  `sha` of a maintainer's dispatch for a PR (`status_target`). A branch dispatch sets none: it
  would replace a PR's A/B verdict on the same commit. An inconsistent dispatch is an error and
  sets none (a dispatch whose `sha` is not the PR's head never reaches the gate: announce.py).

Deliberately not here: the verdict (verdict.py), the status vocabulary (gate_status.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gate_status import (
    BOT_LOGIN,
    DEPENDABOT,
    STATUS_CONTEXT,
    bot_statuses,
    newest_verdict,
    replaces,
    tagged,
    unmeasured_description,
)
from github_api import SHA, ApiError, GitHub
from judgement import Judgement

__all__ = ["BOT_LOGIN", "STATUS_CONTEXT", "unmeasured_description"]  # callers know them here


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
    return next(iter(bot_statuses(api.statuses(sha))), None)  # every page, newest first


# (ok, level, message): `level` is "", "warning" or "error", the workflow command the caller
# prints the message with (workflow_log.py: descriptions read from the API are data).
Outcome = tuple[bool, str, str]


def set_commit_status(
    api: GitHub, sha: str, state: str, description: str, env: Mapping[str, str]
) -> Outcome:
    """Set `phasebench/gate` on `sha`. Only the read-only run's 403 is ok."""
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
            return (
                True,
                "warning",
                (
                    f"could not set {STATUS_CONTEXT} ({exc}): a fork's or Dependabot's "
                    "pull_request run holds a read-only token; a maintainer's dispatch sets it"
                ),
            )
        return (
            False,
            "error",
            (
                f"could not set {STATUS_CONTEXT}={state} on {sha[:12]} ({exc}), so the "
                "required check is missing: re-run this job (the benchmarks are not re-run)"
            ),
        )
    return True, "", f"set {STATUS_CONTEXT}={state} on {sha[:12]}"


def publish(
    api: GitHub,
    sha: str,
    state: str,
    line: str,
    env: Mapping[str, str],
    *,
    classes: Sequence[str] = (),
    unmeasured: str = "",
) -> Outcome:
    """Set the verdict `state` (`line`, tagged with the `classes` it judged) on `sha`, unless
    the verdict standing there covers more classes (`gate_status.replaces`). On a head only a
    dispatch measures, when this run measured nothing (`unmeasured`: whose head, see
    `dispatch_only`), a status our bot set stays as it is, and only where there is none is
    `error` set, saying so."""
    try:
        found = api.statuses(sha)
    except ApiError as exc:
        if unmeasured:
            # Unknown whether a dispatch's verdict is there: replacing it would be worse.
            return (
                True,
                "warning",
                (
                    f"{STATUS_CONTEXT} left as it is on {sha[:12]}: its statuses could not be "
                    f"read ({exc}); this run measured nothing on {unmeasured}"
                ),
            )
        return (
            False,
            "error",
            (
                f"{STATUS_CONTEXT} not set on {sha[:12]}: its statuses could not be read "
                f"({exc}), so whether a verdict of more runner classes stands there is "
                "unknown: re-run this job"
            ),
        )
    newest = next(iter(bot_statuses(found)), None)
    if unmeasured:
        return _placeholder(api, sha, newest, unmeasured, env)
    standing = newest_verdict(found)
    allowed, reason = replaces(state, classes, standing)
    if allowed:
        return set_commit_status(api, sha, state, tagged(line, classes), env)
    assert standing is not None  # replaces() refuses only a standing verdict
    if newest is not standing:  # a placeholder landed over it: the verdict goes back on top
        its = {**env, "RUN_URL": str(standing.get("target_url") or "")}
        ok, level, message = set_commit_status(
            api, sha, str(standing.get("state")), str(standing.get("description") or ""), its
        )
        if not ok:
            return ok, level, message
    return True, "warning", f"{STATUS_CONTEXT} left as it is on {sha[:12]}: {reason}"


def _placeholder(
    api: GitHub, sha: str, newest: Mapping[str, Any] | None, why: str, env: Mapping[str, str]
) -> Outcome:
    """`error` "not measured (why)" on `sha`, unless a status of ours stands there."""
    if newest is None:
        return set_commit_status(api, sha, "error", unmeasured_description(why), env)
    was = f"{newest.get('state')}: {str(newest.get('description') or '')[:80]!r}"
    return (
        True,
        "",
        (
            f"{STATUS_CONTEXT} left as it is on {sha[:12]} ({was}): this run measured "
            f"nothing on {why}, which only a maintainer's dispatch benchmarks"
        ),
    )
