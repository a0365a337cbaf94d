#!/usr/bin/env python3
"""The layout of one benchmark shard's uploaded results (stdlib only).

`INTO/bench-<class>-<k>/outcome.json` (`{"schema": 1, "class", "shard", "mode": "history" | "ab"
| "none", "outcome", "partial"}`) beside `INTO/bench-<class>-<k>/data/` (the shard's
`.benchmarks/` tree in history mode, its `nox -s ab` output in A/B mode). Each shard uploads its
folder as the artifact `bench-<class>-<k>`; downloaded with `merge-multiple: true` the folders
sit side by side whether one artifact matched or many.

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
) -> Path:
    """Package one shard's results as `INTO/bench-<class>-<index>/{outcome.json,data/}`.

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
    folder = into / f"bench-{cls}-{index}"
    (folder / "data").mkdir(parents=True, exist_ok=True)
    source = sources.get(mode)
    if source is not None and source.is_dir():
        shutil.copytree(source, folder / "data", dirs_exist_ok=True, symlinks=True)
    meta = {
        "schema": 1,
        "class": cls,
        "shard": shard,
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
