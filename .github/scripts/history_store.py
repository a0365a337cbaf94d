#!/usr/bin/env python3
"""Keep benchmark history on the orphan `benchmark-history` branch (stdlib only).

The branch holds `history/<runner-class>/<name>.json`, one pytest-benchmark file per shard and
run, and nothing else. Files are only ever added, under names that cannot collide (run id,
attempt and shard in the name), so two writers never edit the same path and a rejected push is
resolved by fetching, rebasing and pushing again.

Subcommands (all paths are created as needed):
- `collect --shards DIR --into DIR`: take the artifacts a workflow downloaded
  (`DIR/history-<class>-<k>/**.json`), keep the files that parse as pytest-benchmark JSON and
  copy them to `INTO/<class>/<unique name>.json`.
- `fetch --remote URL --classes-from DIR --into DIR`: for each class that has a folder in
  `--classes-from` (the collected run), copy `history/<class>/*.json` of the branch into
  `INTO/<class>/`; a branch that does not exist yet is an empty history.
- `push --remote URL --from DIR --message TEXT`: add `DIR/<class>/*.json` to the branch
  (created as an orphan on first use), commit and push, retrying on non-fast-forward.

Credentials: when `GITHUB_TOKEN` is set, git reads it from the environment through a one-shot
credential helper, so it never appears in a command line, a URL or `.git/config`.

Deliberately not here: anything that runs benchmarks or renders reports, and deleting or
rewriting history (pruning is a maintainer's manual, reviewed change to the branch).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

BRANCH = "benchmark-history"
HISTORY = "history"
# A history file is a few MiB at most (per-round data of a large matrix); anything far larger is
# not one of ours and is refused rather than committed into the branch forever.
MAX_FILE_BYTES = 64 * 1024 * 1024
_CLASS = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_ARTIFACT = re.compile(r"history-(?P<cls>[a-z0-9][a-z0-9_-]{0,31})-(?P<shard>\d{1,4})")
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
# `!f` runs a shell function: it answers git's `get` with the token from the environment.
_CREDENTIAL_HELPER = (
    '!f() { test "$1" = get && echo username=x-access-token && '
    'echo "password=${GITHUB_TOKEN}"; }; f'
)


class StoreError(Exception):
    """A history operation failed for a reason the message states."""


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    auth: list[str] = []
    if os.environ.get("GITHUB_TOKEN"):
        auth = ["-c", "credential.helper=", "-c", f"credential.helper={_CREDENTIAL_HELPER}"]
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    proc = subprocess.run(
        ["git", *auth, "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if check and proc.returncode != 0:
        raise StoreError(f"git {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def is_history_file(path: Path) -> str | None:
    """None when `path` looks like a pytest-benchmark JSON file; else why it is refused."""
    if path.is_symlink() or not path.is_file():
        return "not a regular file"
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        return f"{size} bytes is over the {MAX_FILE_BYTES}-byte limit"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"not JSON: {exc}"
    if not isinstance(raw, dict) or not isinstance(raw.get("benchmarks"), list):
        return "not pytest-benchmark output (no 'benchmarks' list)"
    return None


def unique_name(original: Path, *, run_id: str, attempt: str, shard: str) -> str:
    """`<run id>.<attempt>-s<shard>-<original name>`: unique per run, attempt and shard."""
    stem = _SAFE.sub("_", original.name)
    return f"{_SAFE.sub('_', run_id)}.{_SAFE.sub('_', attempt)}-s{shard}-{stem}"


def collect(shards: Path, into: Path, *, run_id: str, attempt: str) -> list[str]:
    """Copy each valid JSON of each `history-<class>-<k>` artifact to `into/<class>/`."""
    classes: set[str] = set()
    for artifact in sorted(p for p in shards.iterdir() if p.is_dir()) if shards.is_dir() else []:
        match = _ARTIFACT.fullmatch(artifact.name)
        if match is None:
            print(f"::warning::skipping {artifact.name}: not a history-<class>-<k> artifact")
            continue
        cls, shard = match.group("cls"), match.group("shard")
        for path in sorted(artifact.rglob("*.json")):
            reason = is_history_file(path)
            if reason is not None:
                print(f"::warning::skipping {path.relative_to(shards)}: {reason}")
                continue
            target = into / cls / unique_name(path, run_id=run_id, attempt=attempt, shard=shard)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            classes.add(cls)
    return sorted(classes)


def _fetch_branch(repo: Path, remote: str, depth: int | None) -> bool:
    """Init `repo` with `remote`; fetch the branch. False when the branch does not exist."""
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").exists():
        _git(repo, "init", "-q")
        _git(repo, "remote", "add", "origin", remote)
    probe = _git(repo, "ls-remote", "--exit-code", "--heads", "origin", BRANCH, check=False)
    if probe.returncode == 2:  # git's answer for "no such ref": the store is not created yet
        return False
    if probe.returncode != 0:
        # An unreachable remote must not pass for an empty history: every benchmark would be
        # "new" and the gate would pass without a baseline.
        raise StoreError(f"cannot read {remote}: {probe.stderr.strip()}")
    args = ["fetch", "-q", "origin", f"+refs/heads/{BRANCH}:refs/remotes/origin/{BRANCH}"]
    if depth is not None:
        args.insert(2, f"--depth={depth}")
    _git(repo, *args)
    return True


def fetch(remote: str, classes: Sequence[str], into: Path) -> int:
    """Copy the branch's `history/<class>/*.json` into `into/<class>/`; returns files copied."""
    copied = 0
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "store"
        if not _fetch_branch(repo, remote, depth=1):
            print(f"::notice::no {BRANCH} branch yet: every benchmark is new")
            return 0
        _git(repo, "checkout", "-q", "--detach", f"origin/{BRANCH}")
        for cls in classes:
            source = repo / HISTORY / cls
            for path in sorted(source.glob("*.json")) if source.is_dir() else []:
                if is_history_file(path) is None:
                    (into / cls).mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, into / cls / path.name)
                    copied += 1
    print(f"fetched {copied} history file(s) for {', '.join(classes) or 'no class'}")
    return copied


