"""The reviewer's first screen: one row per changed cell and phase, and numbers a reader can use.

A benchmark (one cell and phase: `test_decode[...]`) has a dozen judged metrics (its timing,
TTFT, TPOT, ITL percentiles, memory peaks, KV bytes); listing each as its own row put 85 rows
and 17 "implausible" bullets of the same few cells before anything else. Here each benchmark is
one row led by its **decisive** metric (the benchmark's own timing: `prefill_s`,
`decode_step_s`, `e2e_s`; the worst verdict when that timing was not judged), its other metrics
folded under it. The rows a reviewer sees first (`changed_cells`, at most `FIRST_ROWS`): fails
first, then undecided ones leaning to a slowdown, then improvements; everything else one click
away.

Numbers beyond what the data can tell (`interval_text`, `mde_text`): an interval bound past
+100 % reads "≥ +100 %", an MDE past 100 % "cannot tell (1 baseline run)" or "≥ 100 %", never
17,756 %.

Deliberately not here: the verdicts (`reports.analysis`), the page and the Markdown
(`reports.render.html`, the templates).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from reports.analysis.judge import leans
from reports.analysis.series import VERDICT_ORDER, Verdict

#: Changed cells shown before the fold (the rest: one click away).
FIRST_ROWS = 15
#: Beyond this relative change an interval bound or MDE says nothing a reader can use.
CAP = 1.0
Group = Literal["fail", "leaning", "improved"]
GROUP_ORDER: tuple[Group, ...] = ("fail", "leaning", "improved")


@dataclass(frozen=True)
class CellRow:
    """One benchmark (cell and phase) of one machine: its decisive metric and the others."""

    machine_id: str
    fullname: str
    decisive: Verdict
    others: tuple[Verdict, ...]
    group: Group | None

    @property
    def name(self) -> str:
        """The test's own name (`test_decode[cell]`), without the module path."""
        return self.fullname.split("::")[-1]

    @property
    def others_text(self) -> str:
        """ "2 fail, 3 inconclusive, 4 pass" over the other metrics ("" without any)."""
        counts = {name: sum(v.verdict == name for v in self.others) for name in VERDICT_ORDER}
        return ", ".join(f"{n} {name}" for name, n in counts.items() if n)


def _decisive(verdicts: Sequence[Verdict]) -> Verdict:
    timing = [v for v in verdicts if v.kind == "timing"]
    if timing:
        return timing[0]
    return min(verdicts, key=lambda v: VERDICT_ORDER.index(v.verdict))


def _group(decisive: Verdict, verdicts: Sequence[Verdict]) -> Group | None:
    if any(v.verdict in ("fail", "missing") for v in verdicts):
        return "fail"
    if leans(decisive):
        return "leaning"
    if any(v.verdict == "improved" for v in verdicts):
        return "improved"
    return None


def cell_rows(verdicts: Sequence[Verdict]) -> list[CellRow]:
    """Every benchmark of `verdicts` as one row, in first-seen order."""
    by_cell: dict[tuple[str, str], list[Verdict]] = {}
    for v in verdicts:
        by_cell.setdefault((v.machine_id, v.fullname), []).append(v)
    rows = []
    for (machine, fullname), group in by_cell.items():
        decisive = _decisive(group)
        others = tuple(v for v in group if v is not decisive)
        rows.append(CellRow(machine, fullname, decisive, others, _group(decisive, group)))
    return rows


def _rank(row: CellRow) -> tuple[int, float]:
    order = GROUP_ORDER.index(row.group) if row.group else len(GROUP_ORDER)
    change = abs(math.log(row.decisive.ratio or 1.0))
    return order, -change


def changed_cells(verdicts: Sequence[Verdict], limit: int = FIRST_ROWS) -> list[CellRow]:
    """The changed cells, fails first, then undecided leaning slower, then improved, each by
    the size of the decisive change; at most `limit`."""
    return _changed(cell_rows(verdicts), limit)


def _changed(rows: Sequence[CellRow], limit: int) -> list[CellRow]:
    return sorted((r for r in rows if r.group), key=_rank)[:limit]


def count_changed(verdicts: Sequence[Verdict]) -> dict[Group, int]:
    """How many cells fall in each group."""
    return _counts(cell_rows(verdicts))


def _counts(rows: Sequence[CellRow]) -> dict[Group, int]:
    return {g: sum(r.group == g for r in rows) for g in GROUP_ORDER}


def change_text(ratio: float | None) -> str:
    """A ratio as a signed relative change (1.071 -> '+7.1 %'); past +1,000 % as a factor
    ('x17.6'), which a reader takes in at a glance. The one format of a change, everywhere."""
    if ratio is None or math.isnan(ratio):
        return "n/a"
    if ratio > 11.0:
        return f"x{ratio:.1f}"
    return f"{(ratio - 1) * 100:+.1f} %"


def interval_text(low: float | None, high: float | None) -> str:
    """A 95 % interval of a ratio as changes, capped where it says nothing a reader can use:
    '-3.8 % … +9.5 %', '-21.6 % … ≥ +100 %', 'beyond +100 %'."""
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return "n/a"
    cap = f"+{CAP * 100:.0f} %"
    if low - 1.0 > CAP:
        return f"beyond {cap}"
    return f"{change_text(low)} … {'≥ ' + cap if high - 1.0 > CAP else change_text(high)}"


def mde_text(v: Verdict) -> str:
    """The MDE, or what the data cannot tell: 'cannot tell (1 baseline run)', '≥ 100 %'."""
    if v.mde is None or math.isnan(v.mde):
        return "n/a"
    if v.mde <= CAP:
        return f"{v.mde * 100:.1f} %"
    if v.baseline_runs <= 1:
        return f"cannot tell ({v.baseline_runs} baseline run)"
    return f"≥ {CAP * 100:.0f} %"


def first_screen(verdicts: Sequence[Verdict]) -> dict[str, object]:
    """The first screen's table and its counts, as both outputs' templates take them:
    `cells` (`changed_cells`), `cells_total`, `groups` (`count_changed`)."""
    rows = cell_rows(verdicts)  # once: both the table and the counts read them
    groups = _counts(rows)
    return {
        "cells": _changed(rows, FIRST_ROWS),
        "cells_total": sum(groups.values()),
        "groups": groups,
    }
