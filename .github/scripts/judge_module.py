#!/usr/bin/env python3
"""Run a module of the judge checkout under `python -I`: `judge_module.py DIR MODULE [ARGS]`.

`python -I` ignores PYTHON* variables (PYTHONPATH, PYTHONSTARTUP), the user site and the current
directory, so `python -I -m MODULE` finds installed modules only. The gate job runs the judge's
`reports` this way: exactly the judge checkout `DIR` (the base commit's code) goes first on
sys.path, and `MODULE` runs as `__main__` with `ARGS`, in the hash-pinned venv's interpreter.
Nothing a shard wrote (its artifacts lie elsewhere) can stand in for a module.

Deliberately not here: anything but putting `DIR` on the path (stdlib only).
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str]) -> None:
    """Run `MODULE` from `DIR`; exits 2 on a malformed command line."""
    if len(argv) < 2:
        sys.exit("usage: python -I judge_module.py DIR MODULE [ARGS...]")
    root, module = Path(argv[0]).resolve(), argv[1]
    top = module.split(".", maxsplit=1)[0]
    if not top.isidentifier() or not (root / top).is_dir():
        print(f"judge_module.py: {root} holds no package {top!r}", file=sys.stderr)
        sys.exit(2)
    sys.path.insert(0, str(root))
    sys.argv = [module, *argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
