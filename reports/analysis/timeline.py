"""A run's host-probe points in time order: the host's level at a benchmark's own window.

Each probe point has the time it was taken (`points[i].session_s`, seconds since its file's run
began; every benchmark record's `session_window_s` is on the same clock). `timeline` keeps a
run's quiet points per kind (those beside others' CPU, `probes.BUSY_SHARE`, left out) with each
kind's point noise (the spread of a point's own calls); `Timeline.at` reads the level during a
window (issue 51: the host moves over seconds, so a benchmark felt the host of its own window,
not the run's median point), `Timeline.moves` the move between two windows (`consistency`). A
sharded run's files have one clock each: `timelines` keeps them apart.

Deliberately not here: the host's move over runs (`probes`), the timing model that reads the
levels (`timing_model`, through `metrics.window_levels`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reports.analysis.probes import BUSY_SHARE, MIN_POINT_SD
from reports.history.load import BenchmarkResult, Run


@dataclass(frozen=True)
class Timeline:
    """The run's quiet probe points per kind, in time order: (seconds since the run began, log
    seconds), and each kind's point noise (log SD: the spread of a point's own calls; the host's
    move between points is signal, not noise)."""

    points: Mapping[str, tuple[tuple[float, float], ...]]
    noise: Mapping[str, float]

    def at(self, kind: str, window: tuple[float, float]) -> tuple[float, float] | None:
        """The kind's log level during `window` (seconds since the run began) and its variance:
        the line between the last point before the window's middle and the first after it,
        read at the middle (the host moves over seconds to minutes: a benchmark felt the host
        of its own window, not the run's median); the nearest point when the window lies
        outside the points. None without a point of this kind."""
        points = self.points.get(kind, ())
        if not points:
            return None
        noise = self.noise.get(kind, MIN_POINT_SD) ** 2
        middle = (window[0] + window[1]) / 2.0
        before = [(t, v) for t, v in points if t <= middle]
        after = [(t, v) for t, v in points if t > middle]
        if not before or not after:
            _, v = (before or after)[-1 if before else 0]
            return v, noise
        (t0, v0), (t1, v1) = before[-1], after[0]
        w = (middle - t0) / (t1 - t0) if t1 > t0 else 0.5
        return v0 + w * (v1 - v0), ((1.0 - w) ** 2 + w**2) * noise

    def moves(
        self, first: tuple[float, float], second: tuple[float, float]
    ) -> list[tuple[str, float]]:
        """Each kind's log move from the first window to the second."""
        out = []
        for kind in sorted(self.points):
            a, b = self.at(kind, first), self.at(kind, second)
            if a is not None and b is not None:
                out.append((kind, b[0] - a[0]))
        return out

    def levels(self, window: tuple[float, float]) -> dict[str, tuple[float, float]]:
        """Every kind's (log level, variance) during `window` (`at`)."""
        return {k: at for k in self.points if (at := self.at(k, window)) is not None}


def _point_sd(calls: Sequence[Sequence[float]]) -> float:
    """A point's own noise (log SD of its median): the calls' spread within points, pooled,
    times 1.25 (a median's standard error) over the square root of the calls per point; 0
    without calls (then `MIN_POINT_SD`)."""
    squares, df, counts = 0.0, 0, []
    for logs in calls:
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            squares += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
            counts.append(len(logs))
    if df == 0:
        return 0.0
    return 1.253 * math.sqrt(squares / df) / math.sqrt(statistics.fmean(counts))


def timeline(run: Run) -> Timeline | None:
    """The run's probe points with their times (phasebench's probe records: `points[i]` has
    `session_s`; points run beside others' CPU (`probes.BUSY_SHARE`) left out); None without.
    A sharded run's files each have their own clock: `timelines` keeps them apart."""
    return timeline_of(run.probes)


def timelines(run: Run) -> dict[str, Timeline]:
    """One timeline per file of the run (`BenchmarkResult.source`): each its own clock."""
    sources: dict[str, list[BenchmarkResult]] = {}
    for probe in run.probes:
        sources.setdefault(probe.source, []).append(probe)
    return {s: t for s, probes in sources.items() if (t := timeline_of(probes)) is not None}


def timeline_of(records: Sequence[BenchmarkResult]) -> Timeline | None:
    """The probe points of `records` (probe records sharing one clock), as `timeline`."""
    found: dict[str, list[tuple[float, float]]] = {}
    spreads: dict[str, list[list[float]]] = {}
    for probe in records:
        points = probe.extra.get("points")
        cpus = probe.extra.get("others_cpus")
        if probe.host_probe is None or not isinstance(points, list):
            continue
        for point, value in zip(points, probe.rounds_s, strict=False):
            if not isinstance(point, dict) or not isinstance(point.get("session_s"), int | float):
                continue
            cores = point.get("others_cores")
            known = isinstance(cores, int | float) and isinstance(cpus, int | float) and cpus > 0
            if known and float(cores) / float(cpus) >= BUSY_SHARE:  # type: ignore[arg-type]
                continue
            found.setdefault(probe.host_probe, []).append(
                (float(point["session_s"]), math.log(value))
            )
            calls = point.get("calls_s")
            if isinstance(calls, list) and all(isinstance(c, int | float) and c > 0 for c in calls):
                spreads.setdefault(probe.host_probe, []).append([math.log(c) for c in calls])
    series = {k: tuple(sorted(v)) for k, v in found.items() if len(v) >= 2}
    if not series:
        return None
    noise = {k: max(_point_sd(spreads.get(k, [])), MIN_POINT_SD) for k in series}
    return Timeline(series, noise)
