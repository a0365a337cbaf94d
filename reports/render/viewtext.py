"""Texts shared by the report's comparison views (quantization, tensor parallel): a figure in its
unit, a ratio with its times sign (and a paired speed-up's interval), and each machine's newest
run of the paths a view command is given.

Deliberately not here: which rows a view has (`reports.render.quant`, `.tp`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from reports.analysis.speedup import Speedup
from reports.errors import ReportError
from reports.history.load import Run, group_runs
from reports.history.runfile import iter_json_files, load_files

NO_RATIO = "\u2014"  # an em dash: no ratio (no baseline row, or a figure missing)
TIMES = "\u00d7"


def ratio_text(ratio: float | None, speedup: Speedup | None = None) -> str:
    """'2.10' and a times sign, or '—' without a ratio; with its paired speed-up's interval
    '2.10', a times sign, ' [1.98, 2.22]'."""
    if ratio is None:
        return NO_RATIO
    if speedup is None:
        return f"{ratio:.2f}{TIMES}"
    return f"{ratio:.2f}{TIMES} [{speedup.ci_low:.2f}, {speedup.ci_high:.2f}]"


def value_text(value: float | None, name: str) -> str:
    """A figure in its unit: '1.23k tok/s', '3.50 MiB', '136 B'; 'n/a' when not recorded."""
    if value is None:
        return "n/a"
    if name.endswith("_tok_per_s"):
        return f"{value / 1e3:.3g}k tok/s" if abs(value) >= 1e3 else f"{value:.3g} tok/s"
    if name.endswith("_bytes_per_s"):
        return f"{value / 1e9:.3g} GB/s"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:,.4g} B"


def newest_runs(paths: Sequence[str]) -> list[tuple[str, Run]]:
    """Each machine's newest run (the report's current run) under the paths, by machine id.
    ReportError (one line, exit 2) for a missing path, a named file that cannot be read or no
    run at all; an unreadable file inside a directory is named on stderr."""
    files, skipped = load_files(iter_json_files([Path(p) for p in paths]))
    loaded = {f.path for f in files}
    named = {str(Path(p)) for p in paths}
    bad = [s for s in skipped if s.path in named and s.path not in loaded]
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        why = f"{bad[0].path}: {bad[0].reason}{more}"
        raise ReportError(f"{why}: pass pytest-benchmark JSON files or a history directory")
    if not files:
        raise ReportError(f"no benchmark run under {', '.join(paths)}: pass a .benchmarks folder")
    for skip in skipped:
        print(f"skipped {skip.path}: {skip.reason}", file=sys.stderr)
    return [(machine, runs[-1]) for machine, runs in sorted(group_runs(files).items())]
