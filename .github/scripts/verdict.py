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
- Suite status: error > fail > no-baseline > pass. `fail` passes the check only when the
  `perf-regression-accepted` label was added after the newest push by someone with write access
  who is not the PR's author (acceptance.py; read when this runs, so re-running the gate job
  after labelling re-evaluates without re-running the benchmarks); `error` never does.
- Which commit gets `phasebench/gate`: a PR's head (A/B), a push to main, and the 40-hex `sha`
  of a maintainer's dispatch for a PR. A branch dispatch sets none: it would replace a PR's A/B
  verdict on the same commit. A dispatch whose inputs are inconsistent (`sha` without `pr`, or
  not 40 hex) is an error and sets none; it never falls back to the dispatched branch's tip.
- A status that cannot be set is an error of this step, except the expected 403 of a fork's or
  Dependabot's pull_request run (read-only token). A failed PR lookup is a note, not a crash.

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
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import acceptance
from github_api import SHA, ApiError, GitHub, Transport, urllib_transport
from shard_stage import latest_shards
from step_summary import fit, section

ACCEPT_LABEL = acceptance.ACCEPT_LABEL
STATUS_CONTEXT = "phasebench/gate"
# In rising severity: a shard that fails outweighs one that could not decide.
STATUSES = ("pass", "no-baseline", "inconclusive", "fail", "error")
_EXPECTED_EXIT = {
    "pass": {0},
    "no-baseline": {0},
    "inconclusive": {3},
    "fail": {1},
    "error": {1, 2},
}


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
            sections.append(section(name, judged / "summary.md"))
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
    """Whether the check passes: pass and no-baseline do; fail only when accepted; inconclusive
    (re-run it) and error never."""
    return status in ("pass", "no-baseline") or (status == "fail" and accepted)


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
    """A fork's or Dependabot's pull_request run: its token cannot set statuses."""
    fork = env.get("HEAD_REPOSITORY", "") != env.get("GITHUB_REPOSITORY", "")
    dependabot = env.get("PR_AUTHOR") == "dependabot[bot]"
    return env.get("EVENT_NAME") == "pull_request" and (fork or dependabot)


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


def _lookup_pull(api: GitHub, number: int, verdict: Judgement) -> Any:
    try:
        return api.pull(number)
    except ApiError as exc:
        verdict.notes.append(f"PR #{number} could not be read ({exc}): label and comment skipped")
        return None


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
    target = status_target(env, verdict)
    number = int(env.get("PR_NUMBER") or "0")
    dispatched = env.get("EVENT_NAME") == "workflow_dispatch"
    wanted = number > 0 and (dispatched or verdict.status == "fail")
    pull = _lookup_pull(api, number, verdict) if wanted else None
    accepted = False
    if verdict.status == "fail" and pull is not None and target is not None:
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
    line = headline(verdict.status, accepted)
    top = [f"### phasebench gate: {verdict.status.upper()}: {line}", ""]
    top += [f"- {note}" for note in verdict.notes]
    parts = list(sections)
    if args.mode == "history" and args.summary is not None and args.summary.is_file():
        parts.insert(0, args.summary.read_text(encoding="utf-8", errors="replace"))
    summary = fit("\n".join(top) + "\n", parts)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text(summary, encoding="utf-8")
    if number > 0 and SHA.fullmatch(sha) and (pull is not None or not dispatched):
        args.comment_dir.mkdir(parents=True, exist_ok=True)
        meta = {
            "schema": 3,
            "pr_number": number,
            "head_sha": sha,
            "head_repository": head["repository"],
            "head_branch": head["branch"],
            "run_attempt": int(env.get("RUN_ATTEMPT") or "1"),
            "classes": classes,
        }
        (args.comment_dir / "pr.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
        (args.comment_dir / "summary.md").write_text(summary, encoding="utf-8")
    state = "success" if passes else ("error" if verdict.status == "error" else "failure")
    status_ok = True
    if target is not None:
        status_ok, log = set_commit_status(api, target, state, line, env)
        print(log)
    level = "notice" if passes else "error"
    print(f"::{level}::gate {verdict.status}: {line}")
    for note in verdict.notes:
        print(f"  {note}")
    return 0 if passes and status_ok else 1


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
    except (ApiError, ValueError) as exc:
        print(f"::error::verdict: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
