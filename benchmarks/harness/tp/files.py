"""Where a tensor-parallel run's ranks write, and how (atomically, as plain JSON).

`OUT/rank<R>.json` is rank R's record, rewritten at every stage; `OUT/result.json` is rank 0's
view of the whole run. A write goes to a temporary file in the same folder and is renamed over
the old one, so the launcher, reading while a rank writes, never sees half a file.

`OUT/rank<R>.stack` is where `faulthandler` writes rank R's Python stacks when the rank gets
SIGTERM (from the launcher or torchrun): a rank blocked in a collective or hung in native code
cannot write JSON, but faulthandler dumps from the signal handler itself. `stack_frames` reads
the main thread's frames back from that dump, so a hang is reported with where it hung.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

# 2 (issue 42): round times on one clock (`round_clock`, t0/t1 per rank), load and run peaks.
SCHEMA = 2
RESULT_FILE = "result.json"
# One frame of a faulthandler dump: `  File "/path/to/x.py", line 12 in func`.
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_THREAD_HEADERS = ("Current thread ", "Thread ", "Stack (most recent call first)")


def rank_file(out: Path, rank: int) -> Path:
    """Where rank `rank` writes its record."""
    return out / f"rank{rank}.json"


def stack_file(out: Path, rank: int) -> Path:
    """Where rank `rank`'s faulthandler writes its stacks on SIGTERM."""
    return out / f"rank{rank}.stack"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` as JSON atomically (a temporary file, then a rename over the old one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(path)


def read_json(path: Path) -> dict[str, Any] | None:
    """A record written by `write_json`, or None when absent or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stack_frames(dump: str, marker: str) -> list[tuple[str, int, str]]:
    """(file, line, function) of the last thread stack in `dump` whose frames include a file
    containing `marker` (the worker's main thread), innermost first; [] when there is none.

    A rank may be signalled twice (launcher and torchrun), so the last matching stack wins.
    """
    stacks: list[list[tuple[str, int, str]]] = []
    for line in dump.splitlines():
        if line.startswith(_THREAD_HEADERS):
            stacks.append([])
        elif (match := _FRAME.match(line)) and stacks:
            stacks[-1].append((match["file"], int(match["line"]), match["func"]))
    mains = [s for s in stacks if any(marker in frame[0] for frame in s)]
    return mains[-1] if mains else []
