#!/usr/bin/env python3
"""Shrink the `benchmark-history` branch: a maintainer's tool, never run by CI (stdlib only).

The store only adds files and the ruleset blocks force pushes, so the branch only grows. Readers
fetch just the tip's trees and the files they select (history_store.py), but the tip's trees
list every file ever stored, and the repository keeps every blob. This builds ONE new orphan
commit holding the files stored within `--keep-days` (undated names of the old scheme are
kept: nothing says how old they are) from the tip's trees alone: no stored file is downloaded.

Without `--push` it only prints what it would keep and drop. With `--push` it replaces the
branch by a force push with a lease on the tip it read, so a `store` job that pushed meanwhile
makes it fail (run it again) instead of losing that run; a store that pushes afterwards
commits on the new tip (add-only). The ruleset's *Block force pushes* must be lifted for that
one push (docs/ci.md, "Pruning the history"); GitHub drops the unreachable blobs later.

Usage: `python3 .github/scripts/history_prune.py --keep-days 365 [--remote URL] [--push]`
(`--remote` defaults to history_location.py's resolution, as for the store).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from tempfile import TemporaryDirectory

from history_location import LocationError, resolve
from history_store import BRANCH, StoreError, _fetch_tip, _git
from stored_files import STORED

# The gate reads up to 120 days back (bench.yml); keeping less would shrink its baseline.
MIN_KEEP_DAYS = 120.0


def plan(paths: Sequence[str], *, keep_days: float, now: datetime) -> tuple[list[str], list[str]]:
    """(kept, dropped) paths of the branch: dropped are stored names dated before the cutoff."""
    cutoff = now - timedelta(days=keep_days)
    kept: list[str] = []
    dropped: list[str] = []
    for path in paths:
        match = STORED.fullmatch(Path(path).name)
        stamp = (
            datetime.strptime(match.group("stamp"), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
            if match
            else None
        )
        (dropped if stamp is not None and stamp < cutoff else kept).append(path)
    return kept, dropped


def prune(remote: str, *, keep_days: float, now: datetime, push: bool = False) -> int:
    """Build (and with `push`, force-push with a lease) the pruned orphan; returns files dropped."""
    if keep_days < MIN_KEEP_DAYS:
        raise StoreError(
            f"--keep-days {keep_days:g} is under the {MIN_KEEP_DAYS:g} days the gate reads"
        )
    with TemporaryDirectory() as tmp:
        repo = Path(tmp) / "store"
        if not _fetch_tip(repo, remote):
            raise StoreError(f"no {BRANCH} branch at {remote}: nothing to prune")
        tip = _git(repo, "rev-parse", f"origin/{BRANCH}").stdout.strip()
        paths = _git(repo, "ls-tree", "-r", "--name-only", tip).stdout.splitlines()
        kept, dropped = plan(paths, keep_days=keep_days, now=now)
        print(f"{BRANCH} at {tip[:12]}: keep {len(kept)} file(s), drop {len(dropped)}")
        for path in dropped:
            print(f"  drop {path}")
        if not dropped or not push:
            return len(dropped)
        env = {"GIT_INDEX_FILE": str(repo / ".git" / "prune-index")}
        _git(repo, "read-tree", tip, env=env)
        for start in range(0, len(dropped), 500):  # keep each command line short
            _git(
                repo, "update-index", "--force-remove", "--", *dropped[start : start + 500], env=env
            )
        tree = _git(repo, "write-tree", "--missing-ok", env=env).stdout.strip()
        cutoff = (now - timedelta(days=keep_days)).strftime("%Y-%m-%d")
        message = (
            f"prune: keep the files stored since {cutoff}\n\n"
            f"{len(kept)} kept, {len(dropped)} dropped; the previous tip was {tip}"
        )
        commit = _git(repo, "commit-tree", tree, "-m", message).stdout.strip()
        lease = f"--force-with-lease=refs/heads/{BRANCH}:{tip}"
        result = _git(repo, "push", lease, "origin", f"{commit}:refs/heads/{BRANCH}", check=False)
        if result.returncode != 0:
            raise StoreError(
                f"the force push was refused: {result.stderr.strip()}. Either the ruleset still "
                f"blocks force pushes to {BRANCH} (lift it for this push), or a store job pushed "
                "since this read the tip (run it again)"
            )
        print(f"{BRANCH} is now {commit[:12]} (one orphan commit)")
    return len(dropped)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; exit 0 on success, 1 when git or the remote refuses."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep-days", type=float, required=True, help=f">= {MIN_KEEP_DAYS:g}")
    parser.add_argument("--remote", help="default: history_location.py's resolution")
    parser.add_argument("--push", action="store_true", help="replace the branch (else dry run)")
    args = parser.parse_args(argv)
    try:
        prune(
            args.remote or resolve(os.environ).url,
            keep_days=args.keep_days,
            now=datetime.now(timezone.utc),
            push=args.push,
        )
    except (StoreError, LocationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
