"""The host probes as evidence: how far the machine itself moved, by code that never changes.

Every run records fixed, code-independent kernels (a memory-bound copy, a compute-bound GEMM;
DESIGN §3) at its start, between its tests (when 1 s has passed) and at its end: the run's
probe records, set apart from its benchmarks by `extra_info.host_probe`
(`reports.history.runfile`). Here, per probe kind, on the log scale:

- a run's **probe level** is the median of its probe points (`stats.data`: one value per
  point), leaving out points the suite marked busy (another process took CPU during the probe);
- the **host's move** in the current run is its level (the mean over pooled re-runs) less the
  median level of the baseline runs that have the kind, in the newest segment between the
  levels' own steps (`STEP_REL`: a new machine image inside the baseline is a level, not a
  move; the run effects are centred the same way); its variance is the current points' spread
  over their number plus the baseline median's error (`pi / 2 * spread / runs`);
- the **gain**: how far the baseline runs' suite-wide run effects (`noise_model`) follow the
  probe, a robust slope (Theil-Sen) of run effect on probe level, clipped to [0, 1], with its
  standard error and its upper end `gain_high` (slope + 2 SE, at most 1; 1 when the baseline's
  probes never moved far enough to tell or its run effects are unknown, and the gain then 0).
  What the probe explains leaves the run effect's variance: `residual_var` is the biweight
  midvariance of `e_r - gain * P_r` over those runs (`levels.biweight_var`), with
  `BIWEIGHT_EFFICIENCY x runs` degrees of freedom. Where the host drove the baseline's run
  effects, a steady probe then leaves a small unexplained run effect and a suite-wide move is
  told from the machine sharply.
- the host **moved** (`HostEvidence.named`) when some kind's move lies beyond z of its own
  error and the host's run-to-run spread together. Then, or when the gain is unknown, every
  timing is judged for each attribution of the move (`HostEvidence.banded`); otherwise the run
  effect the probe predicts (`HostMove.adjustment`) is taken out of every timing as a
  covariate.

A kind needs `MIN_PROBE_RUNS` quiet baseline runs and one quiet current run; otherwise it is
not evidence (and a history without probes is judged as `judge` says: machine or code).

A run's probe points in time order, and the level at a benchmark's own window, are
`timeline`'s.

Deliberately not here: the verdicts that use it (`reports.analysis.attribution`), reading the
records (`reports.analysis.metrics`), the kernels (`benchmarks/harness/probe`).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reports.analysis.changepoints import detect_steps
from reports.analysis.levels import BIWEIGHT_EFFICIENCY, biweight_var, robust_sd

#: The smallest point-to-point noise a probe is credited with (log): timers are not better.
MIN_POINT_SD = 0.005

#: Quiet baseline runs a probe kind needs before its move (and the gain) is evidence.
MIN_PROBE_RUNS = 5
#: Below this spread of the baseline's probe levels (log) the gain cannot be told: 1 is used.
MIN_PROBE_SPREAD = 0.002
#: A probe point during which other processes kept this share of the CPUs busy is not trusted
#: (as a benchmark's rounds: `flags.BUSY_CPU_PCT`).
BUSY_SHARE = 0.25
#: The least step in a probe's baseline levels that starts a new segment (`host_move`).
STEP_REL = 0.03
#: The interval of a host move in the report: two-sided 95 %.
Z95 = 1.959963984540054


@dataclass(frozen=True)
class ProbeRun:
    """One run's points of one probe kind: seconds per point, the busy ones already left out."""

    values_s: tuple[float, ...]
    busy_points: int = 0

    @property
    def level(self) -> float | None:
        """The run's log probe level (median of its points), None when no quiet point."""
        if not self.values_s:
            return None
        return math.log(statistics.median(self.values_s))

    @property
    def point_var(self) -> float:
        """The variance of the run's level from its points' spread (log; 0 below 2 points)."""
        if len(self.values_s) < 2:
            return 0.0
        logs = [math.log(v) for v in self.values_s]
        return math.pi / 2.0 * statistics.variance(logs) / len(logs)


