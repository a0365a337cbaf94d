"""The verdict's post step: the only code of the gate job that holds the token (stdlib only).

Reads the judge step's `judged.json` (verdict.py), and then:
- `fail` passes the check only when the `perf-regression-accepted` label was added after the
  newest push by someone with write access who is not the PR's author (acceptance.py; read when
  this runs, so re-running the gate job after labelling re-evaluates without re-running the
  benchmarks); `error` never does. A merge queue's commit is accepted by its PR's label;
- which commit gets `phasebench/gate`, and when it is left as it is (commit_status.py): a PR's
  head, a merge queue's commit, a push to main, a PR dispatch's reviewed `sha`; never a branch
  dispatch's tip. A verdict carries the
  runner classes it judged and replaces only one that covered no more (gate_status.py). A run
  that measured nothing on a fork's or Dependabot's head keeps a status our bot set there,
  else sets `error`: "needs a maintainer's dispatch";
- every API call shares the job's deadline (`PHASEBENCH_DEADLINE`, github_api.py): past it,
  the step says on one `::error::` line what it could not post and fails, well before the job's
  timeout would cancel it with nothing said;
- outputs: the combined `summary.md` (within GitHub's 1 MiB per job), and `pr.json` +
  `summary.md` for the commenter (a PR or a PR dispatch; the latter's head repository and
  branch come from the API).

Deliberately not here: judging (verdict.py), the status vocabulary (gate_status.py).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import acceptance
from commit_status import dispatch_only, publish, status_target
from gate_status import STATUS_CONTEXT, unmeasured_description
from github_api import SHA, ApiError, GitHub, Transport, from_env
from judgement import STATUSES, Judgement, decide
from step_summary import fit
from workflow_log import emit, emit_command, plain

JUDGED_SCHEMA = 1
ACCEPT_LABEL = acceptance.ACCEPT_LABEL
# A merge queue's branch: `gh-readonly-queue/<base>/pr-<number>-<head sha>`.
_QUEUE_REF = re.compile(r"(?:refs/heads/)?gh-readonly-queue/.+/pr-(\d{1,9})-[0-9a-f]{40}")


def headline(status: str, accepted: bool) -> str:
    """One line for the summary, the log and the commit status (at most 140 characters)."""
    if status == "fail" and accepted:
        return f"regression accepted by the {ACCEPT_LABEL} label"
    return {
        "pass": "no regression beyond noise",
        "no-baseline": "no baseline to compare with yet: nothing judged",
        "fail": f"regression found; if intended, a maintainer adds {ACCEPT_LABEL}, re-runs gate",
        "inconclusive": "inconclusive (busy or too noisy machine): re-run the benchmark jobs",
        "error": "could not judge: see the gate job's summary",
    }[status]


def whole(value: Any, name: str, problems: list[str]) -> int | None:
    """An integer input (`str` from the environment, `int` from argparse), or None if absent."""
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    problems.append(f"{name} {str(value)[:40]!r} is not a whole number")
    return None


def read_judged(path: Path) -> tuple[Judgement, list[str], list[str]]:
    """(judgement, classes, summary parts) from the judge step's file; `error` if unusable."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        why = f"the judge step wrote no readable {path.name} ({type(exc).__name__}): see its log"
        return Judgement("error", [why]), [], []
    fields = raw if isinstance(raw, dict) else {}
    status = fields.get("status")
    lists = [fields.get(key) for key in ("notes", "classes", "parts")]
    if fields.get("schema") != JUDGED_SCHEMA or status not in STATUSES:
        return Judgement("error", [f"{path.name} is not the judge step's (schema 1)"]), [], []
    notes, classes, parts = ([str(x) for x in v] if isinstance(v, list) else [] for v in lists)
    return Judgement(str(status), notes), classes, parts


def _pull_head(pull: Any) -> dict[str, str]:
    head: dict[str, Any] = pull["head"] if isinstance(pull.get("head"), dict) else {}
    repo: dict[str, Any] = head["repo"] if isinstance(head.get("repo"), dict) else {}
    return {
        "sha": str(head.get("sha", "")),
        "repository": str(repo.get("full_name", "")),
        "branch": str(head.get("ref", "")),
    }


def _lookup_pull(api: GitHub, number: int, verdict: Judgement) -> Any:
    try:
        pull = api.pull(number)
    except ApiError as exc:
        verdict.notes.append(f"PR #{number} could not be read ({exc}): label and comment skipped")
        return None
    if not isinstance(pull, dict):
        verdict.notes.append(f"PR #{number}: the API answered no object: label and comment skipped")
        return None
    return pull


