"""The files on the `benchmark-history` branch: which files are history, and their stored names.

A stored name is `<UTC stamp>-r<run id>-s<shard>-<content hash>.json`: it sorts by time of
storing, and the content hash makes storing the same file twice a no-op (`history_store.py`).
What a file measured is in it: `commit_info.id`, the commit (pytest-benchmark's own field).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from pathlib import Path

# A history file is a few MiB at most (per-round data of a large matrix); anything far larger is
# not one of ours and is refused rather than committed into the branch forever.
MAX_FILE_BYTES = 64 * 1024 * 1024
CLASS_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
STORED = re.compile(
    r"(?P<stamp>\d{8}T\d{6}Z)-r(?P<run>[A-Za-z0-9_]+)-s(?P<shard>\d{1,4})-(?P<hash>[0-9a-f]{16})"
    r"\.json"
)
# Names of the scheme before content hashes: `<run id>.<attempt>-s<shard>-<original>.json`.
LEGACY = re.compile(r"(?P<run>[A-Za-z0-9_]+)\.\d+-s\d{1,4}-.+\.json")
SAFE = re.compile(r"[^A-Za-z0-9_]+")


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


def commit_of(path: Path) -> str | None:
    """The measured commit (`commit_info.id`) of a history file; None when it names none."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    info = raw.get("commit_info") if isinstance(raw, dict) else None
    commit = info.get("id") if isinstance(info, dict) else None
    return commit if isinstance(commit, str) and commit else None


def run_key(run_id: str) -> str:
    """A run id as stored names spell it (the `run` group of `STORED` and `LEGACY`)."""
    return SAFE.sub("_", run_id)


def content_hash(data: bytes) -> str:
    """The first 16 hex digits of the SHA-256 of a file: its identity on the branch."""
    return hashlib.sha256(data).hexdigest()[:16]


def stored_name(data: bytes, *, run_id: str, shard: str, now: datetime) -> str:
    """`<UTC stamp>-r<run id>-s<shard>-<content hash>.json`; sorts by time of storing."""
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-r{run_key(run_id)}-s{int(shard)}-{content_hash(data)}.json"
