#!/usr/bin/env python3
"""The bench workflow's required verdict: one status from everything the run measured (stdlib).

Runs in the hosted `gate` job from the *base* commit's checkout, so a pull request cannot
loosen the rule that judges it; the shards' artifacts and the gate's JSON are data only.

Inputs, by mode:
- `ab` (pull requests, and a maintainer's dispatch for a PR): each shard's raw `data/base.json`
  and `data/head.json` (`nox -s ab`), judged again here by the judge checkout's `python -m
  reports.ab` (`--judge-dir`), whose `ab.json` is read for its top-level `status`; the runner's
  own `ab.json` only serves to note a disagreement;
- `history` (pushes to main, branch dispatches): `--gate-json`, the JSON of `python -m reports
  gate` run from the base checkout, read for its top-level `status`.
Both: each shard's `outcome.json` (history_store.py `stage`) and `NEEDS` (`toJSON(needs)`).

Rules:
- A status comes from the JSON, never from an exit code alone: nox turns every failing exit
  status into 1, so "cannot judge" (2) would read as "regression". A missing or unknown JSON,
  or one whose status contradicts the exit code or its own verdicts, is `error`.
- Nothing measured (every shard skipped, no outcome at all) is `error`, never a pass: the
  required check cannot be turned green by skipping the benchmarks.
- A shard job that failed or was cancelled is `error` (its cells are unmeasured); a shard whose
  benchmark step failed or hit its timeout is named as partial.
- Suite status: error > fail > no-baseline > pass. `fail` passes the check only when the PR
  carries `perf-regression-accepted` *now* (read from the API when this runs, so re-running the
  gate job after labelling re-evaluates without re-running the benchmarks); `error` never does.

Outputs: the combined `summary.md`, `pr.json` + `summary.md` for the commenter (for a PR; on a
maintainer's dispatch the PR's head repository and branch come from the API), and
the `phasebench/gate` commit status on the head commit (needs `statuses: write`; a fork's or
Dependabot's pull_request run has a read-only token, so only a trusted run can set it).

Environment: `NEEDS`, `EVENT_NAME`, `PR_NUMBER`, `HEAD_SHA`, `HEAD_REPOSITORY`, `HEAD_BRANCH`,
`RUN_ATTEMPT`, `RUN_URL`, `GITHUB_TOKEN`, `GITHUB_REPOSITORY`, `GITHUB_API_URL`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pr_comment import CommentError, GitHub, Transport, urllib_transport
from shard_stage import read_outcome

ACCEPT_LABEL = "perf-regression-accepted"
STATUS_CONTEXT = "phasebench/gate"
STATUSES = ("pass", "no-baseline", "fail", "error")  # in rising severity
MAX_SUMMARY_BYTES = 200_000
_EXPECTED_EXIT = {"pass": {0}, "no-baseline": {0}, "fail": {1}, "error": {1, 2}}


@dataclass
class Judgement:
    """The suite's status, and the lines that explain it."""

    status: str = "pass"
    notes: list[str] = field(default_factory=list)

    def worsen(self, status: str, note: str) -> None:
        """Raise the status to `status` if that is worse; keep the note either way."""
        if STATUSES.index(status) > STATUSES.index(self.status):
            self.status = status
        self.notes.append(note)


def _load(path: Path) -> tuple[dict[str, Any] | None, str]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"{path.name} was not written (the step stopped early; see its log)"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{path.name} is not JSON: {exc}"
    if not isinstance(raw, dict) or raw.get("schema") != 1:
        return None, f"{path.name}: expected an object with schema 1"
    return raw, ""


def status_from_json(path: Path, exit_code: int | None = None) -> tuple[str, str]:
    """(status, reason) from a gate or A/B JSON file; `error` for anything untrustworthy."""
    raw, problem = _load(path)
    if raw is None:
        return "error", problem
    status = raw.get("status")
    benchmarks = raw.get("benchmarks", [])
    failing = [b for b in benchmarks if isinstance(b, dict) and b.get("verdict") == "fail"]
    if status not in STATUSES:
        problem = f"{path.name}: status {status!r} is not one of {list(STATUSES)}"
    elif exit_code is not None and exit_code not in _EXPECTED_EXIT[str(status)]:
        problem = f"{path.name} says {status} but the command exited {exit_code}"
    elif status in ("pass", "no-baseline") and failing:
        problem = f"{path.name} says {status} but lists {len(failing)} failing verdict(s)"
    if problem:
        return "error", problem
    return str(status), str(raw.get("status_reason", ""))


