#!/usr/bin/env python3
"""Post or update phasebench's one sticky PR comment from a finished benchmark run (stdlib only).

Runs in the `workflow_run`-triggered commenter, which holds a token that can write PR comments.
Everything it reads from the benchmark run's `pr-comment` artifact was produced by the pull
request's own code, so it is treated as untrusted data: parsed, never executed; every field
validated; the markdown size-limited, stripped of control characters and of @-mentions; and the
PR number it names is only believed when that PR's head is the run's head on all three counts
(commit, repository, branch: a fork can push the same commit to a branch of its own, so the
commit alone does not bind), and, where GitHub lists the run's pull requests (it does not for
forks), when the number is among them.

Trust: the headline comes from the `phasebench/gate` status that GitHub holds for the head
commit (set by `github-actions[bot]`), never from the artifact. Before commenting, a fork's or
Dependabot's head gets that status as `error` unless one of ours stands (unmeasured_head.py).
The artifact's summary and runner classes are shown only for a run whose workflow file was
reviewed: a dispatch of the default branch, or a pull_request run from a branch of this
repository. A fork's run executes the fork's own workflow file: its PR gets the status line and
a fixed note, nothing of the artifact.

Artifact layout (written by verdict.py in the bench workflow's `gate` job, uploaded as
`pr-comment-<run attempt>`):
- `pr.json` (`PR_JSON_SCHEMA`): `{"schema": 3, "pr_number": 12, "head_sha": "<40 hex>",
  "head_repository": "owner/name", "head_branch": "topic", "run_attempt": 1, "classes":
  ["cuda"]}`
- `summary.md`: the gate's combined summary.

Environment: `GITHUB_TOKEN`, `GITHUB_REPOSITORY`, `GITHUB_API_URL`, `GITHUB_SERVER_URL`,
`DEFAULT_BRANCH`, and from `github.event.workflow_run`: `RUN_HEAD_SHA`, `RUN_HEAD_REPOSITORY`
(`head_repository.full_name`), `RUN_HEAD_BRANCH`, `RUN_ATTEMPT`, `RUN_EVENT`,
`RUN_PULL_REQUESTS` (JSON list), `RUN_URL`, `RUN_CONCLUSION`.

Exit status: 0 when the comment was written or there was rightly nothing to post (no artifact,
as on `requested`; a newer commit on the PR; an earlier attempt's artifact); 1 when the artifact
fails validation or the API refuses (after retries, github_api.py).

Deliberately not here: the check's verdict (the gate's) and anything of the artifact but
`pr.json` and `summary.md`.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python -I` (how the workflow runs this) leaves the script's own folder off sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse
import json
import os
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from github_api import SHA, ApiError, GitHub, Transport, from_env, urllib_transport
from unmeasured_head import BOT_LOGIN, STATUS_CONTEXT, bot_statuses, claim_from_env
from workflow_log import emit, emit_command

__all__ = ["ApiError", "GitHub", "Transport", "urllib_transport"]  # re-exported for callers

MARKER = "<!-- phasebench-sticky-report -->"
PR_JSON_SCHEMA = 3  # what verdict.py writes, and what docs/ci.md names (a test checks both)
MAX_JSON_BYTES = 16 * 1024
# GitHub refuses comment bodies over 65,536 characters; leave room for the header and footer.
MAX_SUMMARY_CHARS = 60_000
MAX_SUMMARY_BYTES = 4 * MAX_SUMMARY_CHARS  # read at most this much of the file
_SHA = SHA
_CLASS = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_REPO = re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}")
# "@user" or "@org/team" would notify people on behalf of the bot; a zero-width space after "@"
# keeps the text readable and the ping inert.
_MENTION = re.compile(r"@(?=[A-Za-z0-9])")
_STATES = {"success": "passed", "failure": "failed", "error": "could not judge"}


class CommentError(ApiError):
    """The artifact or the API answer is not what a genuine run produces; nothing is posted."""


@dataclass(frozen=True)
class Payload:
    """The validated contents of one `pr-comment` artifact."""

    pr_number: int
    head_sha: str
    head_repository: str
    head_branch: str
    run_attempt: int
    classes: tuple[str, ...]
    summary_md: str

    @classmethod
    def from_dir(cls, directory: Path) -> Payload:
        """Read and validate `pr.json` and `summary.md`; raise `CommentError` on anything odd."""
        meta_path, summary_path = directory / "pr.json", directory / "summary.md"
        for path in (meta_path, summary_path):
            if path.is_symlink() or not path.is_file():
                raise CommentError(f"{path.name} is missing or not a regular file")
        if meta_path.stat().st_size > MAX_JSON_BYTES:
            raise CommentError(f"pr.json is over {MAX_JSON_BYTES} bytes")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CommentError(f"pr.json is not JSON: {exc}") from exc
        if not isinstance(meta, dict) or meta.get("schema") != PR_JSON_SCHEMA:
            raise CommentError(f"pr.json: expected an object with schema {PR_JSON_SCHEMA}")
        number, sha, classes = meta.get("pr_number"), meta.get("head_sha"), meta.get("classes")
        if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 10**9:
            raise CommentError("pr.json: pr_number must be a positive integer")
        if not isinstance(sha, str) or _SHA.fullmatch(sha) is None:
            raise CommentError("pr.json: head_sha must be 40 lowercase hex digits")
        repo, branch, attempt = _run_fields(meta)
        if not isinstance(classes, list) or not all(
            isinstance(c, str) and _CLASS.fullmatch(c) for c in classes
        ):
            raise CommentError("pr.json: classes must be a list of runner class names")
        with summary_path.open("rb") as handle:
            raw = handle.read(MAX_SUMMARY_BYTES + 1)
        return cls(
            pr_number=number,
            head_sha=sha,
            head_repository=repo,
            head_branch=branch,
            run_attempt=attempt,
            classes=tuple(classes),
            summary_md=clean_markdown(raw.decode("utf-8", errors="replace")),
        )


def _run_fields(meta: dict[str, Any]) -> tuple[str, str, int]:
    """`head_repository`, `head_branch`, `run_attempt` of `pr.json`, validated."""
    repo, branch, attempt = (
        meta.get("head_repository"),
        meta.get("head_branch"),
        meta.get("run_attempt"),
    )
    if not isinstance(repo, str) or _REPO.fullmatch(repo) is None:
        raise CommentError("pr.json: head_repository must be owner/name")
    if not isinstance(branch, str) or not is_branch_name(branch):
        raise CommentError("pr.json: head_branch must be a branch name git accepts")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or not 0 < attempt < 10**4:
        raise CommentError("pr.json: run_attempt must be a positive integer")
    return repo, branch, attempt


def is_branch_name(name: str) -> bool:
    """git check-ref-format's rules for `refs/heads/<name>`, within 255 characters.

    `@ # ,` and non-ASCII letters are legal in branch names; control characters (which could
    forge log lines), spaces and `~ ^ : ? * [ \\` are not.
    """
    if not 0 < len(name) <= 255 or name == "@" or name.startswith(("/", "-")):
        return False
    if name.endswith(("/", ".")) or ".." in name or "@{" in name or "//" in name:
        return False
    if any(ord(ch) < 32 or ord(ch) == 127 or ch in " ~^:?*[\\" for ch in name):
        return False
    return not any(part.startswith(".") or part.endswith(".lock") for part in name.split("/"))


def clean_markdown(text: str) -> str:
    """Untrusted markdown made safe to post: no control characters, mentions or our marker,
    and at most `MAX_SUMMARY_CHARS` characters (cut at a line end, with a note)."""
    kept = "".join(
        ch for ch in text if ch in "\n\t" or unicodedata.category(ch) not in {"Cc", "Cf", "Cs"}
    )
    kept = kept.replace(MARKER, "").replace("<!--", "&lt;!--")
    kept = _MENTION.sub("@\u200b", kept)
    if len(kept) > MAX_SUMMARY_CHARS:
        cut = kept.rfind("\n", 0, MAX_SUMMARY_CHARS)
        kept = kept[: cut if cut > 0 else MAX_SUMMARY_CHARS]
        kept += "\n\n_(summary truncated; the full report is in the run's artifacts)_"
    return kept.strip()


@dataclass(frozen=True)
class RunHead:
    """What `github.event.workflow_run` says the run tested."""

    sha: str
    repository: str
    branch: str
    attempt: int
    event: str = "pull_request"
    default_branch: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RunHead:
        """From `RUN_HEAD_SHA`, `RUN_HEAD_REPOSITORY`, `RUN_HEAD_BRANCH`, `RUN_ATTEMPT`,
        `RUN_EVENT`, `DEFAULT_BRANCH`."""
        try:
            attempt = int(env.get("RUN_ATTEMPT") or "1")
        except ValueError as exc:
            raise CommentError(f"RUN_ATTEMPT is not a number: {exc}") from exc
        return cls(
            sha=env.get("RUN_HEAD_SHA", ""),
            repository=env.get("RUN_HEAD_REPOSITORY", ""),
            branch=env.get("RUN_HEAD_BRANCH", ""),
            attempt=attempt,
            event=env.get("RUN_EVENT", "pull_request"),
            default_branch=env.get("DEFAULT_BRANCH", ""),
        )


def check_target(
    payload: Payload, *, run: RunHead, run_pull_requests: Sequence[Any], pull: Any
) -> str | None:
    """None when the comment may go to `payload.pr_number`; else the benign reason it won't.

    `pull` is the API's answer for that PR. A forged or mismatched artifact raises
    `CommentError`: its head (commit, repository, branch) must be the run's (a dispatch's: the
    PR's), the PR's head must be the run's on all three, and where GitHub lists the run's pull
    requests its number must be one of them. A PR that is closed or has moved on, or another
    attempt's artifact, is not an error.
    """
    mine = (payload.head_sha, payload.head_repository, payload.head_branch)
    theirs = (run.sha, run.repository, run.branch)
    if run.event == "workflow_dispatch":
        # A dispatch runs the dispatched branch's workflow file: only the default branch's is
        # reviewed. Its own head is that branch, so the PR's head binds instead.
        if not run.default_branch or run.branch != run.default_branch:
            raise CommentError(
                f"a dispatch of {run.repository}:{run.branch} ran that branch's workflow file, "
                f"not {run.default_branch or 'the default branch'}'s: its artifact is not trusted"
            )
        theirs = mine
    elif run.event != "pull_request":
        raise CommentError(f"a {run.event!r} run does not comment on pull requests")
    if mine != theirs:
        raise CommentError(
            f"artifact names head {_head(*mine)} but the run tested {_head(*theirs)}"
        )
    numbers = {
        pr["number"]
        for pr in run_pull_requests
        if isinstance(pr, dict) and isinstance(pr.get("number"), int)
    }
    if numbers and payload.pr_number not in numbers:
        raise CommentError(f"PR #{payload.pr_number} is not among the run's PRs {sorted(numbers)}")
    if not isinstance(pull, dict) or pull.get("number") != payload.pr_number:
        raise CommentError(f"the API did not return PR #{payload.pr_number}")
    head: dict[str, Any] = pull["head"] if isinstance(pull.get("head"), dict) else {}
    repo: dict[str, Any] = head["repo"] if isinstance(head.get("repo"), dict) else {}
    pr_repo, pr_branch = repo.get("full_name"), head.get("ref")
    if (pr_repo, pr_branch) != theirs[1:]:
        raise CommentError(
            f"PR #{payload.pr_number} is {pr_repo}:{pr_branch}, not the run's "
            f"{theirs[1]}:{theirs[2]}"
        )
    if head.get("sha") != theirs[0]:
        moved = str(head.get("sha"))[:12]
        return f"PR #{payload.pr_number} has moved on to {moved}; a later run comments"
    if payload.run_attempt != run.attempt:
        return f"the artifact is from attempt {payload.run_attempt}, this is attempt {run.attempt}"
    if pull.get("state") != "open":
        return f"PR #{payload.pr_number} is {pull.get('state')}"
    return None


def _head(sha: str, repository: str, branch: str) -> str:
    return f"{repository}:{branch}@{sha[:12]}"


def gate_status(statuses: Sequence[Any]) -> tuple[str, str] | None:
    """(state, description) of the newest `phasebench/gate` status set by the workflows' bot."""
    found = bot_statuses(statuses)  # the API lists the newest first
    if not found:
        return None
    return str(found[0].get("state", "")), str(found[0].get("description") or "")


