"""A serving workload's dataset file: (prompt, output length) pairs, JSON Lines (DESIGN §13).

Each line is one request: `{"prompt": "text", "output_len": 64}` (the text is sent as it is; the
server's tokenizer decides its length, read back from its usage) or `{"prompt_len": 128,
"output_len": 64}` (a prompt of that many words of the served vocabulary, which a word-level
random-weight model reads as that many tokens). Blank lines and lines starting with `#` are
skipped. A load pass takes the file's rows in order, wrapping round when it sends more requests
than the file has, so every run sends the same requests.

`read_dataset(path)` reads and validates the whole file (MatrixError naming the file, line and
field with the fix): a broken dataset fails the matrix before anything starts. Relative paths
are read from the working directory, like `--matrix`. A file is parsed once per version (its
path, size and modification time): the matrix, the server's sizing and every cell of it ask.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.errors import MatrixError

#: A dataset this large is a mistake (a whole corpus): a pass sends at most num_prompts rows.
MAX_ROWS = 100_000


@dataclass(frozen=True)
class DatasetRow:
    """One request of a dataset: its prompt text or its prompt length, and N."""

    output_len: int
    prompt: str | None = None
    prompt_len: int | None = None


def _whole(value: object, where: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MatrixError(f"{where}: {field} {value!r} is not valid; use a whole number >= 1")
    return value


def _row(raw: object, where: str) -> DatasetRow:
    if not isinstance(raw, dict):
        raise MatrixError(
            f"{where}: expected a JSON object with output_len and prompt or prompt_len"
        )
    unknown = sorted(set(raw) - {"prompt", "prompt_len", "output_len"})
    if unknown:
        raise MatrixError(
            f"{where}: unknown field(s) {', '.join(unknown)}; use prompt or prompt_len, and "
            "output_len"
        )
    if "output_len" not in raw:
        raise MatrixError(f"{where}: missing output_len (the tokens to ask for)")
    output_len = _whole(raw["output_len"], where, "output_len")
    has_text, has_len = "prompt" in raw, "prompt_len" in raw
    if has_text == has_len:
        raise MatrixError(f"{where}: give exactly one of prompt (text) and prompt_len (words)")
    if has_text:
        text = raw["prompt"]
        if not isinstance(text, str) or not text.strip():
            raise MatrixError(f"{where}: prompt must be non-empty text")
        return DatasetRow(output_len, prompt=text)
    return DatasetRow(output_len, prompt_len=_whole(raw["prompt_len"], where, "prompt_len"))


def read_dataset(path: Path) -> tuple[DatasetRow, ...]:
    """Every request of the dataset file at `path` (module docstring)."""
    try:
        found = path.resolve().stat()
    except FileNotFoundError:
        raise MatrixError(
            f"dataset {path}: no such file (relative paths are read from {Path.cwd()}); fix "
            "the `dataset` axis"
        ) from None
    except OSError as error:
        raise MatrixError(f"dataset {path}: cannot read it ({error})") from None
    return _parsed(path, path.resolve(), found.st_size, found.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _parsed(path: Path, resolved: Path, size_bytes: int, mtime_ns: int) -> tuple[DatasetRow, ...]:
    """`read_dataset`'s work, once per version of a file (`size_bytes` and `mtime_ns` only key
    the cache); `path` as the matrix named it, for messages."""
    del size_bytes, mtime_ns
    try:
        lines = resolved.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise MatrixError(f"dataset {path}: cannot read it ({error})") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"dataset {path}, line {number}"
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as error:
            raise MatrixError(f"{where}: not JSON ({error.msg}); one object per line") from None
        rows.append(_row(raw, where))
        if len(rows) > MAX_ROWS:
            raise MatrixError(f"dataset {path}: more than {MAX_ROWS} rows; keep a sample")
    if not rows:
        raise MatrixError(f"dataset {path}: no rows; add one JSON object per line")
    return tuple(rows)