def _stage(repo: Path, source: Path) -> int:
    """Copy `source/<class>/*.json` under `history/`; add-only. Returns files newly added."""
    added = 0
    for cls_dir in sorted(p for p in source.iterdir() if p.is_dir()):
        if _CLASS.fullmatch(cls_dir.name) is None:
            raise StoreError(f"{cls_dir}: a runner class is lowercase letters, digits, - or _")
        for path in sorted(cls_dir.glob("*.json")):
            target = repo / HISTORY / cls_dir.name / path.name
            if target.exists():
                if target.read_bytes() != path.read_bytes():
                    raise StoreError(f"{target.relative_to(repo)} exists with other content")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            added += 1
    return added


def push(remote: str, source: Path, message: str, *, attempts: int = 6) -> int:
    """Add `source/<class>/*.json` to the branch and push; returns the number of files added."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "store"
        exists = _fetch_branch(repo, remote, depth=None)
        _git(repo, "config", "user.name", "github-actions[bot]")
        _git(repo, "config", "user.email", "41898282+github-actions[bot]@users.noreply.github.com")
        if exists:
            _git(repo, "checkout", "-q", "-B", BRANCH, f"origin/{BRANCH}")
        else:
            _git(repo, "checkout", "-q", "--orphan", BRANCH)
        added = _stage(repo, source)
        if added == 0:
            print("nothing new to store")
            return 0
        _git(repo, "add", "--", HISTORY)
        _git(repo, "commit", "-q", "-m", message)
        for attempt in range(1, attempts + 1):
            result = _git(repo, "push", "-q", "origin", f"HEAD:refs/heads/{BRANCH}", check=False)
            if result.returncode == 0:
                print(f"stored {added} file(s) on {BRANCH}")
                return added
            print(f"push rejected (attempt {attempt}/{attempts}): {result.stderr.strip()}")
            if attempt == attempts:
                break
            # Another run pushed first. Our files are new paths, so a rebase never conflicts.
            time.sleep(random.uniform(1, 4) * attempt)
            _fetch_branch(repo, remote, depth=None)
            _git(repo, "rebase", "-q", f"origin/{BRANCH}")
    raise StoreError(f"could not push to {BRANCH} after {attempts} attempts")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; exit 0 on success, 1 when git or the store refuses."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_collect = sub.add_parser("collect", help="gather downloaded shard artifacts")
    p_collect.add_argument("--shards", type=Path, required=True)
    p_collect.add_argument("--into", type=Path, required=True)
    p_collect.add_argument("--run-id", default=os.environ.get("GITHUB_RUN_ID", "local"))
    p_collect.add_argument("--attempt", default=os.environ.get("GITHUB_RUN_ATTEMPT", "1"))
    p_fetch = sub.add_parser("fetch", help="copy the branch's history of some classes")
    p_fetch.add_argument("--remote", required=True)
    p_fetch.add_argument("--classes-from", type=Path, required=True, help="a collected run")
    p_fetch.add_argument("--into", type=Path, required=True)
    p_push = sub.add_parser("push", help="add files to the branch and push")
    p_push.add_argument("--remote", required=True)
    p_push.add_argument("--from", dest="source", type=Path, required=True)
    p_push.add_argument("--message", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "collect":
            classes = collect(args.shards, args.into, run_id=args.run_id, attempt=args.attempt)
            print(f"collected history of: {', '.join(classes) or 'nothing'}")
        elif args.command == "fetch":
            source = args.classes_from
            classes = sorted(
                p.name for p in (source.iterdir() if source.is_dir() else []) if p.is_dir()
            )
            bad = [c for c in classes if _CLASS.fullmatch(c) is None]
            if bad:
                raise StoreError(f"{source}: {bad} are not runner class names")
            fetch(args.remote, classes, args.into)
        else:
            push(args.remote, args.source, args.message)
    except StoreError as exc:
        print(f"::error::history store: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