def render_comment(
    payload: Payload,
    *,
    run_url: str,
    conclusion: str,
    gate: tuple[str, str] | None,
    trusted: bool,
) -> str:
    """The sticky comment's body: marker, the gate's status line, the summary, a link."""
    if gate is None:
        line = f"`{STATUS_CONTEXT}` is not set on this commit"
    else:
        state, description = gate
        line = f"{_STATES.get(state, clean_markdown(state))}: {clean_markdown(description)}"
    lines = [MARKER, "### phasebench", f"**Gate:** {line} · **commit:** `{payload.head_sha[:12]}`"]
    if trusted:
        classes = ", ".join(payload.classes) or "none"
        lines[-1] += f" · **runners:** {classes} · **run:** {conclusion}"
        lines += ["", payload.summary_md or "_(the run wrote an empty summary)_", ""]
        lines.append(f"Full HTML report: the `report-a<N>` artifact of [this run]({run_url}).")
    else:
        lines += [
            "",
            "This pull request comes from a fork, whose own workflow file ran here, so its "
            "results are not shown. A maintainer benchmarks it by reviewing the change and "
            "starting the `bench` workflow with this PR's number and head commit (docs/ci.md).",
        ]
    return "\n".join(lines) + "\n"


def find_stickies(comments: Sequence[Any]) -> list[int]:
    """The ids of the bot's own comments carrying the marker, oldest first."""
    found = []
    for comment in comments:
        user = comment.get("user") if isinstance(comment, dict) else None
        if (
            isinstance(user, dict)
            and user.get("login") == BOT_LOGIN
            and MARKER in str(comment.get("body", ""))
            and isinstance(comment.get("id"), int)
        ):
            found.append(int(comment["id"]))
    return found


