#!/usr/bin/env python3
"""Keep benchmark history on the orphan `benchmark-history` branch (stdlib only).

The branch holds `history/<runner-class>/<name>.json`, one pytest-benchmark file per shard and
run, and nothing else. A stored name is `<UTC stamp>-r<run id>-s<shard>-<content hash>.json`:
files are only ever added, a name never collides, and a file whose content the branch already
holds (a re-run of the `store` job) is skipped. A rejected push is resolved by fetching the new
tip and committing again on top of it (add-only, so that never conflicts).

Artifact layout: shard_stage.py (`SHARDS/bench-<class>-<k>-a<attempt>/{outcome.json,data/}`,
the same for one downloaded artifact or many; the newest attempt of each shard counts).

Where: history_location.py, one resolution for the gate that reads and the store that writes
(`PHASEBENCH_HISTORY_REPOSITORY`, else this repository); `--remote` overrides it locally.

Subcommands:
- `stage --class C --index K --attempt A --shard I/N --ab-outcome O --bench-outcome O
  --ab-from DIR --bench-from DIR --into DIR`: package one shard's results in that layout (run
  on the shard's runner, `if: always()`).
- `collect --shards DIR --into DIR [--expect CLASS=JSON ...]`: copy the valid pytest-benchmark
  JSON of every history-mode shard to `INTO/<class>/<stored name>` (history_collect.py); a
  missing `--shards` is an error, not an empty run; with the matrix, a missing or partial leg
  is noted in `INTO/PARTIAL`.
- `fetch [--remote URL] --classes-from DIR --into DIR [--max-runs N] [--max-age-days D]
  [--exclude-run ID] [--exclude-commit SHA]`: copy the newest N runs (within D days) of each
  class of the collected run from the branch, never the judged run's or commit's own files.
  Only the tip's trees and the selected files are downloaded (a partial, shallow fetch),
  because the branch grows; a branch that does not exist yet is an empty history.
- `push [--remote URL] --from DIR --message TEXT`: add `DIR/<class>/*.json` to the branch (an
  orphan on first use) without checking it out, retrying on non-fast-forward; `DIR/PARTIAL`
  is appended to the commit message.

Credentials: when `GITHUB_TOKEN` is set, git reads it from the environment through a one-shot
credential helper, so it never appears in a command line, a URL or `.git/config`.

Deliberately not here: anything that runs benchmarks, renders reports or judges; and deleting
or rewriting stored history (history_prune.py, a maintainer's tool: docs/ci.md "Pruning").
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python -I` (how the workflows run this) leaves the script's own folder off sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone

from history_collect import StoreError, collect, partial_note
from history_location import LocationError, resolve
from shard_stage import LayoutError, expect, stage
from stored_files import (
    CLASS_NAME,
    LEGACY,
    STORED,
    commit_of,
    content_hash,
    is_history_file,
    run_key,
)
from workflow_log import emit, emit_command

__all__ = ["StoreError", "collect", "fetch", "push", "select_runs", "stage"]  # tests and tools

BRANCH = "benchmark-history"
HISTORY = "history"
_BOT = "github-actions[bot]"
_BOT_EMAIL = "41898282+github-actions[bot]@users.noreply.github.com"
_IDENTITY = {
    "GIT_AUTHOR_NAME": _BOT,
    "GIT_AUTHOR_EMAIL": _BOT_EMAIL,
    "GIT_COMMITTER_NAME": _BOT,
    "GIT_COMMITTER_EMAIL": _BOT_EMAIL,
}
# `!f` runs a shell function: it answers git's `get` with the token from the environment.
_CREDENTIAL_HELPER = (
    '!f() { test "$1" = get && echo username=x-access-token && '
    'echo "password=${GITHUB_TOKEN}"; }; f'
)


def _git(
    repo: Path, *args: str, check: bool = True, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    auth: list[str] = []
    if os.environ.get("GITHUB_TOKEN"):
        auth = ["-c", "credential.helper=", "-c", f"credential.helper={_CREDENTIAL_HELPER}"]
    proc = subprocess.run(
        ["git", *auth, "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})},
        check=False,
    )
    if check and proc.returncode != 0:
        raise StoreError(f"git {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _fetch_tip(repo: Path, remote: str) -> bool:
    """Init `repo`; fetch the branch tip's commit and trees only. False when it does not exist.

    Exit 2 of `ls-remote --exit-code` means "reachable, no such branch": an empty history. That
    is only true where the store writes, which is why `fetch` and `push` resolve the remote
    the same way (history_location.py) and `fetch` names it.
    """
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
    # `blob:none`: file contents come later, only for the files a command needs. A server that
    # does not support filters sends everything (slower, same result).
    _git(
        repo,
        "fetch",
        "-q",
        "--depth=1",
        "--filter=blob:none",
        "origin",
        f"+refs/heads/{BRANCH}:refs/remotes/origin/{BRANCH}",
    )
    return True


def _tree_names(repo: Path, cls: str) -> list[str]:
    out = _git(repo, "ls-tree", "--name-only", f"origin/{BRANCH}", f"{HISTORY}/{cls}/").stdout
    return [Path(line).name for line in out.splitlines() if line.endswith(".json")]


def select_runs(
    names: Sequence[str],
    *,
    max_runs: int,
    max_age_days: float,
    now: datetime,
    exclude_run: str | None = None,
) -> list[str]:
    """The stored names of the newest `max_runs` runs stored within `max_age_days`, leaving out
    the run `exclude_run` (the run being judged: see `fetch`).

    A run is a run id (its shards are several files). Names of the older scheme carry no date:
    they count as older than any dated run and are never dropped for age.
    """
    cutoff = now - timedelta(days=max_age_days)
    excluded = run_key(exclude_run) if exclude_run else None
    runs: dict[str, list[str]] = {}
    order: dict[str, str] = {}
    for name in names:
        match = STORED.fullmatch(name)
        if match is not None:
            stamp = datetime.strptime(match.group("stamp"), "%Y%m%dT%H%M%SZ")
            if stamp.replace(tzinfo=timezone.utc) < cutoff:
                continue
            key, when = match.group("run"), match.group("stamp")
        else:
            legacy = LEGACY.fullmatch(name)
            key, when = (legacy.group("run") if legacy else name), ""
        if key == excluded:
            continue
        runs.setdefault(key, []).append(name)
        order[key] = max(when, order.get(key, ""))
    newest = sorted(runs, key=lambda key: (order[key], key))[-max_runs:] if max_runs > 0 else []
    return sorted(name for key in newest for name in runs[key])


def fetch(
    remote: str,
    classes: Sequence[str],
    into: Path,
    *,
    max_runs: int = 30,
    max_age_days: float = 90.0,
    now: datetime | None = None,
    exclude_run: str | None = None,
    exclude_commit: str | None = None,
) -> int:
    """Copy the selected `history/<class>/*.json` of the branch into `into/<class>/`.

    The store runs whatever the gate's verdict, so after "Re-run failed jobs" (the gate only)
    the branch already holds this very run: `exclude_run` (its id, in the stored names) and
    `exclude_commit` (`commit_info.id` in the files: another run of the same commit) keep the
    judged commit from being compared with a copy of itself, which dilutes a regression.
    """
    copied = skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "store"
        if not _fetch_tip(repo, remote):
            emit_command(
                "warning",
                f"no {BRANCH} branch at {remote}: every benchmark is new. Expected "
                "only until the first push to main stores history there; if it persists, the "
                "store writes elsewhere (check PHASEBENCH_HISTORY_REPOSITORY)",
            )
            return 0
        for cls in classes:
            names = select_runs(
                _tree_names(repo, cls),
                max_runs=max_runs,
                max_age_days=max_age_days,
                now=now or datetime.now(timezone.utc),
                exclude_run=exclude_run,
            )
            if not names:
                continue
            paths = [f"{HISTORY}/{cls}/{name}" for name in names]
            # One checkout of just these paths: git fetches their blobs in one request.
            _git(repo, "checkout", f"origin/{BRANCH}", "--", *paths)
            for rel in paths:
                path = repo / rel
                if is_history_file(path) is not None:
                    continue
                if exclude_commit and commit_of(path) == exclude_commit:
                    skipped += 1
                    continue
                (into / cls).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, into / cls / path.name)
                copied += 1
    if skipped:
        print(f"left out {skipped} stored file(s) of the judged commit {exclude_commit}")
    print(f"fetched {copied} history file(s) for {', '.join(classes) or 'no class'}")
    return copied


def _held_hashes(repo: Path, parent: str | None, cls: str) -> set[str]:
    if parent is None:
        return set()
    out = _git(repo, "ls-tree", "--name-only", parent, f"{HISTORY}/{cls}/").stdout
    found = (STORED.fullmatch(Path(line).name) for line in out.splitlines())
    return {match.group("hash") for match in found if match is not None}


def _commit_on_tip(
    repo: Path, source: Path, message: str, parent: str | None
) -> tuple[str | None, int]:
    """(commit adding the new files of `source` on top of `parent`, files added); the commit
    is None when nothing is new.

    Built with plumbing in a private index, so the branch is never checked out (its blobs are
    never downloaded).
    """
    env = {"GIT_INDEX_FILE": str(repo / ".git" / "phasebench-index")}
    Path(env["GIT_INDEX_FILE"]).unlink(missing_ok=True)
    if parent is not None:
        _git(repo, "read-tree", parent, env=env)
    added = 0
    for cls_dir in sorted(p for p in source.iterdir() if p.is_dir()):
        if CLASS_NAME.fullmatch(cls_dir.name) is None:
            raise StoreError(f"{cls_dir}: a runner class is lowercase letters, digits, - or _")
        held = _held_hashes(repo, parent, cls_dir.name)
        for path in sorted(cls_dir.glob("*.json")):
            match = STORED.fullmatch(path.name)
            if match is None:
                raise StoreError(f"{path}: not a stored name (run `collect` to make one)")
            if match.group("hash") != content_hash(path.read_bytes()):
                raise StoreError(f"{path}: its content does not match the hash in its name")
            if match.group("hash") in held:
                emit(f"already stored: {cls_dir.name}/{path.name} (same content)")
                continue
            blob = _git(repo, "hash-object", "-w", "--", str(path)).stdout.strip()
            info = f"100644,{blob},{HISTORY}/{cls_dir.name}/{path.name}"
            _git(repo, "update-index", "--add", "--cacheinfo", info, env=env)
            held.add(match.group("hash"))
            added += 1
    if added == 0:
        return None, 0
    # `--missing-ok`: the index lists every stored file, whose blobs this `blob:none` clone
    # never fetched; without it git checks each one exists and fetches them one by one.
    tree = _git(repo, "write-tree", "--missing-ok", env=env).stdout.strip()
    args = ["commit-tree", tree, "-m", message, *(["-p", parent] if parent else [])]
    return _git(repo, *args, env=_IDENTITY).stdout.strip(), added


def push(remote: str, source: Path, message: str, *, attempts: int = 6) -> int:
    """Add the new files of `source/<class>/*.json` to the branch; returns the number added.
    A partial run (collect's `PARTIAL` note) says so in the commit message."""
    if not source.is_dir() or not any(p.is_dir() for p in source.iterdir()):
        raise StoreError(
            f"nothing to store: {source} holds no <class>/ folder (collect found none)"
        )
    message += partial_note(source)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "store"
        for attempt in range(1, attempts + 1):
            exists = _fetch_tip(repo, remote)
            parent = _git(repo, "rev-parse", f"origin/{BRANCH}").stdout.strip() if exists else None
            commit, added = _commit_on_tip(repo, source, message, parent)
            if commit is None:
                print("nothing new to store")
                return 0
            ref = f"{commit}:refs/heads/{BRANCH}"
            result = _git(repo, "push", "-q", "origin", ref, check=False)
            if result.returncode == 0:
                print(f"stored {added} file(s) on {BRANCH}")
                return added
            emit(f"push rejected (attempt {attempt}/{attempts}): {result.stderr.strip()}")
            if attempt < attempts:
                time.sleep(random.uniform(1, 4) * attempt)  # another run pushed first
    raise StoreError(f"could not push to {BRANCH} after {attempts} attempts")


def _classes_of(source: Path) -> list[str]:
    classes = sorted(p.name for p in (source.iterdir() if source.is_dir() else []) if p.is_dir())
    bad = [c for c in classes if CLASS_NAME.fullmatch(c) is None]
    if bad:
        raise StoreError(f"{source}: {bad} are not runner class names")
    return classes


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; exit 0 on success, 1 when git or the store refuses."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_stage = sub.add_parser("stage", help="package one shard's results for upload")
    p_stage.add_argument("--class", dest="cls", required=True)
    p_stage.add_argument("--index", type=int, required=True, help="strategy.job-index")
    p_stage.add_argument("--attempt", type=int, default=1, help="github.run_attempt")
    p_stage.add_argument("--shard", required=True, help="I/N")
    p_stage.add_argument("--ab-outcome", default="skipped")
    p_stage.add_argument("--bench-outcome", default="skipped")
    p_stage.add_argument("--ab-from", type=Path, required=True, help="what `nox -s ab` wrote")
    p_stage.add_argument("--bench-from", type=Path, required=True, help="the history folder")
    p_stage.add_argument("--into", type=Path, required=True)
    p_collect = sub.add_parser("collect", help="gather the downloaded shards' history")
    p_collect.add_argument("--shards", type=Path, required=True)
    p_collect.add_argument("--into", type=Path, required=True)
    p_collect.add_argument("--run-id", default=os.environ.get("GITHUB_RUN_ID", "local"))
    p_collect.add_argument(
        "--expect", action="append", help="CLASS=JSON list of the matrix's shards (labels gaps)"
    )
    p_fetch = sub.add_parser("fetch", help="copy the branch's recent history of some classes")
    p_fetch.add_argument("--remote", help="default: history_location.py's resolution")
    p_fetch.add_argument("--classes-from", type=Path, required=True, help="a collected run")
    p_fetch.add_argument("--into", type=Path, required=True)
    p_fetch.add_argument("--max-runs", type=int, default=30)
    p_fetch.add_argument("--max-age-days", type=float, default=90.0)
    p_fetch.add_argument("--exclude-run", help="the judged run's id: never its own files")
    p_fetch.add_argument("--exclude-commit", help="the judged commit: never its own files")
    p_push = sub.add_parser("push", help="add files to the branch and push")
    p_push.add_argument("--remote", help="default: history_location.py's resolution")
    p_push.add_argument("--from", dest="source", type=Path, required=True)
    p_push.add_argument("--message", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "stage":
            outcomes = {"ab": args.ab_outcome, "history": args.bench_outcome}
            folder = stage(
                cls=args.cls,
                index=args.index,
                shard=args.shard,
                outcomes=outcomes,
                sources={"ab": args.ab_from, "history": args.bench_from},
                into=args.into,
                attempt=args.attempt,
            )
            print(f"staged {folder}")
        elif args.command == "collect":
            expected = None if args.expect is None else expect(args.expect)
            classes = collect(args.shards, args.into, run_id=args.run_id, expected=expected)
            print(f"collected history of: {', '.join(classes) or 'nothing'}")
        elif args.command == "fetch":
            fetch(
                args.remote or resolve(os.environ).url,
                _classes_of(args.classes_from),
                args.into,
                max_runs=args.max_runs,
                max_age_days=args.max_age_days,
                exclude_run=args.exclude_run,
                exclude_commit=args.exclude_commit,
            )
        else:
            push(args.remote or resolve(os.environ).url, args.source, args.message)
    except (StoreError, LayoutError, LocationError) as exc:
        emit_command("error", f"history store: {exc}", sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
