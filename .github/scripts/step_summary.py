"""The gate job's step summary: every shard's summary in one page that fits GitHub's limit."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# GitHub keeps at most 1 MiB of a job's step summaries and drops the rest; stay well under.
MAX_SUMMARY_BYTES = 900_000


def section(name: str, path: Path) -> str:
    """A shard's summary.md under its name, read up to the whole budget (cut later by `fit`)."""
    try:
        with path.open("rb") as handle:
            text = handle.read(MAX_SUMMARY_BYTES).decode("utf-8", errors="replace")
    except OSError:
        text = "_(no summary.md)_"
    return f"#### {name}\n\n{text.strip()}\n"


def cut_parts(parts: Sequence[str], budget: int = MAX_SUMMARY_BYTES) -> list[str]:
    """Each part cut to an equal share of `budget` (UTF-8 bytes), at a line end, saying so.

    The shares of short parts are not redistributed (simple, and the cut parts point to the
    full report).
    """
    note = "\n\n_(cut to fit GitHub's step summary limit; the full text is in the artifacts)_\n"
    share = max(budget, 0) // max(len(parts), 1)
    out = []
    for part in parts:
        data = part.encode("utf-8")
        if len(data) <= share:
            out.append(part)
            continue
        keep = data[: max(share - len(note.encode("utf-8")), 0)].decode("utf-8", "ignore")
        out.append(keep[: keep.rfind("\n") + 1] + note)
    return out


def fit(head: str, parts: Sequence[str], budget: int = MAX_SUMMARY_BYTES) -> str:
    """`head` whole, then each part cut to an equal share of what is left (`cut_parts`)."""
    room = budget - len(head.encode("utf-8"))
    return "\n".join([head, *cut_parts(parts, room)]).rstrip() + "\n"