def post(
    judged: Path,
    out: Path,
    comment_dir: Path,
    env: Mapping[str, str],
    transport: Transport | None = None,
) -> int:
    """Check the label, set the status, write the outputs; returns the step's exit status."""
    verdict, classes, parts = read_judged(judged)
    problems: list[str] = []
    number = whole(env.get("PR_NUMBER"), "PR_NUMBER", problems) or 0
    attempt = whole(env.get("RUN_ATTEMPT"), "RUN_ATTEMPT", problems) or 1
    for problem in problems:
        verdict.worsen("error", f"{problem}: the workflow passed a malformed input")
    api: GitHub | None = None
    try:
        api = from_env(env, transport)
    except ApiError as exc:
        verdict.worsen("error", f"no GitHub API: {exc}")
    target = status_target(env, verdict)
    event = env.get("EVENT_NAME", "")
    dispatched, queued = event == "workflow_dispatch", event == "merge_group"
    if queued:  # the queue's commit is accepted by its PR's label
        found = _QUEUE_REF.fullmatch(env.get("HEAD_BRANCH", ""))
        number = int(found.group(1)) if found else 0
    wanted = api is not None and number > 0 and (dispatched or verdict.status == "fail")
    pull = _lookup_pull(api, number, verdict) if api is not None and wanted else None
    accepted = _accepted(api, pull, target, queued, verdict)
    sha = target or ("" if dispatched else env.get("HEAD_SHA", ""))
    head = {"repository": env.get("HEAD_REPOSITORY", ""), "branch": env.get("HEAD_BRANCH", "")}
    if dispatched and pull is not None:
        head = _pull_head(pull)
        if head["sha"] != sha:
            verdict.notes.append(
                f"PR #{number} has moved on to {head['sha'][:12]}: this run judged the reviewed "
                f"commit {sha[:12]} only (its status; the PR gets no comment)"
            )
    passes = decide(verdict.status, accepted)
    # Nothing measured on a head only a dispatch measures: say so, and keep a dispatch's verdict.
    unmeasured = "" if classes else dispatch_only(env, pull)
    line = unmeasured_description(unmeasured) if unmeasured else headline(verdict.status, accepted)
    state = "success" if passes else ("error" if verdict.status == "error" else "failure")
    unposted = (
        []
        if not (dispatched and wanted and pull is None)
        else [f"the comment on PR #{number} (the PR could not be read)"]
    )
    status_ok = True
    if target is not None:
        status_ok = _set(
            api,
            target,
            state=state,
            line=line,
            env=env,
            classes=classes,
            unmeasured=unmeasured,
            verdict=verdict,
            unposted=unposted,
        )
    summary = _summary(out, verdict, line, parts)
    if number > 0 and not queued and SHA.fullmatch(sha) and (pull is not None or not dispatched):
        comment_dir.mkdir(parents=True, exist_ok=True)
        meta = {
            "schema": 3,
            "pr_number": number,
            "head_sha": sha,
            "head_repository": head["repository"],
            "head_branch": head["branch"],
            "run_attempt": attempt,
            "classes": classes,
        }
        (comment_dir / "pr.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
        (comment_dir / "summary.md").write_text(summary, encoding="utf-8")
    emit_command("notice" if passes else "error", f"gate {verdict.status}: {line}")
    for note in verdict.notes:
        emit(f"  {note}")
    if unposted:
        emit_command("error", f"not posted: {'; '.join(unposted)}: re-run the gate job")
    return 0 if passes and status_ok else 1


def _accepted(
    api: GitHub | None, pull: Any, target: str | None, queued: bool, verdict: Judgement
) -> bool:
    """Whether the label accepts a `fail` (acceptance.py); the reason goes to the notes."""
    if api is None or verdict.status != "fail" or pull is None or target is None:
        return False
    given = acceptance.check(api, pull, _pull_head(pull)["sha"] if queued else target)
    verdict.notes.append(given.reason)
    return given.accepted


def _set(
    api: GitHub | None,
    target: str,
    *,
    state: str,
    line: str,
    env: Mapping[str, str],
    classes: Sequence[str],
    unmeasured: str,
    verdict: Judgement,
    unposted: list[str],
) -> bool:
    """Publish the status (commit_status.py); what could not be posted goes to `unposted`."""
    if api is None:
        ok, level, message = False, "error", f"{STATUS_CONTEXT} not set: no GitHub API"
    else:
        ok, level, message = publish(
            api, target, state, line, env, classes=classes, unmeasured=unmeasured
        )
    if not ok:
        unposted.append(f"{STATUS_CONTEXT}={state} on {target[:12]} ({line})")
    _log(level, message)
    verdict.notes.append(plain(message))
    return ok


def _log(level: str, message: str) -> None:
    if level:
        emit_command(level, message)
    else:
        emit(message)


def _summary(out: Path, verdict: Judgement, line: str, parts: Sequence[str]) -> str:
    """Write `OUT/summary.md` (the notes, then each part cut to fit) and return it."""
    top = [f"### phasebench gate: {verdict.status.upper()}: {line}", ""]
    top += [f"- {note}" for note in verdict.notes]
    summary = fit("\n".join(top) + "\n", parts)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(summary, encoding="utf-8")
    return summary


def last_resort(
    out: Path,
    env: Mapping[str, str],
    exc: BaseException,
    transport: Transport | None = None,
) -> int:
    """After an unforeseen exception: still the `error` status and a summary; returns 1.

    Without them the required check would stay "Expected" with no word why, and a re-run
    would repeat it. Each part is tried on its own; nothing here raises.
    """
    reason = f"verdict.py stopped on {type(exc).__name__}: {str(exc)[:300]}"
    emit_command("error", reason, sys.stderr)
    verdict = Judgement("error", [reason, "re-run the gate job; the log shows where it stopped"])
    try:
        target = status_target(env, verdict)
        if target is not None:
            api = from_env(env, transport)
            # A fork's or Dependabot's pull_request run never measures (bench.yml's fork guard).
            pull_request = env.get("EVENT_NAME") == "pull_request"
            unmeasured = dispatch_only(env, None) if pull_request else ""
            line = "could not judge: verdict.py stopped; see the gate job's log"
            _, level, message = publish(api, target, "error", line, env, unmeasured=unmeasured)
            _log(level, message)
            verdict.notes.append(plain(message))
    except Exception as again:
        emit_command("error", f"{STATUS_CONTEXT} could not be set either: {again!r}", sys.stderr)
    try:
        _summary(out, verdict, headline("error", accepted=False), [])
    except Exception as again:
        emit_command("error", f"the summary could not be written either: {again!r}", sys.stderr)
    return 1
