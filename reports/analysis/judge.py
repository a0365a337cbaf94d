"""The suite's judgement: every verdict, the common shift per machine, and the lean test.

`judge(series, config)` is what the report and the gate use; `judge_suite` returns its verdicts
alone. Per machine:

1. Each series gets its provisional evidence (`series.judge_noisy`, `series.judge_exact`),
   the current run carrying the suite-wide run effect's variance in full.
2. The common shift of the machine's primary timings (`shift.estimate_shift`). When it is
   **named** (beyond the baseline's run-effect spread), every timed metric of the machine is
   judged relative to it: its log-ratio less the shift, its variance with the run effect
   replaced by the shift's estimation error. A host that slowed the whole run by 10 % then
   fails nothing; a benchmark that moved beyond the common shift still does. The verdict's note
   says so, and the headline names the shift (`reports.render.report`).
3. Holm over every noisy metric of the suite (`series.apply_holm`).
4. The lean test (`shift.lean_p_value`) over the primary timings that did not fail, their
   residuals taken against the common shift (whether named or not) so that they do not share
   the current run's effect. Only undecided timings add to the statistic: a decided one (a
   `pass` ruled out a slowdown beyond its threshold) counts in m with no lean, which keeps
   the test's level (conservatively). The undecided timings that lean (one-sided p of "no
   slowdown" below `shift.LEAN_LIST_P`) are listed, largest lean first.

Deliberately not here: the noise model, the threshold rule, files and formatting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from reports.analysis import decision
from reports.analysis.levels import MAD_EFFICIENCY
from reports.analysis.metrics import is_timed_metric
from reports.analysis.series import (
    AnalysisConfig,
    MetricSeries,
    Verdict,
    apply_holm,
    judge_exact,
    judge_noisy,
    suite_prior,
)
from reports.analysis.shift import (
    LEAN_ALPHA,
    LEAN_LIST_P,
    SuiteShift,
    estimate_shift,
    lean_p_value,
)


@dataclass(frozen=True)
class Lean:
    """One machine's lean test: its p-value, the timings tested, the undecided ones leaning."""

    machine_id: str
    p_value: float
    timings: int
    leaning: tuple[Verdict, ...]

    @property
    def rejected(self) -> bool:
        """True when the undecided timings lean to a slowdown at `shift.LEAN_ALPHA`."""
        return self.p_value <= LEAN_ALPHA


def leans(v: Verdict) -> bool:
    """An undecided verdict whose own one-sided p of "no slowdown" is below
    `shift.LEAN_LIST_P` (its evidence as judged: against a named shift when there is one)."""
    if v.verdict != "inconclusive" or v.log_ratio is None or not v.se:
        return False
    return decision.p_fail(v.log_ratio, v.se, v.df or math.inf, 0.0) < LEAN_LIST_P


def all_undecided(verdicts: Sequence[Verdict]) -> bool:
    """True when noisy verdicts were compared and every one of them is `inconclusive`."""
    noisy = [v for v in verdicts if v.compared and v.kind != "exact"]
    return bool(noisy) and all(v.verdict == "inconclusive" for v in noisy)


@dataclass(frozen=True)
class SuiteJudgement:
    """Verdicts (input order) plus, per machine, the common shift and the lean test."""

    verdicts: tuple[Verdict, ...]
    shifts: dict[str, SuiteShift]
    leans: dict[str, Lean]

    def outcome(self, threshold: float) -> Literal["fail", "shift", "lean", "undecided", "pass"]:
        """What the headline says of a quiet run (`reports.render.headline`, in its order):
        a fail or missing metric; a named shift that reaches the threshold; a lean; nothing
        decided; else pass."""
        if any(v.verdict in ("fail", "missing") for v in self.verdicts):
            return "fail"
        if any(s.reaches(threshold) for s in self.shifts.values()):
            return "shift"
        if any(lean.rejected for lean in self.leans.values()):
            return "lean"
        return "undecided" if all_undecided(self.verdicts) else "pass"


def _has_evidence(v: Verdict) -> bool:
    return v.log_ratio is not None and v.se is not None


