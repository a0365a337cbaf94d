"""`python -m benchmarks.harness`: see `benchmarks/harness/cli.py` for the commands."""

from __future__ import annotations

from benchmarks.harness.cli import main

raise SystemExit(main())
