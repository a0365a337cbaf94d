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

The two modules run at different moments, and on a shared host the machine's level moves
between them (memory bandwidth +-15 % over seconds, level shifts of 20 % lasting tens of
seconds; docs/suite.md, "Rounds and min_timed_s"). Round-to-round spread cannot show that: 40
decode rounds inside 5 s agree closely with each other and still read another moment than
generate's steps. So the run adds a **between-window** term: the robust spread of its log
ratios across cells (1.4826 x MAD, each about its phase's median; both phases pooled, since the
host moves the same for both) less the part the rounds explain, when there are at least
`MIN_ROWS_FOR_WINDOWS` rows. A bias common to every cell
moves the median, not the spread, and is still flagged; one cell far off stands out of the
others' scatter; scatter that moves from cell to cell is the host, and is named
(`ConsistencySummary.window_sd`).

**With host probes** (the run's probe records carry each point's time, and every benchmark
record its `session_window_s`), the between-window term is measured instead of estimated: the
probe level at each figure's window (the mean of the points that bracket it), and the move of
each probe kind between the two figures. A ratio agrees when it lies within the band from no
move to the probes' move (the host may move a computation by as much as the probes moved, or
not at all), widened by the rounds' own spread and the probes' point-to-point noise at
`ALPHA`. The row says whether the probes moved between the two figures (then the host may
explain it) or not (then it is ours to explain).

