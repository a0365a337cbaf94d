#!/usr/bin/env python3
"""A bench run's first job: say on the required status what it waits for, and what it measures.

Runs in bench.yml's hosted `announce` job from the trusted checkout the gate also judges with
(the base commit's scripts; the default branch's for a dispatch), before any self-hosted job can
start, as `python -I -S` (this folder and the standard library only). Writes `measure=true|false`
and `refused=<why>` to `$GITHUB_OUTPUT`; the shard jobs run only on `measure == 'true'`, the
gate only unless `measure == 'false'`.

By event:
- `pull_request`, a branch of this repository that is not Dependabot's: cancels this PR's older
  runs still queued or running (a newer push supersedes them; no concurrency group does it any
  more, because a fork's workflow file can name any group and cancel the runs in it), and sets
  `phasebench/gate=pending` ("queued: waiting for a runner labelled POOL (classes)") unless a
  verdict of ours stands. A fork's or Dependabot's run does nothing: its token is read-only and
  bench-claim.yml has claimed the head;
- `push`: pending on the pushed commit;
- `workflow_dispatch` with `pr` and `sha`: refused unless it runs the default branch's workflow
  file, the PR is open and its head is still `sha` (whatever a runner checks out must be the
  commit a maintainer reviewed, on the PR they named); else pending on `sha`. A branch dispatch
  sets no status;
- `merge_group`: the queue's merge commit. When its tree is the PR head's tree (the base did not
  move: the commit is exactly the code that was judged) and that head carries a passing verdict
  of ours, the verdict is passed through to the queue's commit, saying so, and nothing is
  measured; otherwise the commit is measured (A/B against the queue's base) like a PR head.
An API failure never stops a run from measuring (measure=true, with a warning), except a
dispatch that could not be verified, which is refused.

Environment: `EVENT_NAME`, `HEAD_SHA`, `HEAD_REPOSITORY`, `HEAD_BRANCH`, `PR_NUMBER`,
`PR_AUTHOR`, `DISPATCH_PR`, `DISPATCH_SHA`, `DISPATCH_REF`, `DEFAULT_BRANCH`, `POOL`, `MPS`,
`CUDA` (`true` when that class runs), `RUN_ID`, `RUN_NUMBER`, `RUN_URL`, `GITHUB_WORKFLOW_REF`,
`GITHUB_OUTPUT`, and the API's (github_api.from_env).

Deliberately not here: judging (verdict.py) and the watchdog of queued jobs (watchdog.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python -I` (how the workflow runs this) leaves the script's own folder off sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import os
import re
from collections.abc import Mapping
from urllib.parse import quote

from commit_status import dispatch_only, set_commit_status
from gate_status import classes_of, newest_verdict, pending_description, tagged
from github_api import SHA, ApiError, GitHub, Transport, from_env
from workflow_log import emit, emit_command

QUEUE_REF = re.compile(r"(?:refs/heads/)?gh-readonly-queue/.+/pr-(\d{1,9})-[0-9a-f]{40}")
FINISHED = "completed"


def classes(env: Mapping[str, str]) -> list[str]:
    """The runner classes this run benchmarks (`MPS`, `CUDA`: the workflow's own conditions)."""
    return [name for name in ("cuda", "mps") if env.get(name.upper()) == "true"]


def pending(api: GitHub, sha: str, env: Mapping[str, str]) -> str:
    """`pending` on `sha` unless a verdict of ours stands there; returns a log line."""
    standing = newest_verdict(api.statuses(sha))
    if standing is not None:
        return f"{sha[:12]} keeps its {standing.get('state')} verdict until this run judges it"
    line = pending_description(env.get("POOL", ""), classes(env))
    ok, _, message = set_commit_status(api, sha, "pending", line, env)
    if not ok:
        raise ApiError(message)
    return f"{message}: {line}"


def cancel_superseded(api: GitHub, env: Mapping[str, str]) -> list[str]:
    """Cancel this PR's older bench runs of another head that are still queued or running."""
    number, own = int(env["PR_NUMBER"]), int(env.get("RUN_NUMBER") or 0)
    workflow = env.get("GITHUB_WORKFLOW_REF", "").split("@")[0].split("/", 2)[-1]
    branch = env.get("HEAD_BRANCH", "")
    lines = []
    for run in api.runs(f"event=pull_request&branch={quote(branch, safe='')}", max_pages=2):
        if not isinstance(run, dict) or run.get("status") == FINISHED:
            continue
        prs = {p.get("number") for p in run.get("pull_requests") or [] if isinstance(p, dict)}
        if (
            number in prs
            and str(run.get("path", "")).split("@")[0] == workflow
            and run.get("head_sha") != env.get("HEAD_SHA")
            and isinstance(run.get("run_number"), int)
            and run["run_number"] < own
        ):
            api.cancel(int(run["id"]))
            lines.append(f"cancelled run {run['id']} of {str(run.get('head_sha'))[:12]}")
    return lines


def check_dispatch(api: GitHub, env: Mapping[str, str]) -> str:
    """Why a dispatch for a PR must not run, or '' when its `sha` is the PR's head."""
    pr, sha = env.get("DISPATCH_PR", ""), env.get("DISPATCH_SHA", "")
    default = env.get("DEFAULT_BRANCH", "")
    if env.get("DISPATCH_REF") != f"refs/heads/{default}":
        return (
            f"dispatched on {env.get('DISPATCH_REF')}: a PR is benchmarked only by the workflow "
            f"file of {default}, the reviewed one; run it on {default}"
        )
    if not pr.isdigit() or SHA.fullmatch(sha) is None:
        return "`pr` must be a PR number and `sha` the full 40-hex commit you reviewed"
    pull = api.pull(int(pr))
    head = pull.get("head") if isinstance(pull, dict) else None
    now = head.get("sha") if isinstance(head, dict) else None
    if not isinstance(pull, dict) or pull.get("state") != "open":
        return f"PR #{pr} is not open"
    if now != sha:
        return (
            f"PR #{pr}'s head is now {str(now)[:12]}, not the {sha[:12]} you named: review the "
            "new head and dispatch again with its sha"
        )
    return ""


def pass_through(api: GitHub, env: Mapping[str, str]) -> str:
    """Give the queue's commit its PR's verdict when their trees are equal; '' if measured."""
    queue_sha = env.get("HEAD_SHA", "")
    found = QUEUE_REF.fullmatch(env.get("HEAD_BRANCH", ""))
    if found is None or SHA.fullmatch(queue_sha) is None:
        return ""
    number = int(found.group(1))
    pull = api.pull(number)
    head = pull.get("head") if isinstance(pull, dict) else None
    pr_sha = str(head.get("sha", "")) if isinstance(head, dict) else ""
    if SHA.fullmatch(pr_sha) is None or api.tree_of(queue_sha) != api.tree_of(pr_sha):
        emit(f"the base moved: the queue's commit is not PR #{number}'s tree; judging it")
        return ""
    verdict = newest_verdict(api.statuses(pr_sha))
    if verdict is None or verdict.get("state") != "success":
        emit(f"PR #{number}'s head {pr_sha[:12]} has no passing verdict of ours; judging it")
        return ""
    covered = sorted(classes_of(verdict) or ())
    line = tagged(f"PR #{number}'s verdict on {pr_sha[:12]}, same tree: base did not move", covered)
    ok, _, message = set_commit_status(api, queue_sha, "success", line, env)
    if not ok:
        raise ApiError(message)
    return f"{message}: {line}"


def announce(env: Mapping[str, str], transport: Transport | None = None) -> dict[str, str]:
    """Do what the module docstring says; returns the job's outputs."""
    event, sha = env.get("EVENT_NAME", ""), env.get("HEAD_SHA", "")
    if event == "pull_request" and dispatch_only(env, None):
        emit("a fork's or Dependabot's head: bench-claim.yml claimed it; nothing to announce")
        return {"measure": "true", "refused": ""}
    dispatched = event == "workflow_dispatch" and bool(env.get("DISPATCH_PR"))
    try:
        api = from_env(env, transport)
        if dispatched:
            refused = check_dispatch(api, env)
            if refused:
                return {"measure": "false", "refused": refused}
            sha = env.get("DISPATCH_SHA", "")
        if event == "merge_group":
            passed = pass_through(api, env)
            if passed:
                emit(passed)
                return {"measure": "false", "refused": ""}
        if event == "pull_request":
            for line in cancel_superseded(api, env):
                emit(line)
        if event in ("pull_request", "push", "merge_group") or dispatched:
            emit(pending(api, sha, env))
    except ApiError as exc:
        if dispatched:
            return {"measure": "false", "refused": f"the PR could not be checked ({exc})"}
        emit_command("warning", f"announce: {exc}; the benchmarks run all the same")
    return {"measure": "true", "refused": ""}


def main(env: Mapping[str, str] | None = None, transport: Transport | None = None) -> int:
    """Write the outputs; 0 whatever happened (the workflow's next step fails a refusal)."""
    environ = os.environ if env is None else env
    try:
        outputs = announce(environ, transport)
    except Exception as exc:  # a bug here must not stop the benchmarks, nor run unchecked code
        why = f"announce.py stopped on {type(exc).__name__}: {exc}"
        emit_command("error", why)
        unchecked = environ.get("EVENT_NAME") == "workflow_dispatch" and environ.get("DISPATCH_PR")
        outputs = {"measure": "false", "refused": why} if unchecked else {"measure": "true"}
        outputs.setdefault("refused", "")
    if outputs["refused"]:
        emit_command("error", f"not benchmarked: {outputs['refused']}")
    path = environ.get("GITHUB_OUTPUT", "")
    if path:
        with Path(path).open("a", encoding="utf-8") as handle:
            for key, value in outputs.items():
                handle.write(f"{key}={value.replace(chr(10), ' ')}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
