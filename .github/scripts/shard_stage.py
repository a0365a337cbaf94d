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

Deliberately not here: reading or storing history (history_store.py) and judging (verdict.py).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