Deliberately not here: rendering (`reports.render`), judging against history (`series`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from reports.analysis.distributions import t_ppf
from reports.analysis.levels import robust_sd
from reports.analysis.timeline import Timeline, timeline
from reports.history.load import BenchmarkResult, Run

Phase = Literal["prefill", "decode"]
ALPHA = 0.01
#: The band the issue's targets use for "agree" (a reader's tolerance, shown beside the test).
BAND = 0.15
#: Standard error of a median over that of a mean (normal data, large n).
MEDIAN_SE_FACTOR = 1.253
#: A pooled SD below this is taken as this: timers and schedulers are not better than 0.5 %.
MIN_SD = 0.005
#: Rows a phase needs before its cells' scatter estimates the between-window term.
MIN_ROWS_FOR_WINDOWS = 4
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
    window_sd: float = 0.0  # the phase's between-window term in the limit (log units)
    probe_moves: tuple[tuple[str, float], ...] = ()  # (kind, log move) between the two figures
    probe_limit: float = 0.0  # the rounds' spread and the probes' noise at ALPHA (log units)
    host_moved: bool = False  # a probe moved beyond its noise between the two figures

    @property
    def band(self) -> tuple[float, float]:
        """The log ratios the run's noise explains: +-limit, or with probes from no move to
        the probes' move, widened by `probe_limit`."""
        if not self.probe_moves:
            return -self.limit_log_ratio, self.limit_log_ratio
        moves = [m for _, m in self.probe_moves]
        return min(0.0, *moves) - self.probe_limit, max(0.0, *moves) + self.probe_limit

    @property
    def within_noise(self) -> bool:
        """True when the two figures differ by no more than the run's noise (and, with probes,
        the host's measured move between them) explains."""
        low, high = self.band
        return low <= math.log(self.ratio) <= high

    @property
    def allowed_text(self) -> str:
        """ "±12.0 %", or with probes "-3.1 % … +41.0 % (probes)"."""
        if not self.probe_moves:
            return f"±{100 * self.limit_log_ratio:.1f} %"
        low, high = self.band
        return f"{100 * math.expm1(low):+.1f} % … {100 * math.expm1(high):+.1f} % (probes)"

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
    module_window: tuple[float, float] | None = None
    generate_window: tuple[float, float] | None = None


def _window(extra: Mapping[str, object]) -> tuple[float, float] | None:
    """A record's `session_window_s` (seconds since the run began: its test's start and end)."""
    raw = extra.get("session_window_s")
    if isinstance(raw, list) and len(raw) == 2 and all(isinstance(v, int | float) for v in raw):
        return float(raw[0]), float(raw[1])
    return None


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
            pairs.append(
                _Pair(
                    cell,
                    phase,
                    tuple(module.rounds_s),
                    generate,
                    _window(module.extra),
                    _window(gen.extra),
                )
            )
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


@dataclass(frozen=True)
class _Phase:
    """One phase's pairs with what the rounds say: each pair's SE, ratio, and the t quantile."""

    pairs: list[_Pair]
    ses: list[float]
    ratios: list[float]
    quantile: float

    def deviations(self) -> list[float]:
        """Log ratios about the phase's median: a bias common to the phase is not scatter."""
        logs = [math.log(r) for r in self.ratios]
        center = statistics.median(logs)
        return [x - center for x in logs]


def _phase(pairs: list[_Pair], alpha: float) -> _Phase | None:
    sd_module, df_module = _pooled_sd([p.module for p in pairs])
    sd_generate, df_generate = _pooled_sd([p.generate for p in pairs])
    sd_module = sd_module if sd_module is not None else sd_generate
    sd_generate = sd_generate if sd_generate is not None else sd_module
    df = df_module + df_generate
    if sd_module is None or sd_generate is None or df == 0:
        return None  # one value per side in every cell: no noise estimate at all
    ses = [
        MEDIAN_SE_FACTOR
        * math.sqrt(sd_module**2 / len(p.module) + sd_generate**2 / len(p.generate))
        for p in pairs
    ]
    ratios = [statistics.median(p.generate) / statistics.median(p.module) for p in pairs]
    return _Phase(pairs, ses, ratios, t_ppf(1.0 - alpha / 2.0, df))


def consistency_rows(run: Run, alpha: float = ALPHA) -> list[ConsistencyRow]:
    """One row per cell and phase that two modules of `run` measured (see the module docstring)."""
    pairs = _pairs(run)
    host = timeline(run)
    phases = [
        found
        for name in ("prefill", "decode")
        if (found := _phase([p for p in pairs if p.phase == name], alpha)) is not None
    ]
    # One between-window term for the run: the host moves the same for both phases' windows,
    # and a phase alone has only a handful of cells to estimate it from.
    deviations = [d for ph in phases for d in ph.deviations()]
    window = window_sd(deviations, [se for ph in phases for se in ph.ses])
    # Its own t quantile (df = cells - 1): a MAD is less efficient still, so this is lenient.
    window_quantile = t_ppf(1.0 - alpha / 2.0, max(len(deviations) - 1, 1))
    rows = []
    z = t_ppf(1.0 - alpha / 2.0, math.inf)
    for ph in phases:
        for p, se, ratio in zip(ph.pairs, ph.ses, ph.ratios, strict=True):
            probed = _probed(host, p, ph.quantile * se, z)
            rows.append(
                ConsistencyRow(
                    cell_id=p.cell_id,
                    phase=p.phase,
                    module_s=statistics.median(p.module),
                    generate_s=statistics.median(p.generate),
                    ratio=ratio,
                    limit_log_ratio=math.hypot(ph.quantile * se, window_quantile * window),
                    module_rounds=len(p.module),
                    generate_samples=len(p.generate),
                    window_sd=window,
                    **probed,
                )
            )
    return sorted(rows, key=lambda r: (r.cell_id, r.phase))


def _probed(host: Timeline | None, p: _Pair, rounds_limit: float, z: float) -> dict[str, Any]:
    """The probe fields of a row: the kinds' moves between the two windows, the band's widening
    (the rounds' limit and the probes' noise: each level averages two points, so a move's SD is
    a point's), and whether a kind moved beyond its noise."""
    if host is None or p.module_window is None or p.generate_window is None:
        return {}
    moves = host.moves(p.module_window, p.generate_window)
    if not moves:
        return {}
    noise = max(host.noise[k] for k, _ in moves)
    return {
        "probe_moves": tuple(moves),
        "probe_limit": math.hypot(rounds_limit, z * noise),
        "host_moved": any(abs(m) > z * host.noise[k] for k, m in moves),
    }


def window_sd(deviations: Sequence[float], ses: Sequence[float]) -> float:
    """The between-window SD (log units): the robust scatter (`levels.robust_sd`) of the
    rows' log ratios about their phase's median, less the typical part the rounds explain;
    0 with under `MIN_ROWS_FOR_WINDOWS` rows."""
    if len(deviations) < MIN_ROWS_FOR_WINDOWS:
        return 0.0
    scatter = robust_sd(deviations)
    rounds_part = statistics.median(se**2 for se in ses)
    return math.sqrt(max(0.0, scatter**2 - rounds_part))


@dataclass(frozen=True)
class ConsistencySummary:
    """The run's consistency in one line: how many pairs agree, and the worst one."""

    rows: int
    within_noise: int
    within_band: int
    worst: ConsistencyRow | None
    window_sd: float = 0.0  # the run's between-window SD (log units)
    probed: int = 0  # rows whose band the host probes measured
    host_moved: int = 0  # of those, the rows between whose figures a probe moved

    @property
    def text(self) -> str:
        """ "14 of 16 within the noise, 16 within ±15 %; furthest: <cell> prefill x1.25", and
        "; the host's level moved ~6 % between modules" when there is a between-window term."""
        if not self.rows or self.worst is None:
            return ""
        worst = self.worst
        text = (
            f"{self.within_noise} of {self.rows} within the noise, {self.within_band} within "
            f"±{BAND * 100:.0f} %; furthest: {worst.cell_id} {worst.phase} {TIMES}{worst.ratio:.2f}"
        )
        if self.probed:
            moves = ", ".join(f"{k} {TIMES}{math.exp(m):.2f}" for k, m in worst.probe_moves)
            said = "moved" if worst.host_moved else "held"
            text += (
                f" (probes between its two figures: {moves}: the host {said}"
                f"{'' if worst.host_moved else ', so it is ours to explain'}); the host probes "
                f"moved between the two figures of {self.host_moved} of {self.probed} rows"
            )
        elif self.window_sd >= MIN_SD:
            text += f"; the host's level moved ~{self.window_sd * 100:.0f} % between modules"
        return text


def summarize_consistency(rows: Sequence[ConsistencyRow]) -> ConsistencySummary:
    """Counts over `rows` and the row whose ratio is furthest from 1."""
    worst = max(rows, key=lambda r: abs(math.log(r.ratio)), default=None)
    return ConsistencySummary(
        rows=len(rows),
        within_noise=sum(r.within_noise for r in rows),
        within_band=sum(r.within_band for r in rows),
        worst=worst,
        window_sd=max((r.window_sd for r in rows), default=0.0),
        probed=sum(bool(r.probe_moves) for r in rows),
        host_moved=sum(r.host_moved for r in rows),
    )