@dataclass(frozen=True)
class HostMove:
    """How far the host moved in the current run by one probe kind (log, positive = slower)."""

    kind: str
    log_move: float
    var: float
    runs: int
    gain: float
    gain_high: float
    residual_var: float
    residual_df: float
    run_effect_var: float
    spread_var: float = 0.0
    gain_se: float = 0.0
    gain_known: bool = True
    reference_var: float = 0.0

    @property
    def ratio(self) -> float:
        """The probe's ratio current / baseline (> 1: the host is slower)."""
        return math.exp(self.log_move)

    @property
    def ci_low(self) -> float:
        """Lower end of the ratio's 95 % interval."""
        return math.exp(self.log_move - Z95 * math.sqrt(self.var))

    @property
    def ci_high(self) -> float:
        """Upper end of the ratio's 95 % interval."""
        return math.exp(self.log_move + Z95 * math.sqrt(self.var))

    @property
    def credit(self) -> float:
        """The most of the host's move a benchmark is credited with: `gain_high x log_move`."""
        return self.gain_high * self.log_move

    @property
    def adjustment(self) -> tuple[float, float]:
        """(log, variance) of the run effect the probe predicts for a host within its usual
        spread: `gain x log_move`, with the baseline reference's and the gain's errors (the
        current points' own noise is in `residual_var` already: the baseline runs' residuals
        carry their points' noise too)."""
        return (
            self.gain * self.log_move,
            self.gain**2 * self.reference_var + self.log_move**2 * self.gain_se**2,
        )


def probe_run(values_s: Sequence[float], others_share: Sequence[float | None] = ()) -> ProbeRun:
    """A run's probe points, those during which others used `BUSY_SHARE` of the CPUs or more
    left out (`others_share[i]`: point i's others' share of the machine; None: unknown)."""
    shares = list(others_share) + [None] * (len(values_s) - len(others_share))
    busy = [s is not None and s >= BUSY_SHARE for s in shares[: len(values_s)]]
    kept = tuple(v for v, b in zip(values_s, busy, strict=True) if not b and v > 0)
    return ProbeRun(kept, sum(busy))


def _theil_sen(xs: Sequence[float], ys: Sequence[float]) -> float:
    slopes = [
        (yb - ya) / (xb - xa)
        for (xa, ya), (xb, yb) in itertools.combinations(zip(xs, ys, strict=True), 2)
        if abs(xb - xa) > 1e-12
    ]
    return statistics.median(slopes) if slopes else 0.0


def host_move(
    kind: str,
    baseline: Sequence[ProbeRun | None],
    effects: Sequence[float],
    current: Sequence[ProbeRun],
) -> HostMove | None:
    """The host's move by one probe kind (module docstring), or None when it is no evidence.

    `baseline[r]` is baseline run r's probe (None without one), `effects[r]` its suite-wide run
    effect (log; `noise_model.estimate_run_effects`), `current` the current run and its pooled
    re-runs (each with this kind).
    """
    if len(baseline) != len(effects):
        raise ValueError(f"{len(baseline)} probe runs for {len(effects)} run effects")
    pairs = [
        (level, e)
        for run, e in zip(baseline, effects, strict=True)
        if run is not None and (level := run.level) is not None
    ]
    now = [(level, run.point_var) for run in current if (level := run.level) is not None]
    if len(pairs) < MIN_PROBE_RUNS or not now:
        return None
    levels = [p for p, _ in pairs]
    # Centred per segment between the probe's own steps, like the run effects (a new machine
    # image inside the baseline is a level, not a move): the current run against the newest.
    cuts = [0, *(s.index for s in detect_steps(levels, min_rel_step=STEP_REL)), len(levels)]
    xs = []
    for a, b in itertools.pairwise(cuts):
        middle = statistics.median(levels[a:b])
        xs += [p - middle for p in levels[a:b]]
    centre = statistics.median(levels[cuts[-2] :])
    ys = [e for _, e in pairs]
    spread = robust_sd(xs)
    slope = _theil_sen(xs, ys)
    gain = min(max(slope, 0.0), 1.0)
    residuals = [y - gain * x for x, y in zip(xs, ys, strict=True)]
    resid_var = biweight_var(residuals)
    resid_sd = math.sqrt(resid_var)
    sum_sq = sum(x * x for x in xs)
    if spread < MIN_PROBE_SPREAD or sum_sq <= 0 or biweight_var(ys) <= 0:
        # the baseline's host never moved enough to say how far runs follow it, or the runs'
        # effects are unknown (too few benchmarks to estimate them: all 0)
        gain, gain_se, gain_high, known = 0.0, 0.0, 1.0, False
    else:
        gain_se = resid_sd / math.sqrt(sum_sq)
        gain_high = min(1.0, max(gain, slope + 2.0 * gain_se))
        known = True
    move = statistics.fmean(level for level, _ in now) - centre
    newest = len(levels) - cuts[-2]
    reference_var = math.pi / 2.0 * spread**2 / newest  # the newest segment's median's error
    var = statistics.fmean(v for _, v in now) / len(now) + reference_var
    return HostMove(
        kind=kind,
        log_move=move,
        var=var,
        runs=len(pairs),
        gain=gain,
        gain_high=gain_high,
        residual_var=resid_var,
        residual_df=max(1.0, BIWEIGHT_EFFICIENCY * len(pairs)),
        run_effect_var=biweight_var(ys),
        spread_var=spread**2,
        gain_se=gain_se,
        gain_known=known,
        reference_var=reference_var,
    )