def _shards(shards: Path) -> list[tuple[Path, dict[str, Any]]]:
    folders = sorted(p for p in shards.iterdir() if p.is_dir()) if shards.is_dir() else []
    found = ((folder, read_outcome(folder)) for folder in folders)
    return [(folder, meta) for folder, meta in found if meta is not None]


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
            judged = folder / "data" if rejudge is None else rejudge(folder)
            status, reason = status_from_json(judged / "ab.json")
            verdict.worsen(status, f"{name}: A/B {status}{f' ({reason})' if reason else ''}")
            if rejudge is not None:
                runner_status, _ = status_from_json(folder / "data" / "ab.json")
                if runner_status != status:
                    verdict.notes.append(
                        f"{name}: the runner's ab.json said {runner_status}; the base's "
                        f"reports.ab, re-run here on its raw JSON, says {status}"
                    )
            sections.append(_section(name, judged / "summary.md"))
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


def _section(name: str, path: Path) -> str:
    try:
        with path.open("rb") as handle:
            text = handle.read(MAX_SUMMARY_BYTES).decode("utf-8", errors="replace")
    except OSError:
        text = "_(no summary.md)_"
    return f"#### {name}\n\n{text.strip()}\n"


def rejudge_with(judge_dir: Path, into: Path) -> Callable[[Path], Path]:
    """A `rejudge` that runs the judge checkout's `python -m reports.ab` on a shard's raw
    `base.json` and `head.json` (data only) into `into/<shard>/`."""

    def run_one(folder: Path) -> Path:
        data, out = (folder / "data").resolve(), (into / folder.name).resolve()
        shutil.rmtree(out, ignore_errors=True)  # never read a verdict this call did not write
        out.mkdir(parents=True)
        sides = [data / "base.json", data / "head.json"]
        if any(path.is_symlink() or not path.is_file() for path in sides):
            return out  # no ab.json there: "was not written", an error
        context = data / "context.json"
        if context.is_file() and not context.is_symlink():
            shutil.copyfile(context, out / "context.json")  # shown in the report, never run
        command = [sys.executable, "-m", "reports.ab", "--base", str(sides[0])]
        command += ["--head", str(sides[1]), "--out", str(out)]
        proc = subprocess.run(
            command, cwd=judge_dir, capture_output=True, text=True, timeout=900, check=False
        )
        (out / "rejudge.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
        return out

    return run_one


def decide(status: str, accepted: bool) -> bool:
    """Whether the check passes: pass and no-baseline do; fail only when accepted; error never."""
    return status in ("pass", "no-baseline") or (status == "fail" and accepted)


def labels_of(pull: Any, number: int) -> set[str]:
    """The label names of the API's answer for PR `number` (none when `pull` is None)."""
    if pull is None:
        return set()
    labels = pull.get("labels") if isinstance(pull, dict) else None
    if not isinstance(labels, list):
        raise CommentError(f"the API's answer for PR #{number} has no labels list")
    return {str(label.get("name")) for label in labels if isinstance(label, dict)}


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
        "fail": f"regression found; if intended, add {ACCEPT_LABEL} and re-run the gate job",
        "error": "could not judge: see the gate job's summary",
    }[status]


def set_commit_status(api: GitHub, sha: str, state: str, description: str, url: str) -> str:
    """Set `phasebench/gate` on `sha`; a refusal (read-only token) is reported, not raised."""
    body = {
        "state": state,
        "context": STATUS_CONTEXT,
        "description": description[:140],
        **({"target_url": url} if url.startswith("https://") else {}),
    }
    try:
        api.set_status(sha, body)
    except CommentError as exc:
        return (
            f"::warning::could not set {STATUS_CONTEXT} ({exc}): a fork's or Dependabot's "
            "pull_request run holds a read-only token; a maintainer's dispatch sets it"
        )
    return f"set {STATUS_CONTEXT}={state} on {sha[:12]}"


