"""The command that finds which commit made a failed timing slower (`nox -s bisect`,
docs/bisect.md), for the A/B page and the history report's failing rows.

A command is given only where there are commits to search: both ends are commits, they differ,
and the current run's tree was clean (a dirty tree's change is in no commit).

Deliberately not here: running it (`benchmarks.bisect`).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from reports.analysis.metrics import PRIMARY_BY_MEASUREMENT


def bisect_command(good: str, bad: str, fullname: str, metric: str, matrix: str = "") -> str:
    """`nox -s bisect -- --good G --bad B [--matrix M] -k TEST --metric METRIC`."""
    test = fullname.rpartition("::")[2]
    command = ["nox", "-s", "bisect", "--", "--good", good[:12], "--bad", bad[:12]]
    command += [*(["--matrix", matrix] if matrix else []), "-k", test, "--metric", metric]
    return shlex.join(command)


def bisect_commands(
    good: str | None,
    bad: str | None,
    failed: Iterable[tuple[str, str]],
    matrix: str = "",
) -> list[tuple[str, str]]:
    """(test id, command) for every failed (fullname, metric) that is a primary timing, when
    `good` and `bad` are two different commits; [] otherwise."""
    if not good or not bad or good == bad:
        return []
    return [
        (fullname.rpartition("::")[2], bisect_command(good, bad, fullname, metric, matrix))
        for fullname, metric in failed
        if metric in PRIMARY_BY_MEASUREMENT.values()
    ]
