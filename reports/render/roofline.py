"""Roofline chart data: one point per cell and phase of a run, and the device roofs they sit under.

Pure arithmetic on the `extra_info` fields that `benchmarks/harness/roofline/roofline.py` records:

* a **point** is a (benchmark, phase) with positive `<phase>_flop` and `<phase>_bytes`; it sits
  at arithmetic intensity `flop / bytes` (FLOP per byte moved) and achieved FLOP/s: prefill
  `prefill_flop_per_s` (= `prefill_flop / prefill_s`), decode `decode_flop / decode_step_s`;
* a **roof** is one (peak source, dtype, peak figures) of the run:
  `min(peak_flop_per_s, peak_bandwidth_bytes_per_s * intensity)`; with one peak unknown it is
  just the other line, with both unknown there is no roof (the point is still shown).

Deliberately not here: the counts themselves (harness, which owns the FLOP and byte models), any
history (the chart shows the current run only, so its cost does not grow with history), and
drawing (`static/report.js`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from reports.history.load import BenchmarkResult

Phase = Literal["prefill", "decode"]
PHASES: tuple[Phase, ...] = ("prefill", "decode")


@dataclass(frozen=True)
class Roof:
    """A device's roofline in one dtype, from one peak source (a None peak is unknown)."""

    source: str
    dtype: str
    peak_flop_per_s: float | None
    peak_bandwidth_bytes_per_s: float | None

    @property
    def label(self) -> str:
        """Where the peaks came from and for which dtype."""
        return f"{self.source} · {self.dtype}"

    @property
    def ridge_flop_per_byte(self) -> float | None:
        """The intensity where the bandwidth slope meets the compute ceiling."""
        if self.peak_flop_per_s is None or self.peak_bandwidth_bytes_per_s is None:
            return None
        return self.peak_flop_per_s / self.peak_bandwidth_bytes_per_s

    def attainable_flop_per_s(self, intensity_flop_per_byte: float) -> float | None:
        """The roof's height at an intensity: the lower of the known limits."""
        limits: list[float] = []
        if self.peak_flop_per_s is not None:
            limits.append(self.peak_flop_per_s)
        if self.peak_bandwidth_bytes_per_s is not None:
            limits.append(self.peak_bandwidth_bytes_per_s * intensity_flop_per_byte)
        return min(limits) if limits else None

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any], dtype: str) -> Roof | None:
        """The roof a benchmark was measured against, or None when neither peak is known."""
        flop = _positive(extra, "peak_flop_per_s")
        bandwidth = _positive(extra, "peak_bandwidth_bytes_per_s")
        if flop is None and bandwidth is None:
            return None
        source = extra.get("peak_source")
        return cls(source if isinstance(source, str) else "n/a", dtype, flop, bandwidth)


@dataclass(frozen=True)
class RooflinePoint:
    """One phase of one benchmark, placed by arithmetic intensity and achieved FLOP/s."""

    fullname: str
    cell_id: str
    phase: Phase
    intensity_flop_per_byte: float
    achieved_flop_per_s: float
    roof: Roof | None

    @property
    def attainable_flop_per_s(self) -> float | None:
        """Its roof's height at its intensity (None without a roof)."""
        return (
            None
            if self.roof is None
            else self.roof.attainable_flop_per_s(self.intensity_flop_per_byte)
        )

    @property
    def pct_of_roof(self) -> float | None:
        """Achieved FLOP/s as % of the roof above the point (above 100 for cache-resident work)."""
        roof = self.attainable_flop_per_s
        return None if roof is None else self.achieved_flop_per_s / roof * 100.0


@dataclass(frozen=True)
class RooflineChart:
    """The points and the distinct roofs (in order of first use) of one run."""

    points: tuple[RooflinePoint, ...] = ()
    roofs: tuple[Roof, ...] = ()

    @classmethod
    def from_benchmarks(cls, benchmarks: Iterable[BenchmarkResult]) -> RooflineChart:
        """Every placeable (benchmark, phase) of a run; benchmarks without counts give none."""
        points: list[RooflinePoint] = []
        roofs: list[Roof] = []
        for bench in benchmarks:
            dtype = bench.params.get("dtype", bench.extra.get("dtype"))
            roof = Roof.from_extra(bench.extra, str(dtype) if dtype is not None else "n/a")
            for phase in PHASES:
                placed = _place(bench.extra, phase)
                if placed is None:
                    continue
                if roof is not None and roof not in roofs:
                    roofs.append(roof)
                points.append(
                    RooflinePoint(bench.fullname, bench.cell_id, phase, *placed, roof=roof)
                )
        return cls(tuple(points), tuple(roofs))


def _positive(extra: Mapping[str, Any], key: str) -> float | None:
    """A finite positive number from `extra`, else None (null, missing, bool, text, NaN, <= 0)."""
    value = extra.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


def _place(extra: Mapping[str, Any], phase: Phase) -> tuple[float, float] | None:
    """(intensity FLOP/byte, achieved FLOP/s) of one phase, or None when a figure is missing."""
    flop = _positive(extra, f"{phase}_flop")
    moved = _positive(extra, f"{phase}_bytes")
    if flop is None or moved is None:
        return None
    if phase == "prefill":
        achieved = _positive(extra, "prefill_flop_per_s")
        if achieved is None and (prefill_s := _positive(extra, "prefill_s")) is not None:
            achieved = flop / prefill_s
    else:
        step_s = _positive(extra, "decode_step_s")
        # the same median time as decode_bytes_per_s, when the time itself is not recorded
        rate = _positive(extra, "decode_bytes_per_s")
        if step_s is not None:
            achieved = flop / step_s
        elif rate is not None:
            achieved = flop * rate / moved
        else:
            achieved = None
    return None if achieved is None else (flop / moved, achieved)
