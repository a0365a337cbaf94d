"""A history record's rounds: pytest-benchmark's per-round seconds, or the statistic the record
names in their place (pure).

`record_rounds(stats, extra, fullname)`: `stats.data` when saved, else the median as one
observation; but a record whose `extra_info.rounds_statistic` names a whole series of its
`round_series` is read as that series (DESIGN §13: a finite-rate serving cell's per-pass E2EL
p50, where the timer's pass is mostly the arrival schedule; a capacity cell's found rates, a
zero rate floored at `RATE_FLOOR`, as the judged series are). ValueError names the bad
field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: A rate of zero (a serving round where no request met its SLOs, a capacity search that met at
#: no rate) judged on the log scale: one request in ~12 days, so a fall to zero fails as the
#: largest of drops, never log(0). `reports.analysis.metrics` floors its series with it too.
RATE_FLOOR = 1e-6


def record_rounds(stats: Mapping[str, Any], extra: object, fullname: str) -> tuple[float, ...]:
    """The record's rounds (module docstring)."""
    named = _statistic_rounds(extra) if isinstance(extra, Mapping) else None
    return named or _rounds(stats, fullname)


def _statistic_rounds(extra: Mapping[str, Any]) -> tuple[float, ...] | None:
    """The rounds a record names as its statistic in place of the timer's (`rounds_statistic`:
    a finite-rate serving cell's per-pass E2EL p50, a capacity cell's found rates; DESIGN §13),
    when that series is whole: positive finite numbers. None: the timer's rounds stand."""
    name = extra.get("rounds_statistic")
    series = extra.get("round_series")
    if not isinstance(name, str) or not isinstance(series, Mapping):
        return None
    values = series.get(name)
    if not isinstance(values, list) or not values:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return None
    if name.endswith("_per_s"):
        values = [max(float(v), RATE_FLOOR) for v in values]
    ok = all(math.isfinite(v) and v > 0 for v in values)
    return tuple(float(v) for v in values) if ok else None


def _rounds(stats: Mapping[str, Any], fullname: str) -> tuple[float, ...]:
    """Per-round seconds: `stats.data` when saved, else the median as a single observation."""
    data = stats.get("data")
    if isinstance(data, list) and data:
        try:
            values = tuple(map(float, data))
        except (TypeError, ValueError):
            raise ValueError(f"benchmark {fullname} has non-numeric `stats.data`") from None
    else:
        median = stats.get("median")
        if not isinstance(median, int | float) or isinstance(median, bool):
            raise ValueError(f"benchmark {fullname} has neither `stats.data` nor `stats.median`")
        values = (float(median),)
    if min(values) <= 0 or not math.isfinite(sum(values)):
        raise ValueError(f"benchmark {fullname} has a non-positive or non-finite round time")
    return values
