#!/usr/bin/env python3
"""The bench workflow's required verdict: one status from everything the run measured (stdlib).

Runs in the hosted `gate` job from the *base* commit's checkout, so a pull request cannot
loosen the rule that judges it; the shards' artifacts and the gate's JSON are data only.

Two steps, so that the token meets only code that needs it (bench.yml):
- `verdict.py judge ...` (no token; the hash-pinned venv's `python -I`, which the re-judges
  need) judges and writes `OUT/judged.json` (`JUDGED_SCHEMA`: status, notes, classes, the
  summary's parts);
- `verdict.py post --judged FILE ...` (the token; `python -I -S`: this folder and the standard
  library only) reads it, checks the acceptance label, sets `phasebench/gate`, writes the
  summary and the PR comment's artifact (verdict_post.py).
Without a subcommand both run in one process (`run`: tests and local use).

Inputs, by mode:
- `ab` (pull requests, merge queues, a maintainer's dispatch for a PR): each shard's raw
  `data/base.json` and `data/head.json` (`nox -s ab`), judged again here by the judge
  checkout's `reports.ab --settings own` (`--judge-dir`; rejudge.py: the judge's own settings,
  never the shard's `context.json`), whose `ab.json` is read for its top-level `status`; the
  runner's own `ab.json` only serves to note a disagreement;
- `history` (pushes to main, branch dispatches): `--gate-json`, the JSON of `python -m reports
  gate` run from the base checkout, read for its top-level `status`.
Both: each shard's `outcome.json` (history_store.py `stage`) and `NEEDS` (`toJSON(needs)`).

Rules:
- A status comes from the JSON, never from an exit code alone (judgement.py).
- Nothing measured (every shard skipped, no outcome at all) is `error`, never a pass: the
  required check cannot be turned green by skipping the benchmarks.
- A shard job that failed or was cancelled is `error` (its cells are unmeasured); a shard whose
  benchmark step failed or hit its timeout is named as partial.
- Suite status: error > fail > inconclusive > no-baseline > pass. Acceptance, the commit, the
  placeholders and the classes a verdict must cover: verdict_post.py, commit_status.py.
- Malformed input (an environment variable, a JSON of the wrong shape, a re-judge that timed
  out) is `error` with the reason; anything unforeseen still writes the summary and sets `error`
  (`last_resort`), so the required check never stays "Expected" without a word.
- Every line printed goes through workflow_log.py: class and shard names, and the notes of a
  re-judge, come from files a runner wrote after a PR's code ran there.

Environment: `NEEDS` (judge); `EVENT_NAME`, `PR_NUMBER`, `PR_AUTHOR`, `DISPATCH_SHA`,
`HEAD_SHA`, `HEAD_REPOSITORY`, `HEAD_BRANCH`, `RUN_ATTEMPT`, `RUN_URL`,
`GITHUB_TOKEN`, `GITHUB_REPOSITORY`, `GITHUB_API_URL`, `PHASEBENCH_DEADLINE` (post).
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python -I` (how the workflows run this) leaves the script's own folder off sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from commit_status import read_only_expected, set_commit_status, status_target
from gate_status import STATUS_CONTEXT, unmeasured_description
from github_api import Transport
from judgement import STATUSES, Judgement, decide, status_from_json
from rejudge import (
    REJUDGE_BUDGET_S,
    RejudgeError,
    budget_before,
    rejudge_with,
    settings_notes,
)
from shard_stage import FOLDER, latest_shards
from step_summary import MAX_SUMMARY_BYTES, cut_parts, section
from verdict_post import JUDGED_SCHEMA, headline, last_resort, post, whole
from workflow_log import emit, emit_command

__all__ = [  # re-exported: callers and tests know them as verdict's
    "STATUSES",
    "STATUS_CONTEXT",
    "decide",
    "headline",
    "read_only_expected",
    "rejudge_with",
    "set_commit_status",
    "status_from_json",
    "status_target",
    "unmeasured_description",
]
JUDGED = "judged.json"


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
    measured = [(f, m) for f, m in latest_shards(shards) if m.get("mode") in ("ab", "history")]
    if not measured:
        verdict.worsen("error", "nothing was measured: every benchmark shard was skipped")
        return verdict, [], []
    sections: list[str] = []
    for folder, meta in measured:
        # The class comes from the folder's name (checked by shard_stage.FOLDER); outcome.json's
        # `shard` is free text from the runner, shown short and never trusted (workflow_log.py).
        name = f"{_class_of(folder)} shard {str(meta.get('shard'))[:20]}"
        if meta.get("mode") != mode:
            verdict.worsen("error", f"{name} ran in {meta.get('mode')} mode, expected {mode}")
        elif mode == "ab":
            section_path = _judge_ab_shard(verdict, name, folder, rejudge)
            if section_path is not None:
                sections.append(section(name, section_path))
        if meta.get("partial"):
            verdict.notes.append(
                f"{name}: the benchmark step ended `{str(meta.get('outcome'))[:20]}` (failed or "
                "hit its timeout); its results are partial"
            )
    if mode == "history":
        if gate_json is None:
            verdict.worsen("error", "history mode needs --gate-json")
        else:
            status, reason = status_from_json(gate_json, gate_exit)
            verdict.worsen(status, f"history gate: {status}{f' ({reason})' if reason else ''}")
    classes = sorted({_class_of(folder) for folder, _ in measured})
    return verdict, classes, sections


def _class_of(folder: Path) -> str:
    """The runner class in `bench-<class>-<k>[-a<n>]`, which latest_shards has matched."""
    match = FOLDER.fullmatch(folder.name)
    return match.group("cls") if match else "unknown"


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


def judge_phase(args: argparse.Namespace, env: Mapping[str, str]) -> Path:
    """Judge and write `OUT/judged.json` (no API, no token); returns its path."""
    problems: list[str] = []
    try:
        needs = json.loads(env.get("NEEDS") or "{}")
    except json.JSONDecodeError as exc:
        needs = None
        problems.append(f"NEEDS is not JSON ({exc})")
    if not isinstance(needs, dict):
        needs = {}
        problems.append("NEEDS is not an object: which shard jobs failed is unknown")
    gate_exit = whole(args.gate_exit, "--gate-exit", problems)
    budget = getattr(args, "rejudge_budget_s", None) or REJUDGE_BUDGET_S
    # The post step keeps its share of the job's API deadline, whatever setup took.
    budget = budget_before(env.get("PHASEBENCH_DEADLINE", ""), budget, time.time())
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
    parts = list(sections)
    if args.mode == "history" and args.summary is not None and args.summary.is_file():
        parts.insert(0, args.summary.read_text(encoding="utf-8", errors="replace"))
    return write_judged(args.out, verdict, classes, parts, args.mode)


def write_judged(
    out: Path, verdict: Judgement, classes: Sequence[str], parts: Sequence[str], mode: str
) -> Path:
    """`OUT/judged.json`: what the post step reads (its parts already cut to the budget)."""
    record = {
        "schema": JUDGED_SCHEMA,
        "mode": mode,
        "status": verdict.status,
        "notes": verdict.notes,
        "classes": list(classes),
        "parts": cut_parts(parts, MAX_SUMMARY_BYTES),
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / JUDGED
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    emit(f"judged {verdict.status}; the post step sets the status")
    for note in verdict.notes:
        emit(f"  {note}")
    return path


def run(
    args: argparse.Namespace, env: Mapping[str, str], transport: Transport | None = None
) -> int:
    """Judge, then post (one process): the step's exit status."""
    judged = judge_phase(args, env)
    return post(judged, args.out, args.comment_dir, env, transport)


