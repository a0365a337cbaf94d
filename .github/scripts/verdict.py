#!/usr/bin/env python3
"""Turn the gate's exit status into the check's verdict, and write the PR-comment artifact.

`nox -s gate` exits 0 (no regression), 1 (a regression beyond noise) or 2 (bad input, no
current run). This step decides whether the check fails:
- 0: pass;
- 1: fail, unless the pull request carries the `perf-regression-accepted` label *now* (read
  from the API when this step runs, not from the event, so a maintainer who adds the label
  and re-runs the failed job turns the check green without re-running the benchmarks);
- anything else: fail (a gate that could not judge never passes silently).

On a pull request it also writes `pr.json` and `summary.md` into `--comment-dir` for the
`bench-comment` workflow (see pr_comment.py for the format).

Environment: `EVENT_NAME`, `PR_NUMBER`, `HEAD_SHA` (pull requests), `GITHUB_TOKEN`,
`GITHUB_REPOSITORY`, `GITHUB_API_URL`.

Deliberately not here: any statistics (the reports package judges), and posting anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pr_comment import CommentError, GitHub, Transport, urllib_transport

ACCEPT_LABEL = "perf-regression-accepted"
GATES = {0: "pass", 1: "fail"}


def pr_labels(api: GitHub, number: int) -> set[str]:
    """The PR's current label names."""
    pull = api.pull(number)
    labels = pull.get("labels") if isinstance(pull, dict) else None
    if not isinstance(labels, list):
        raise CommentError(f"the API's answer for PR #{number} has no labels list")
    return {str(label.get("name")) for label in labels if isinstance(label, dict)}


def decide(gate_exit: int, accepted: bool) -> tuple[str, bool]:
    """(gate word, check passes) for a gate exit status and the accept label's presence."""
    gate = GATES.get(gate_exit, "error")
    return gate, gate == "pass" or (gate == "fail" and accepted)


def run(
    args: argparse.Namespace, env: Mapping[str, str], transport: Transport | None = None
) -> int:
    """Write the artifact (on a PR), print the verdict; returns the step's exit status."""
    is_pr = env.get("EVENT_NAME") == "pull_request"
    accepted = False
    if is_pr and args.gate_exit == 1:
        api = GitHub(
            env.get("GITHUB_API_URL", "https://api.github.com"),
            env.get("GITHUB_REPOSITORY", ""),
            env.get("GITHUB_TOKEN", ""),
            transport or urllib_transport,
        )
        accepted = ACCEPT_LABEL in pr_labels(api, int(env.get("PR_NUMBER", "0")))
    gate, passes = decide(args.gate_exit, accepted)
    classes = sorted(
        p.name for p in (args.classes_from.iterdir() if args.classes_from.is_dir() else [])
    )
    if is_pr:
        args.comment_dir.mkdir(parents=True, exist_ok=True)
        meta = {
            "schema": 1,
            "pr_number": int(env.get("PR_NUMBER", "0")),
            "head_sha": env.get("HEAD_SHA", ""),
            "gate": gate,
            "accepted": accepted,
            "classes": classes,
        }
        (args.comment_dir / "pr.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
        summary = args.comment_dir / "summary.md"
        if args.summary.is_file():
            shutil.copyfile(args.summary, summary)
        else:
            summary.write_text(
                "_The report step wrote no summary; see the run's log._\n", encoding="utf-8"
            )
    if gate == "pass":
        print("gate: no regression beyond noise")
    elif passes:
        print(f"::notice::gate: regression found, accepted by the {ACCEPT_LABEL} label")
    elif gate == "fail":
        print(
            f"::error::gate: regression found. If it is intended, a maintainer adds the "
            f"{ACCEPT_LABEL} label and re-runs this job."
        )
    else:
        print(f"::error::gate could not judge (exit {args.gate_exit}); see the gate step's log")
    return 0 if passes else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gate-exit", type=int, required=True)
    parser.add_argument("--classes-from", type=Path, required=True)
    parser.add_argument("--summary", type=Path, required=True)
    parser.add_argument("--comment-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        return run(args, os.environ)
    except (CommentError, ValueError) as exc:
        print(f"::error::verdict: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
