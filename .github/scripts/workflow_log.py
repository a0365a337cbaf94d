"""Log lines that untrusted text cannot turn into workflow commands (stdlib only).

The runner reads every line a step prints for commands (actions/runner, `ActionCommand.cs`):
`::name args::data` when the line, less its leading whitespace, starts with `::`
(`TryParseV2`), and `##[name args]data` *anywhere* in the line (`TryParse`). Among them are
`set-output` (a step output a later step trusts), `add-mask`, `stop-commands`, `error`. Class and
shard names, notes of a re-judge, file names and API descriptions reach our log lines from files
a runner wrote after a PR's code ran there, so every line we print goes through `plain`: one
line, control characters shown escaped, `::` and `##[` broken apart. The one command a script
means to emit is built by `command`, whose data is escaped as the runner unescapes it.

Deliberately not here: deciding what to print.
"""

from __future__ import annotations

import sys
import unicodedata
from typing import TextIO


def plain(text: object) -> str:
    """`text` as one log line that the runner cannot read as a command."""
    out = []
    for ch in str(text):
        if ch == "\t":
            out.append(" ")
        elif unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp", "Cs"}:
            out.append(repr(ch)[1:-1] if ord(ch) < 0x10000 else "?")
        else:
            out.append(ch)
    line = "".join(out)
    # `: :` and `# #[` read the same to a person and are no command to the runner.
    while "::" in line:
        line = line.replace("::", ": :")
    return line.replace("##[", "# #[")


def _escape_data(text: str) -> str:
    """The toolkit's `escapeData`: what the runner turns back into `%`, CR and LF."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def command(name: str, message: object) -> str:
    """`::name::message` with `message` made plain first (`name`: error, warning, notice)."""
    if name not in {"error", "warning", "notice"}:
        raise ValueError(f"not a command this module emits: {name!r}")
    return f"::{name}::{_escape_data(plain(message))}"


def emit(text: object, stream: TextIO | None = None) -> None:
    """Print `text` as a plain line."""
    print(plain(text), file=stream or sys.stdout)


def emit_command(name: str, message: object, stream: TextIO | None = None) -> None:
    """Print one `::name::` command carrying `message` as its data."""
    print(command(name, message), file=stream or sys.stdout)
