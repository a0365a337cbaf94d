"""Gather one run's history from its downloaded shards, and say what is missing (stdlib only).

`collect` copies the valid pytest-benchmark JSON of every history-mode shard (the newest attempt
of each: shard_stage.py) to `INTO/<class>/<stored name>`. A failed or lost matrix leg loses
only its own shard: the others are collected whatever the legs' job results. Given the
matrix (`expected`), a run with a leg missing, measuring nothing, or partial is labelled: the
reasons go to `INTO/PARTIAL` (plain text, so no reader of `*.json` takes it for history), which
`history_store.py push` appends to its commit message, and to a warning in the job's log.

Deliberately not here: git and the branch (history_store.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from shard_stage import FOLDER, latest_shards, missing
from stored_files import is_history_file, stored_name
from workflow_log import emit_command

PARTIAL = "PARTIAL"


class StoreError(Exception):
    """A history operation failed for a reason the message states (history_store.py's too)."""


def collect(
    shards: Path,
    into: Path,
    *,
    run_id: str,
    now: datetime | None = None,
    expected: Mapping[str, int] | None = None,
) -> list[str]:
    """Copy each valid JSON of each history-mode `bench-<class>-<k>` shard to `into/<class>/`;
    returns the classes collected. With `expected` (legs per class), write `into/PARTIAL`
    naming every leg that is missing, measured nothing, or is partial."""
    if not shards.is_dir():
        raise StoreError(
            f"{shards} does not exist: the download step found no bench-* artifact "
            "(did every shard job fail before uploading?)"
        )
    when = now or datetime.now(timezone.utc)
    classes: set[str] = set()
    reasons = [
        f"{name}: no artifact (the job failed or was lost before uploading)"
        for name in missing(shards, expected or {})
    ]
    for artifact, meta in latest_shards(shards):
        match = FOLDER.fullmatch(artifact.name)
        assert match is not None  # latest_shards keeps only names that match
        cls, shard = match.group("cls"), match.group("index")
        leg = f"bench-{cls}-{shard}"
        if meta.get("mode") != "history":
            # An A/B shard's JSON is never history (it measured two trees at once).
            if expected is not None and cls in expected:
                reasons.append(f"{leg}: measured nothing in history mode ({meta.get('mode')})")
            continue
        if meta.get("partial"):
            reasons.append(f"{leg}: partial (its benchmark step ended {meta.get('outcome')})")
        for path in sorted((artifact / "data").rglob("*.json")):
            reason = is_history_file(path)
            if reason is not None:
                emit_command("warning", f"skipping {path.relative_to(shards)}: {reason}")
                continue
            data = path.read_bytes()
            target = into / cls / stored_name(data, run_id=run_id, shard=shard, now=when)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            classes.add(cls)
    if reasons and expected is not None:
        into.mkdir(parents=True, exist_ok=True)
        (into / PARTIAL).write_text("".join(f"- {r}\n" for r in sorted(reasons)), "utf-8")
        emit_command("warning", f"a partial run: {'; '.join(sorted(reasons))}")
    return sorted(classes)


def partial_note(source: Path) -> str:
    """The `PARTIAL` note `collect` left in `source`, as a commit message paragraph; or ''."""
    note = source / PARTIAL
    if note.is_symlink() or not note.is_file():
        return ""
    text = note.read_text(encoding="utf-8").strip()
    return f"\n\npartial run: the shards below are not in this commit or are partial\n{text}"
