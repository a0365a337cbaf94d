"""The per-request export of a serving cell: every request's own record, beside the history.

A serving verdict is a few percentiles; when one goes red, the question is which requests made
it so (a stall, a burst of errors, a slow round). The export keeps what `client` recorded, one
JSON object a line (JSON Lines): first a header object, `"schema": 1` and `"kind":
"phasebench-serve-requests"` with the caller's fields (the cell, the load, the server), then one
row per request, warm-up rounds included and marked, in the order given:

  index, round, warmup, scheduled_s, sent_s, first_token_s, chunks ([[at_s, tokens], ...]),
  last_content_s, done_s, events, asked_tokens, output_tokens, prompt_tokens, error (in full)

Times are the pass clock's seconds (`metrics`), each round's from its own start. It derives no
figure (`metrics` does). `write_export` replaces the file atomically (a temp file in the same
folder, then `os.replace`), so a reader never sees half an export; a float that JSON cannot hold
(inf, nan) is written as its string, as the history does. `read_export` refuses a file of
another kind or schema with one line naming the file and the field.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.errors import ServeError
from benchmarks.harness.serve.metrics import RequestRecord

SCHEMA = 1
KIND = "phasebench-serve-requests"


def request_rows(
    records: Iterable[RequestRecord], *, round_index: int | str, warmup: bool
) -> list[dict[str, Any]]:
    """One export row per record of round `round_index`: its number, or a label the caller
    names its passes by ("warmup 0", "round 1 probe 3") (module docstring)."""
    return [
        {
            "index": r.index,
            "round": round_index,
            "warmup": warmup,
            "scheduled_s": r.scheduled_s,
            "sent_s": r.sent_s,
            "first_token_s": r.chunks[0].at_s if r.chunks else None,
            "chunks": [[c.at_s, c.tokens] for c in r.chunks],
            "last_content_s": r.last_content_s,
            "done_s": r.done_s,
            "events": r.events,
            "asked_tokens": r.asked_tokens,
            "output_tokens": r.output_tokens,
            "prompt_tokens": r.prompt_tokens,
            "error": r.error,
        }
        for r in records
    ]


def _plain(value: Any) -> Any:
    """`value` with every non-finite float as its string ("inf"), so the JSON stays standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def write_export(path: Path, header: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> None:
    """Write the header line and the rows to `path` atomically (module docstring)."""
    taken = {"schema", "kind"} & set(header)
    if taken:
        raise ValueError(f"the export header sets {sorted(taken)} itself; drop them")
    lines = [{"schema": SCHEMA, "kind": KIND, **header}, *rows]
    text = "".join(json.dumps(_plain(line), allow_nan=False) + "\n" for line in lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        Path(temp).replace(path)  # os.replace: atomic within one file system
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def read_export(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the rows of an export; ServeError, naming the file and the field, on a
    file that is not schema 1 of this kind or not JSON Lines."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ServeError(f"{path}: cannot read the request export ({error})") from None
    lines: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise ServeError(f"{path}: line {number} is not JSON ({error.msg})") from None
        if not isinstance(value, dict):
            raise ServeError(f"{path}: line {number} is not a JSON object")
        lines.append(value)
    if not lines:
        raise ServeError(f"{path}: empty; a request export starts with its header line")
    header, rows = lines[0], lines[1:]
    if header.get("kind") != KIND:
        raise ServeError(
            f"{path}: field `kind` is {header.get('kind')!r}, not {KIND!r}; not a request export"
        )
    if header.get("schema") != SCHEMA:
        raise ServeError(
            f"{path}: field `schema` is {header.get('schema')!r}; this phasebench reads schema "
            f"{SCHEMA} only (read it with the phasebench version that wrote it)"
        )
    return header, rows