@dataclass(frozen=True)
class HostEvidence:
    """One machine's probe evidence: a move per usable kind, and why a kind is not usable."""

    moves: tuple[HostMove, ...]
    notes: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """True when at least one probe kind measured the host's move."""
        return bool(self.moves)

    @property
    def best(self) -> HostMove:
        """The kind that explains the baseline's run effects best (the smallest residual)."""
        return min(self.moves, key=lambda m: m.residual_var)

    def named(self, z: float) -> bool:
        """True when some kind's move lies beyond `z` standard deviations of the host's own
        run-to-run spread and the move's error: the host moved, not just strayed as it does."""
        return bool(self.beyond(z))

    def beyond(self, z: float) -> tuple[str, ...]:
        """The kinds whose move lies beyond `z` of their own error and the host's usual spread
        (`named`): a timing's own model is not trusted to credit their part (`attribution`)."""
        return tuple(
            m.kind for m in self.moves if abs(m.log_move) > z * math.sqrt(m.var + m.spread_var)
        )

    def banded(self, z: float) -> bool:
        """Whether timings are judged for every attribution of the probes' move (the host
        moved, or how far runs follow the best probe is unknown), not adjusted by its gain."""
        return self.named(z) or not self.best.gain_known

    def measured(self, z: float) -> bool:
        """True when some kind's move lies beyond `z` of its own error: the probes moved."""
        return any(abs(m.log_move) > z * math.sqrt(m.var) for m in self.moves)

    def text(self) -> str:
        """ "memory x1.10 (1.07 … 1.13), compute x1.01 (0.99 … 1.03)" """
        return ", ".join(
            f"{m.kind} \u00d7{m.ratio:.2f} ({m.ci_low:.2f} \u2026 {m.ci_high:.2f})"
            for m in self.moves
        )


def host_evidence(
    baseline: Sequence[Mapping[str, ProbeRun]],
    effects: Sequence[float],
    current: Sequence[Mapping[str, ProbeRun]],
) -> HostEvidence:
    """Every kind's `host_move` (kinds of the current run, sorted), and notes for the unusable.

    `baseline` and `effects` align with the comparison's baseline runs; `current` holds the
    current run and its pooled re-runs.
    """
    kinds = sorted({k for run in current for k in run})
    moves: list[HostMove] = []
    notes: list[str] = []
    for kind in kinds:
        now = [run[kind] for run in current if kind in run]
        if all(p.level is None for p in now):
            notes.append(f"{kind}: every probe point of the current run was busy")
            continue
        found = host_move(kind, [run.get(kind) for run in baseline], effects, now)
        if found is None:
            have = sum(1 for run in baseline if (p := run.get(kind)) and p.level is not None)
            notes.append(
                f"{kind}: {have} quiet baseline run(s) with the probe, {MIN_PROBE_RUNS} needed"
            )
        else:
            moves.append(found)
    return HostEvidence(tuple(moves), tuple(notes))