def _residual(v: Verdict, s: MetricSeries, shift: SuiteShift | None) -> tuple[float, float]:
    """(log-ratio, variance) of a timed verdict against the common shift (None: unchanged)."""
    log_ratio, se = v.log_ratio or 0.0, v.se or 0.0
    if shift is None:
        return log_ratio, se * se
    var = max(se * se - s.run_effect_var, 0.0) + shift.estimate_var
    return log_ratio - shift.log_shift, var


def _machine_shift(
    pairs: Sequence[tuple[Verdict, MetricSeries]], config: AnalysisConfig
) -> SuiteShift | None:
    primary = [(v, s) for v, s in pairs if v.kind == "timing" and _has_evidence(v)]
    if not primary:
        return None
    return estimate_shift(
        [v.log_ratio or 0.0 for v, _ in primary],
        [max((v.se or 0.0) ** 2 - s.run_effect_var, 0.0) for v, s in primary],
        max(s.run_effect_var for _, s in primary),
        df=MAD_EFFICIENCY * max(len(s.baseline) for _, s in primary),
        alpha=config.alpha,
        ci_level=config.ci_level,
    )


def _relative(v: Verdict, s: MetricSeries, shift: SuiteShift) -> Verdict:
    # the p-values follow from the evidence in `apply_holm`; only the evidence changes here
    log_ratio, var = _residual(v, s, shift)
    note = f"judged against the suite's common shift {shift.ratio - 1:+.1%}"
    return replace(
        v, log_ratio=log_ratio, se=math.sqrt(var), note="; ".join(n for n in (v.note, note) if n)
    )


def _lean(
    machine: str,
    pairs: Sequence[tuple[Verdict, MetricSeries]],
    shift: SuiteShift | None,
) -> Lean:
    tested: list[tuple[float, float, Verdict]] = []
    for v, s in pairs:
        if v.kind != "timing" or not _has_evidence(v) or v.verdict == "fail":
            continue
        # a named shift is already out of the verdict's evidence (`_relative`)
        log_ratio, var = _residual(v, s, None if shift is None or shift.named else shift)
        if var > 0:
            z = log_ratio / math.sqrt(var)
            # a decided timing hides nothing: it counts toward m but adds no lean (conservative)
            tested.append((z if v.verdict == "inconclusive" else min(z, 0.0), v.df or math.inf, v))
    p = lean_p_value([z for z, _, _ in tested], [df for _, df, _ in tested])
    leaning = sorted(
        ((z, v) for z, _, v in tested if leans(v)),
        key=lambda zv: -zv[0],
    )
    return Lean(machine, p, len(tested), tuple(v for _, v in leaning))


def _by_machine(
    verdicts: Sequence[Verdict], series: Sequence[MetricSeries]
) -> dict[str, list[tuple[Verdict, MetricSeries]]]:
    out: dict[str, list[tuple[Verdict, MetricSeries]]] = {}
    for v, s in zip(verdicts, series, strict=True):
        out.setdefault(v.machine_id, []).append((v, s))
    return out


def judge(series: Sequence[MetricSeries], config: AnalysisConfig) -> SuiteJudgement:
    """The suite's judgement (module docstring)."""
    priors = suite_prior(series, config)
    provisional = [
        judge_exact(s, config)
        if s.kind == "exact"
        else judge_noisy(s, config, priors.get(s.machine_id))
        for s in series
    ]
    shifts = {
        machine: found
        for machine, pairs in _by_machine(provisional, series).items()
        if (found := _machine_shift(pairs, config)) is not None
    }
    adjusted = [
        _relative(v, s, shift)
        if (shift := shifts.get(v.machine_id)) is not None
        and shift.named
        and is_timed_metric(v.metric, v.kind)
        and _has_evidence(v)
        else v
        for v, s in zip(provisional, series, strict=True)
    ]
    verdicts = apply_holm(adjusted, config)
    leans = {
        machine: _lean(machine, pairs, shifts.get(machine))
        for machine, pairs in _by_machine(verdicts, series).items()
    }
    return SuiteJudgement(tuple(verdicts), shifts, leans)


def judge_suite(series: Sequence[MetricSeries], config: AnalysisConfig) -> list[Verdict]:
    """The verdicts of `judge`, in the input order."""
    return list(judge(series, config).verdicts)
