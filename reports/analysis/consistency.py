"""The suite checks itself: one computation measured by two modules of one run must agree.

Two modules time the same work in every cell that runs both:

- **prefill**: `test_prefill`'s rounds (`prefill_s`) against the prefill inside
  `test_generate`'s rounds (`generate_prefill_rounds_s`, or its median `generate_prefill_s`
  in files written before the rounds were kept);
- **decode**: `test_decode`'s rounds (one step at context P, `decode_step_s`) against the steps
  inside `test_generate` (`step_s`, per position P + i), each moved back to context P with the
  run's own fitted `decode_slope_s_per_ktok`, so the growth of the cache is not read as a
  disagreement.

The ratio is generate's median over the module's median. Whether it is **within the noise**
is a two-sided test of the log ratio at `ALPHA`: each side's spread is the sample SD of its
log values pooled over every cell of the run (a module's noise is much the same from cell to
cell, and 2-3 rounds alone give an SD that is often near zero), times 1.253 for a median's
standard error. A side with a single value (old files) borrows the other side's pooled SD.
A ratio outside the noise is a systematic difference between the modules: exactly the kind of
wrong number issue 19 was about, so the report shows it instead of hiding it.

Deliberately not here: rendering (`reports.render`), judging against history (`series`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from reports.analysis.distributions import t_ppf
from reports.history.load import BenchmarkResult, Run

Phase = Literal["prefill", "decode"]
ALPHA = 0.01
#: The band the issue's targets use for "agree" (a reader's tolerance, shown beside the test).
BAND = 0.15
#: Standard error of a median over that of a mean (normal data, large n).
MEDIAN_SE_FACTOR = 1.253
#: A pooled SD below this is taken as this: timers and schedulers are not better than 0.5 %.
MIN_SD = 0.005
TIMES = "\u00d7"  # the escape keeps the source ASCII


@dataclass(frozen=True)
class ConsistencyRow:
    """One cell and phase: the two modules' medians, their ratio and whether it is noise."""

    cell_id: str
    phase: Phase
    module_s: float  # test_prefill's or test_decode's median
    generate_s: float  # the same computation inside test_generate (decode: at context P)
    ratio: float  # generate_s / module_s
    limit_log_ratio: float  # the largest |log ratio| the noise explains at ALPHA
    module_rounds: int
    generate_samples: int

    @property
    def within_noise(self) -> bool:
        """True when the two figures differ by no more than the run's noise explains."""
        return abs(math.log(self.ratio)) <= self.limit_log_ratio

    @property
    def within_band(self) -> bool:
        """True when the ratio is within ±BAND (the tolerance a reader applies)."""
        return abs(self.ratio - 1.0) <= BAND


@dataclass(frozen=True)
class _Pair:
    cell_id: str
    phase: Phase
    module: tuple[float, ...]
    generate: tuple[float, ...]


def _numbers(value: object) -> tuple[float, ...]:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return (float(value),)
    if isinstance(value, list | tuple):
        return tuple(
            float(v)
            for v in value
            if isinstance(v, int | float) and not isinstance(v, bool) and v > 0
        )
    return ()


def _generate_prefill(extra: Mapping[str, object]) -> tuple[float, ...]:
    rounds = _numbers(extra.get("generate_prefill_rounds_s"))
    return rounds if rounds else _numbers(extra.get("generate_prefill_s"))


def _generate_decode_at_p(extra: Mapping[str, object]) -> tuple[float, ...]:
    """Each position's step moved back to context P by the recorded slope (s per 1,000 tokens)."""
    steps = _numbers(extra.get("step_s"))
    if not steps:
        return _numbers(extra.get("step_p50_s"))
    slope = extra.get("decode_slope_s_per_ktok")
    per_token = float(slope) / 1000.0 if isinstance(slope, int | float) else 0.0
    moved = tuple(s - per_token * i for i, s in enumerate(steps))
    return tuple(s for s in moved if s > 0)


