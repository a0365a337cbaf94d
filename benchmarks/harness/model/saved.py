"""A folder written once and reused: the saved random-weight models of tp and serving cells.

`save_once(root, key, write, marker=...)` returns `root/key`, written now by `write(tmp)` or
reused. A save goes to a temporary folder beside the final one and is renamed into place at the
end, with a marker file (`write`'s JSON) written last inside it; a folder that has its marker is
complete and is reused, never rewritten (two runs saving at once: the second rename fails and
that run uses the first one's folder). A failed save leaves nothing behind.

It deliberately knows nothing of what is saved (`tp.launch`, `serve.modeldir` do).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SavedFolder:
    """A complete folder, whether it was reused, and what writing it cost (0 when reused)."""

    path: Path
    reused: bool
    save_s: float


def save_once(
    root: Path, key: str, write: Callable[[Path], dict[str, Any]], *, marker: str
) -> SavedFolder:
    """`root/key`, complete: reused when its `marker` file exists, else written (docstring)."""
    final = root / key
    if (final / marker).is_file():
        return SavedFolder(final, True, 0.0)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    try:
        start = time.perf_counter()
        facts = write(tmp)
        save_s = time.perf_counter() - start
        (tmp / marker).write_text(
            json.dumps({**facts, "save_s": save_s}, sort_keys=True), encoding="utf-8"
        )
        try:
            tmp.rename(final)  # atomic; fails when another run renamed its copy first
        except OSError:
            if not (final / marker).is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            return SavedFolder(final, True, 0.0)
        return SavedFolder(final, False, save_s)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
