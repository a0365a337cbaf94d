#!/usr/bin/env python3
"""The layout of one benchmark shard's uploaded results (stdlib only).

`INTO/bench-<class>-<k>-a<attempt>/outcome.json` (`{"schema": 1, "class", "shard", "attempt",
"mode": "history" | "ab" | "none", "outcome", "partial"}`) beside `.../data/` (the shard's
`.benchmarks/` tree in history mode, its `nox -s ab` output in A/B mode). Each shard uploads its
folder as the artifact of the same name; downloaded with `merge-multiple: true` the folders sit
side by side whether one artifact matched or many.

Why the attempt is in the name: after "Re-run failed jobs" the run holds a re-run shard's
upload of every attempt, and download-artifact's REST listing keeps one artifact per name by
id, which is not always the newest upload (Systemorph/MeshWeaver#4303). Distinct names are all
downloaded, and `latest_shards` keeps the newest attempt of each shard.

Which shards should be there: `expect` (the matrix's shard list per class, `[]` for a class
that did not run) against what was downloaded. The gate and the store download over the
internal artifact API first and fall back to the REST path only when `check` finds a shard
missing (bench.yml, docs/ci.md "Downloads"); the store labels what it stored with `missing`.

CLI: `shard_stage.py check --shards DIR --expect CLASS=JSON ...` prints each missing shard and
writes `complete=true|false` to `$GITHUB_OUTPUT`.

Deliberately not here: reading or storing history (history_store.py) and judging (verdict.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python -I` (how the workflows run this) leaves the script's own folder off sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from workflow_log import emit_command

CLASS = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
FOLDER = re.compile(
    r"bench-(?P<cls>[a-z0-9][a-z0-9_-]{0,31}?)-(?P<index>\d{1,4})(?:-a(?P<attempt>\d{1,4}))?"
)
OUTCOMES = {"success", "failure", "cancelled", "skipped"}


class LayoutError(Exception):
    """A shard's results cannot be staged for the reason the message states."""


def stage(
    *,
    cls: str,
    index: int,
    shard: str,
    outcomes: Mapping[str, str],
    sources: Mapping[str, Path],
    into: Path,
    attempt: int = 1,
) -> Path:
    """Package one shard's results as `INTO/bench-<class>-<index>-a<attempt>/`.

    `outcomes` maps mode ("ab", "history") to its step's outcome and `sources` to the folder
    that step writes; the step that ran is the one not `skipped`. Anything but `success` marks
    the shard partial: the step failed or hit its timeout, so some cells may be missing (their
    files say so in `machine_info`).
    """
    if CLASS.fullmatch(cls) is None:
        raise LayoutError(f"--class {cls!r}: a runner class is lowercase letters, digits, - or _")
    bad = {mode: o for mode, o in outcomes.items() if o not in OUTCOMES}
    if bad:
        raise LayoutError(f"unknown step outcome(s) {bad}; expected one of {sorted(OUTCOMES)}")
    ran = {mode: o for mode, o in outcomes.items() if o != "skipped"}
    mode, outcome = next(iter(ran.items())) if len(ran) == 1 else ("none", "skipped")
    folder = into / f"bench-{cls}-{index}-a{attempt}"
    (folder / "data").mkdir(parents=True, exist_ok=True)
    source = sources.get(mode)
    if source is not None and source.is_dir():
        shutil.copytree(source, folder / "data", dirs_exist_ok=True, symlinks=True)
    meta = {
        "schema": 1,
        "class": cls,
        "shard": shard,
        "attempt": attempt,
        "mode": mode,
        "outcome": outcome,
        "partial": outcome != "success",
    }
    (folder / "outcome.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
    return folder


def read_outcome(folder: Path) -> dict[str, Any] | None:
    """The shard's `outcome.json`, or None when it is missing or not ours."""
    try:
        meta = json.loads((folder / "outcome.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(meta, dict) or meta.get("schema") != 1:
        return None
    return meta


def latest_shards(shards: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(folder, outcome) of the newest attempt of each shard under `shards`, by name.

    Folders that are not `bench-<class>-<k>[-a<attempt>]` or hold no outcome.json of ours are
    left out; the caller decides whether that is an error.
    """
    newest: dict[tuple[str, int], tuple[int, Path, dict[str, Any]]] = {}
    for folder in sorted(p for p in shards.iterdir() if p.is_dir()) if shards.is_dir() else []:
        match = FOLDER.fullmatch(folder.name)
        meta = read_outcome(folder) if match else None
        if match is None or meta is None:
            continue
        key = (match.group("cls"), int(match.group("index")))
        attempt = int(match.group("attempt") or 0)
        if key not in newest or attempt > newest[key][0]:
            newest[key] = (attempt, folder, meta)
    return [(folder, meta) for _, folder, meta in (newest[k] for k in sorted(newest))]


def expect(specs: Sequence[str]) -> dict[str, int]:
    """`CLASS=JSON list of shards` (a matrix's `PHASEBENCH_<CLASS>_SHARDS`) -> legs per class."""
    counts: dict[str, int] = {}
    for spec in specs:
        cls, sep, raw = spec.partition("=")
        try:
            shards = json.loads(raw) if sep else None
        except json.JSONDecodeError:
            shards = None
        if CLASS.fullmatch(cls) is None or not isinstance(shards, list):
            raise LayoutError(f"--expect {spec!r}: expected CLASS=<JSON list of shards>")
        counts[cls] = len(shards)
    return counts


def missing(shards: Path, expected: Mapping[str, int]) -> list[str]:
    """`bench-<class>-<k>` of each expected leg (job index k) with no attempt downloaded."""
    found = (FOLDER.fullmatch(folder.name) for folder, _ in latest_shards(shards))
    have = {(m.group("cls"), int(m.group("index"))) for m in found if m is not None}
    return [
        f"bench-{cls}-{k}"
        for cls, count in sorted(expected.items())
        for k in range(count)
        if (cls, k) not in have
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """`check`: exit 0 whatever is missing (the output says); 1 on malformed arguments."""
    parser = argparse.ArgumentParser(description="which expected shards were downloaded")
    sub = parser.add_subparsers(dest="command", required=True)
    p_check = sub.add_parser("check", help="compare the downloaded shards with the matrix")
    p_check.add_argument("--shards", type=Path, required=True)
    p_check.add_argument("--expect", action="append", default=[], help="CLASS=JSON list")
    args = parser.parse_args(argv)
    try:
        gone = missing(args.shards, expect(args.expect))
    except LayoutError as exc:
        emit_command("error", f"shard check: {exc}", sys.stderr)
        return 1
    for name in gone:
        print(f"not downloaded: {name} (no artifact of any attempt)")
    print(f"complete={str(not gone).lower()}")
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        with Path(output).open("a", encoding="utf-8") as handle:
            handle.write(f"complete={str(not gone).lower()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