def _judge_crashed(args: argparse.Namespace, exc: BaseException) -> int:
    """The judge step's last resort: a judged.json that says `error` and why; returns 1."""
    reason = f"verdict.py stopped on {type(exc).__name__}: {str(exc)[:300]}"
    emit_command("error", reason, sys.stderr)
    notes = [reason, "re-run the gate job; the log shows where it stopped"]
    write_judged(args.out, Judgement("error", notes), [], [], args.mode)
    return 1


def _parser(subcommand: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], prog="verdict.py")
    if subcommand == "post":
        parser.add_argument("--judged", type=Path, required=True, help="the judge's judged.json")
    else:
        parser.add_argument("--mode", choices=("ab", "history"), required=True)
        parser.add_argument("--shards", type=Path, required=True, help="the bench-* artifacts")
        parser.add_argument("--gate-json", type=Path, help="history mode: the gate's --json")
        # A string, checked in `judge_phase`: a malformed value is an `error` verdict.
        parser.add_argument("--gate-exit", help="history mode: the gate step's exit status")
        parser.add_argument("--summary", type=Path, help="history mode: the report's summary")
        parser.add_argument("--judge-dir", type=Path, help="A/B mode: re-judge with this tree")
        parser.add_argument("--rejudged", type=Path, default=Path("out/rejudged"))
        parser.add_argument(
            "--rejudge-budget-s",
            type=float,
            default=REJUDGE_BUDGET_S,
            help="all re-judges together (rejudge.py); under the gate job's timeout-minutes",
        )
    parser.add_argument("--out", type=Path, required=True, help="write summary.md here")
    if subcommand != "judge":
        parser.add_argument("--comment-dir", type=Path, required=True)
    return parser


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    transport: Transport | None = None,
) -> int:
    """Command line: `judge ...`, `post ...`, or both at once; see the module docstring."""
    words = list(sys.argv[1:] if argv is None else argv)
    subcommand = words.pop(0) if words and words[0] in ("judge", "post") else ""
    args = _parser(subcommand).parse_args(words)
    environ = os.environ if env is None else env
    if subcommand == "judge":
        try:
            judge_phase(args, environ)
        except Exception as exc:
            return _judge_crashed(args, exc)
        return 0
    try:
        if subcommand == "post":
            return post(args.judged, args.out, args.comment_dir, environ, transport)
        return run(args, environ, transport)
    except Exception as exc:
        return last_resort(args.out, environ, exc, transport)


if __name__ == "__main__":
    sys.exit(main())