def find_sticky(comments: Sequence[Any]) -> int | None:
    """The id of the bot's own comment carrying the marker (the oldest, if several)."""
    return next(iter(find_stickies(comments)), None)


def post(artifact: Path, env: Mapping[str, str], transport: Transport | None = None) -> str:
    """Validate the artifact, check the target PR, then create or update the sticky comment.

    Returns what was done, for the log. Raises `CommentError` when nothing may be posted
    because the artifact or the API answer is wrong.
    """
    if not (artifact / "pr.json").exists():
        return "no pr-comment artifact in this run (benchmarks skipped): nothing to post"
    payload = Payload.from_dir(artifact)
    try:
        run_prs = json.loads(env.get("RUN_PULL_REQUESTS") or "[]")
    except json.JSONDecodeError as exc:
        raise CommentError(f"RUN_PULL_REQUESTS is not JSON: {exc}") from exc
    api = from_env(env, transport or urllib_transport)  # this module's: tests patch it
    run = RunHead.from_env(env)
    reason = check_target(
        payload,
        run=run,
        run_pull_requests=run_prs if isinstance(run_prs, list) else [],
        pull=api.pull(payload.pr_number),
    )
    if reason is not None:
        return f"not commenting: {reason}"
    trusted = run.event == "workflow_dispatch" or run.repository == api.repo
    body = render_comment(
        payload,
        run_url=env.get("RUN_URL", ""),
        conclusion=env.get("RUN_CONCLUSION", "unknown"),
        gate=gate_status(api.statuses(payload.head_sha)),
        trusted=trusted,
    )
    sticky = find_sticky(api.comments(payload.pr_number))
    if sticky is not None:
        api.update(sticky, body)
        return f"updated comment {sticky} on PR #{payload.pr_number}"
    api.create(payload.pr_number, body)
    # Commenters are not serialised (no concurrency group): two may create one. Keep the oldest.
    stickies = find_stickies(api.comments(payload.pr_number))
    for extra in stickies[1:]:
        api.delete(extra)
    if len(stickies) > 1:
        api.update(stickies[0], body)
    return f"created the phasebench comment on PR #{payload.pr_number}"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: `pr_comment.py --artifact DIR`; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, required=True)
    args = parser.parse_args(argv)
    code = 0
    try:  # first, so that the comment shows the status it sets
        emit(claim_from_env(os.environ, urllib_transport))
    except ApiError as exc:
        emit_command("error", f"{STATUS_CONTEXT} on an unmeasured head: {exc}", sys.stderr)
        code = 1
    try:
        emit(post(args.artifact, os.environ))
    except ApiError as exc:
        emit_command("error", f"pr comment: {exc}", sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