def _pairs(run: Run) -> list[_Pair]:
    by_cell: dict[str, dict[str, BenchmarkResult]] = {}
    for bench in run.benchmarks.values():
        measurement = bench.extra.get("measurement")
        key = measurement if isinstance(measurement, str) else bench.group
        by_cell.setdefault(bench.cell_id, {})[key] = bench
    pairs = []
    for cell, benches in sorted(by_cell.items()):
        gen = benches.get("generate")
        if gen is None:
            continue
        sides: tuple[tuple[Phase, tuple[float, ...]], ...] = (
            ("prefill", _generate_prefill(gen.extra)),
            ("decode", _generate_decode_at_p(gen.extra)),
        )
        for phase, generate in sides:
            module = benches.get(phase)
            if module is None or not module.rounds_s or not generate:
                continue
            pairs.append(_Pair(cell, phase, tuple(module.rounds_s), generate))
    return pairs


def _pooled_sd(samples: Sequence[Sequence[float]]) -> tuple[float | None, int]:
    """Pooled SD of log values over samples with at least two values, and its degrees of freedom."""
    squares = 0.0
    df = 0
    for values in samples:
        if len(values) < 2:
            continue
        logs = [math.log(v) for v in values]
        mean = statistics.fmean(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
    if df == 0:
        return None, 0
    return max(math.sqrt(squares / df), MIN_SD), df


def consistency_rows(run: Run, alpha: float = ALPHA) -> list[ConsistencyRow]:
    """One row per cell and phase that two modules of `run` measured (see the module docstring)."""
    pairs = _pairs(run)
    rows = []
    phases: tuple[Phase, ...] = ("prefill", "decode")
    for phase in phases:
        mine = [p for p in pairs if p.phase == phase]
        sd_module, df_module = _pooled_sd([p.module for p in mine])
        sd_generate, df_generate = _pooled_sd([p.generate for p in mine])
        sd_module = sd_module if sd_module is not None else sd_generate
        sd_generate = sd_generate if sd_generate is not None else sd_module
        df = df_module + df_generate
        if sd_module is None or sd_generate is None or df == 0:
            continue  # one value per side in every cell: no noise estimate at all
        quantile = t_ppf(1.0 - alpha / 2.0, df)
        for p in mine:
            se = MEDIAN_SE_FACTOR * math.sqrt(
                sd_module**2 / len(p.module) + sd_generate**2 / len(p.generate)
            )
            module_s = statistics.median(p.module)
            generate_s = statistics.median(p.generate)
            rows.append(
                ConsistencyRow(
                    cell_id=p.cell_id,
                    phase=p.phase,
                    module_s=module_s,
                    generate_s=generate_s,
                    ratio=generate_s / module_s,
                    limit_log_ratio=quantile * se,
                    module_rounds=len(p.module),
                    generate_samples=len(p.generate),
                )
            )
    return sorted(rows, key=lambda r: (r.cell_id, r.phase))


@dataclass(frozen=True)
class ConsistencySummary:
    """The run's consistency in one line: how many pairs agree, and the worst one."""

    rows: int
    within_noise: int
    within_band: int
    worst: ConsistencyRow | None

    @property
    def text(self) -> str:
        """ "14 of 16 within the noise, 16 within ±15 %; furthest: <cell> prefill x1.25"."""
        if not self.rows or self.worst is None:
            return ""
        worst = self.worst
        return (
            f"{self.within_noise} of {self.rows} within the noise, {self.within_band} within "
            f"±{BAND * 100:.0f} %; furthest: {worst.cell_id} {worst.phase} {TIMES}{worst.ratio:.2f}"
        )


def summarize_consistency(rows: Sequence[ConsistencyRow]) -> ConsistencySummary:
    """Counts over `rows` and the row whose ratio is furthest from 1."""
    worst = max(rows, key=lambda r: abs(math.log(r.ratio)), default=None)
    return ConsistencySummary(
        rows=len(rows),
        within_noise=sum(r.within_noise for r in rows),
        within_band=sum(r.within_band for r in rows),
        worst=worst,
    )
