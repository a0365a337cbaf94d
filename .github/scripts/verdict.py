#!/usr/bin/env python3
"""The bench workflow's required verdict: one status from everything the run measured (stdlib).

Runs in the hosted `gate` job from the *base* commit's checkout, so a pull request cannot
loosen the rule that judges it; the shards' artifacts and the gate's JSON are data only.

Inputs, by mode:
- `ab` (pull requests, and a maintainer's dispatch for a PR): each shard's raw `data/base.json`
  and `data/head.json` (`nox -s ab`), judged again here by the judge checkout's `python -m
  reports.ab --settings own` (`--judge-dir`; rejudge.py: the judge's own settings, never the
  shard's `context.json`), whose `ab.json` is read for its top-level `status`; the runner's own
  `ab.json` only serves to note a disagreement;
- `history` (pushes to main, branch dispatches): `--gate-json`, the JSON of `python -m reports
  gate` run from the base checkout, read for its top-level `status`.
Both: each shard's `outcome.json` (history_store.py `stage`) and `NEEDS` (`toJSON(needs)`).

Rules:
- A status comes from the JSON, never from an exit code alone (judgement.py).
- Nothing measured (every shard skipped, no outcome at all) is `error`, never a pass: the
  required check cannot be turned green by skipping the benchmarks.
- A shard job that failed or was cancelled is `error` (its cells are unmeasured); a shard whose
  benchmark step failed or hit its timeout is named as partial.
- Suite status: error > fail > no-baseline > pass. `fail` passes the check only when the
  `perf-regression-accepted` label was added after the newest push by someone with write access
  who is not the PR's author (acceptance.py; read when this runs, so re-running the gate job
  after labelling re-evaluates without re-running the benchmarks); `error` never does.
- Which commit gets `phasebench/gate`, and when it is left as it is (commit_status.py): a
  PR's head, a push to main, a PR dispatch's reviewed `sha`; never a branch dispatch's tip. A
  status that cannot be set is an error of this step, except a read-only token's 403. A run
  that measured nothing on a fork's or Dependabot's head keeps a status our bot set there (a
  dispatch's verdict), else sets `error`: "needs a maintainer's dispatch". A failed PR lookup
  is a note, not a crash.
- Malformed input (an environment variable, a JSON of the wrong shape, a re-judge that timed
  out) is `error` with the reason; anything unforeseen still writes the summary and sets `error`
  (`last_resort`), so the required check never stays "Expected" without a word.

Outputs: the combined `summary.md` (within GitHub's 1 MiB per job), `pr.json` + `summary.md`
for the commenter (for a PR; on a dispatch the PR's head repository and branch come from the
API), and the `phasebench/gate` commit status.

Environment: `NEEDS`, `EVENT_NAME`, `PR_NUMBER`, `PR_AUTHOR`, `DISPATCH_SHA`, `HEAD_SHA`,
`HEAD_REPOSITORY`, `HEAD_BRANCH`, `RUN_ATTEMPT`, `RUN_URL`, `GITHUB_TOKEN`, `GITHUB_REPOSITORY`,
`GITHUB_API_URL`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import acceptance
from commit_status import (
    STATUS_CONTEXT,
    dispatch_only,
    publish,
    read_only_expected,
    set_commit_status,
    status_target,
    unmeasured_description,
)
from github_api import SHA, ApiError, GitHub, Transport, from_env
from judgement import STATUSES, Judgement, decide, status_from_json
from rejudge import REJUDGE_BUDGET_S, RejudgeError, rejudge_with, settings_notes
from shard_stage import latest_shards
from step_summary import fit, section

__all__ = [  # re-exported: callers and tests know them as verdict's
    "STATUSES",
    "decide",
    "read_only_expected",
    "rejudge_with",
    "set_commit_status",
    "status_from_json",
    "status_target",
]

ACCEPT_LABEL = acceptance.ACCEPT_LABEL


def _shards(shards: Path) -> list[tuple[Path, dict[str, Any]]]:
    return latest_shards(shards)  # after a re-run, the newest attempt of each shard


def judge(
    mode: str,
    shards: Path,
    needs: Mapping[str, Any],
    *,
    gate_json: Path | None = None,
    gate_exit: int | None = None,
    rejudge: Callable[[Path], Path] | None = None,
) -> tuple[Judgement, list[str], list[str]]:
    """(judgement, classes measured, per-shard summary sections).

    `rejudge(shard folder) -> folder with ab.json and summary.md` recomputes an A/B shard's
    verdicts from its two raw JSON files; without it the runner's own ab.json is read.
    """
    verdict = Judgement()
    for job, info in sorted(needs.items()):
        result = info.get("result") if isinstance(info, dict) else None
        if result in ("failure", "cancelled"):
            verdict.worsen("error", f"job `{job}` ended {result}: some cells were not measured")
    measured = [(f, m) for f, m in _shards(shards) if m.get("mode") in ("ab", "history")]
    if not measured:
        verdict.worsen("error", "nothing was measured: every benchmark shard was skipped")
        return verdict, [], []
    sections: list[str] = []
    for folder, meta in measured:
        name = f"{meta.get('class')} shard {meta.get('shard')}"
        if meta.get("mode") != mode:
            verdict.worsen("error", f"{name} ran in {meta.get('mode')} mode, expected {mode}")
        elif mode == "ab":
            section_path = _judge_ab_shard(verdict, name, folder, rejudge)
            if section_path is not None:
                sections.append(section(name, section_path))
        if meta.get("partial"):
            verdict.notes.append(
                f"{name}: the benchmark step ended `{meta.get('outcome')}` (failed or hit its "
                "timeout); its results are partial"
            )
    if mode == "history":
        if gate_json is None:
            verdict.worsen("error", "history mode needs --gate-json")
        else:
            status, reason = status_from_json(gate_json, gate_exit)
            verdict.worsen(status, f"history gate: {status}{f' ({reason})' if reason else ''}")
    classes = sorted({str(m.get("class")) for _, m in measured})
    return verdict, classes, sections


def _judge_ab_shard(
    verdict: Judgement, name: str, folder: Path, rejudge: Callable[[Path], Path] | None
) -> Path | None:
    """Judge one A/B shard into `verdict`; the summary.md to show, or None."""
    try:
        judged = folder / "data" if rejudge is None else rejudge(folder)
    except RejudgeError as exc:
        verdict.worsen("error", f"{name}: A/B error ({exc})")
        return None
    status, reason = status_from_json(judged / "ab.json")
    verdict.worsen(status, f"{name}: A/B {status}{f' ({reason})' if reason else ''}")
    if rejudge is not None:
        runner_status, _ = status_from_json(folder / "data" / "ab.json")
        if runner_status != status:
            verdict.notes.append(
                f"{name}: the runner's ab.json said {runner_status}; the base's "
                f"reports.ab, re-run here on its raw JSON, says {status}"
            )
        differ = settings_notes(judged / "ab.json")
        if differ:
            verdict.notes.append(
                f"{name}: its context.json recorded other judge settings, shown and not used "
                f"(the judge's are the base's): {'; '.join(differ)}"
            )
    return judged / "summary.md"


def _pull_head(pull: Any) -> dict[str, str]:
    head: dict[str, Any] = pull["head"] if isinstance(pull.get("head"), dict) else {}
    repo: dict[str, Any] = head["repo"] if isinstance(head.get("repo"), dict) else {}
    return {
        "sha": str(head.get("sha", "")),
        "repository": str(repo.get("full_name", "")),
        "branch": str(head.get("ref", "")),
    }


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


def _whole(value: Any, name: str, problems: list[str]) -> int | None:
    """An integer input (`str` from the environment, `int` from argparse), or None if absent."""
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    problems.append(f"{name} {str(value)[:40]!r} is not a whole number")
    return None


def _inputs(
    args: argparse.Namespace, env: Mapping[str, str]
) -> tuple[dict[str, Any], int, int, int | None, list[str]]:
    """(NEEDS, PR number, run attempt, gate exit, problems): malformed inputs as problems."""
    problems: list[str] = []
    try:
        needs = json.loads(env.get("NEEDS") or "{}")
    except json.JSONDecodeError as exc:
        needs = None
        problems.append(f"NEEDS is not JSON ({exc})")
    if not isinstance(needs, dict):
        needs = {}
        problems.append("NEEDS is not an object: which shard jobs failed is unknown")
    number = _whole(env.get("PR_NUMBER"), "PR_NUMBER", problems) or 0
    attempt = _whole(env.get("RUN_ATTEMPT"), "RUN_ATTEMPT", problems) or 1
    gate_exit = _whole(args.gate_exit, "--gate-exit", problems)
    return needs, number, attempt, gate_exit, problems


def run(
    args: argparse.Namespace, env: Mapping[str, str], transport: Transport | None = None
) -> int:
    """Judge, set the status, write the outputs; returns the step's exit status."""
    needs, number, attempt, gate_exit, problems = _inputs(args, env)
    budget = getattr(args, "rejudge_budget_s", None) or REJUDGE_BUDGET_S
    verdict, classes, sections = judge(
        args.mode,
        args.shards,
        needs,
        gate_json=args.gate_json,
        gate_exit=gate_exit,
        rejudge=None
        if args.judge_dir is None
        else rejudge_with(args.judge_dir, args.rejudged, budget_s=budget),
    )
    for problem in problems:
        verdict.worsen("error", f"{problem}: the workflow passed a malformed input")
    api: GitHub | None = None
    try:
        api = from_env(env, transport)
    except ApiError as exc:
        verdict.worsen("error", f"no GitHub API: {exc}")
    target = status_target(env, verdict)
    dispatched = env.get("EVENT_NAME") == "workflow_dispatch"
    wanted = api is not None and number > 0 and (dispatched or verdict.status == "fail")
    pull = _lookup_pull(api, number, verdict) if api is not None and wanted else None
    accepted = False
    if api is not None and verdict.status == "fail" and pull is not None and target is not None:
        given = acceptance.check(api, pull, target)
        accepted = given.accepted
        verdict.notes.append(given.reason)
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
    status_ok = True
    if target is not None:
        if api is None:
            status_ok, log = False, f"::error::{STATUS_CONTEXT} not set: no GitHub API"
        else:
            status_ok, log = publish(api, target, state, line, env, unmeasured=unmeasured)
        print(log)
        verdict.notes.append(_plain(log))
    summary = _summary(args, verdict, line, sections)
    if number > 0 and SHA.fullmatch(sha) and (pull is not None or not dispatched):
        args.comment_dir.mkdir(parents=True, exist_ok=True)
        meta = {
            "schema": 3,
            "pr_number": number,
            "head_sha": sha,
            "head_repository": head["repository"],
            "head_branch": head["branch"],
            "run_attempt": attempt,
            "classes": classes,
        }
        (args.comment_dir / "pr.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
        (args.comment_dir / "summary.md").write_text(summary, encoding="utf-8")
    level = "notice" if passes else "error"
    print(f"::{level}::gate {verdict.status}: {line}")
    for note in verdict.notes:
        print(f"  {note}")
    return 0 if passes and status_ok else 1


def _plain(log: str) -> str:
    """A log line without its workflow command (`::warning::`), for the summary."""
    return re.sub(r"^::[a-z]+::", "", log)


def _summary(
    args: argparse.Namespace, verdict: Judgement, line: str, sections: Sequence[str]
) -> str:
    """Write `OUT/summary.md` (the notes, then each part cut to fit) and return it."""
    top = [f"### phasebench gate: {verdict.status.upper()}: {line}", ""]
    top += [f"- {note}" for note in verdict.notes]
    parts = list(sections)
    if args.mode == "history" and args.summary is not None and args.summary.is_file():
        parts.insert(0, args.summary.read_text(encoding="utf-8", errors="replace"))
    summary = fit("\n".join(top) + "\n", parts)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text(summary, encoding="utf-8")
    return summary


def last_resort(
    args: argparse.Namespace,
    env: Mapping[str, str],
    exc: BaseException,
    transport: Transport | None = None,
) -> int:
    """After an unforeseen exception: still the `error` status and a summary; returns 1.

    Without them the required check would stay "Expected" with no word why, and a re-run
    would repeat it. Each part is tried on its own; nothing here raises.
    """
    reason = f"verdict.py stopped on {type(exc).__name__}: {str(exc)[:300]}"
    print(f"::error::{reason}", file=sys.stderr)
    verdict = Judgement("error", [reason, "re-run the gate job; the log shows where it stopped"])
    try:
        target = status_target(env, verdict)
        if target is not None:
            api = from_env(env, transport)
            # A fork's or Dependabot's pull_request run never measures (bench.yml's fork guard).
            pull_request = env.get("EVENT_NAME") == "pull_request"
            unmeasured = dispatch_only(env, None) if pull_request else ""
            line = "could not judge: verdict.py stopped; see the gate job's log"
            _, log = publish(api, target, "error", line, env, unmeasured=unmeasured)
            print(log)
            verdict.notes.append(_plain(log))
    except Exception as again:
        print(f"::error::{STATUS_CONTEXT} could not be set either: {again!r}", file=sys.stderr)
    try:
        _summary(args, verdict, headline("error", accepted=False), [])
    except Exception as again:
        print(f"::error::the summary could not be written either: {again!r}", file=sys.stderr)
    return 1


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    transport: Transport | None = None,
) -> int:
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("ab", "history"), required=True)
    parser.add_argument("--shards", type=Path, required=True, help="the merged bench-* artifacts")
    parser.add_argument("--gate-json", type=Path, help="history mode: the gate's --json file")
    # A string, checked in `run`: a malformed value is an `error` verdict, not an argparse exit.
    parser.add_argument("--gate-exit", help="history mode: the gate step's exit status")
    parser.add_argument("--summary", type=Path, help="history mode: the report's summary.md")
    parser.add_argument("--judge-dir", type=Path, help="A/B mode: re-judge with this checkout")
    parser.add_argument("--rejudged", type=Path, default=Path("out/rejudged"))
    parser.add_argument(
        "--rejudge-budget-s",
        type=float,
        default=REJUDGE_BUDGET_S,
        help="all re-judges together (rejudge.py); under the gate job's timeout-minutes",
    )
    parser.add_argument("--out", type=Path, required=True, help="write summary.md here")
    parser.add_argument("--comment-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    environ = os.environ if env is None else env
    try:
        return run(args, environ, transport)
    except Exception as exc:
        return last_resort(args, environ, exc, transport)


if __name__ == "__main__":
    sys.exit(main())