def run(
    args: argparse.Namespace, env: Mapping[str, str], transport: Transport | None = None
) -> int:
    """Judge, write the outputs, set the status; returns the step's exit status."""
    needs = json.loads(env.get("NEEDS") or "{}")
    verdict, classes, sections = judge(
        args.mode,
        args.shards,
        needs if isinstance(needs, dict) else {},
        gate_json=args.gate_json,
        gate_exit=args.gate_exit,
        rejudge=None if args.judge_dir is None else rejudge_with(args.judge_dir, args.rejudged),
    )
    api = GitHub(
        env.get("GITHUB_API_URL", "https://api.github.com"),
        env.get("GITHUB_REPOSITORY", ""),
        env.get("GITHUB_TOKEN", ""),
        transport or urllib_transport,
    )
    number = int(env.get("PR_NUMBER") or "0")
    dispatched = env.get("EVENT_NAME") == "workflow_dispatch"
    pull = api.pull(number) if number > 0 and (dispatched or verdict.status == "fail") else None
    accepted = verdict.status == "fail" and ACCEPT_LABEL in labels_of(pull, number)
    sha = env.get("HEAD_SHA", "")
    head = {"repository": env.get("HEAD_REPOSITORY", ""), "branch": env.get("HEAD_BRANCH", "")}
    if dispatched and pull is not None:
        head = _pull_head(pull)
        if head["sha"] != sha:
            verdict.notes.append(
                f"PR #{number} has moved on to {head['sha'][:12]}: this run judged the reviewed "
                f"commit {sha[:12]} only (its status; the PR gets no comment)"
            )
    passes = decide(verdict.status, accepted)
    line = headline(verdict.status, accepted)
    body = [f"### phasebench gate: {verdict.status.upper()}: {line}", ""]
    body += [f"- {note}" for note in verdict.notes] + [""]
    if args.mode == "history" and args.summary is not None and args.summary.is_file():
        body.append(args.summary.read_text(encoding="utf-8", errors="replace")[:MAX_SUMMARY_BYTES])
    body += sections
    summary = "\n".join(body).rstrip() + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text(summary, encoding="utf-8")
    if number > 0:
        args.comment_dir.mkdir(parents=True, exist_ok=True)
        meta = {
            "schema": 2,
            "pr_number": number,
            "head_sha": sha,
            "head_repository": head["repository"],
            "head_branch": head["branch"],
            "run_attempt": int(env.get("RUN_ATTEMPT") or "1"),
            "gate": verdict.status,
            "accepted": accepted,
            "classes": classes,
        }
        (args.comment_dir / "pr.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
        (args.comment_dir / "summary.md").write_text(summary, encoding="utf-8")
    state = "success" if passes else ("error" if verdict.status == "error" else "failure")
    if len(sha) == 40:
        print(set_commit_status(api, sha, state, line, env.get("RUN_URL", "")))
    level = "notice" if passes else "error"
    print(f"::{level}::gate {verdict.status}: {line}")
    for note in verdict.notes:
        print(f"  {note}")
    return 0 if passes else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("ab", "history"), required=True)
    parser.add_argument("--shards", type=Path, required=True, help="the merged bench-* artifacts")
    parser.add_argument("--gate-json", type=Path, help="history mode: the gate's --json file")
    parser.add_argument("--gate-exit", type=int, help="history mode: the gate step's exit status")
    parser.add_argument("--summary", type=Path, help="history mode: the report's summary.md")
    parser.add_argument("--judge-dir", type=Path, help="A/B mode: re-judge with this checkout")
    parser.add_argument("--rejudged", type=Path, default=Path("out/rejudged"))
    parser.add_argument("--out", type=Path, required=True, help="write summary.md here")
    parser.add_argument("--comment-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        return run(args, os.environ)
    except (CommentError, ValueError) as exc:
        print(f"::error::verdict: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
