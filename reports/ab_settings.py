"""Which settings judge an A/B run: the ones the run recorded, or this checkout's own.

`python -m benchmarks.ab` records its judging settings in `context.json` (`judge`: `threshold`,
`alpha`, `process_cv`) beside how it interleaved the sides (`interleave`), so that re-judging a
finished run (`python -m reports.ab --out DIR`) judges it as the run did: `recorded`, the
default, for a user's own runs.

The CI gate re-judges each shard from its raw JSON with the base's code, but that shard's
`context.json` was written on the runner where the PR's code ran (its model files, its
dependencies, the head checkout's Stage step): a line there could loosen the base's judge until
any regression passes. `own` never reads a setting from the file: the flags, else this
checkout's defaults, and rounds interleaving (the run-level term of process interleaving widens
every interval). The file is still shown (`context`, its settings under `context.recorded`), and
each recorded setting that differs from the one used is named in `notes`, never obeyed.

Deliberately not here: judging (`reports.ab`), the formulas (`reports.analysis`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports.analysis.decision import RuleConfig
from reports.analysis.paired import PROCESS_CV, PROCESS_INTERLEAVE_CV
from reports.analysis.thresholds import parse_thresholds
from reports.errors import ReportError

DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = RuleConfig.alpha
MODES = ("recorded", "own")
OWN_INTERLEAVE = "rounds"
# Written by the judge from the verdicts; a copy in the file it reads is never taken back.
COMPUTED = ("process_term", "process_shift", "machine")


@dataclass(frozen=True)
class Settings:
    """What the verdicts are judged with, and the context they are shown with."""

    threshold: float = DEFAULT_THRESHOLD
    per_metric: dict[str, float] = field(default_factory=dict)
    alpha: float = DEFAULT_ALPHA
    process_cv: float = PROCESS_CV
    raised: str = ""  # why the process term was raised above the one asked, or ""
    context: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # `own`: the recorded settings that differ, not used


def read_context(path: Path) -> dict[str, Any]:
    """`context.json` as an object ({} when there is none); ReportError when unreadable."""
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path} is not readable JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ReportError(f"{path}: expected a JSON object")
    return raw


def recorded_settings(context: Mapping[str, Any]) -> dict[str, Any]:
    """The judging settings the A/B run recorded (`context.json` "judge"), for re-judging."""
    judge = context.get("judge")
    return dict(judge) if isinstance(judge, dict) else {}


def process_term(requested: float | None, context: Mapping[str, Any]) -> tuple[float, str]:
    """The process term to use and, when it was raised, why.

    Order: the flag, else the run's recorded setting, else `PROCESS_CV`. A process-interleaved
    run (`context.interleave == "process"`: one side's process, then the other's) compares two
    whole-run states, so its term is at least `PROCESS_INTERLEAVE_CV`, whatever was asked.
    """
    recorded = recorded_settings(context).get("process_cv")
    value = requested if requested is not None else recorded
    cv = PROCESS_CV
    if isinstance(value, int | float) and not isinstance(value, bool):
        cv = float(value)
    if context.get("interleave") == "process" and cv < PROCESS_INTERLEAVE_CV:
        return PROCESS_INTERLEAVE_CV, (
            f"process interleave: run-level term {PROCESS_INTERLEAVE_CV:.0%} (asked {cv:.1%})"
        )
    return cv, ""


def _resolve(
    thresholds: Sequence[str],
    alpha: float | None,
    process_cv: float | None,
    context: dict[str, Any],
) -> Settings:
    """The settings of `context` (its recorded ones where no flag is given); ReportError."""
    recorded = recorded_settings(context)
    listed = recorded.get("threshold", [])
    if not thresholds and not isinstance(listed, list):
        raise ReportError(f"context.json: judge.threshold {listed!r} is not a list")
    default, per_metric = parse_thresholds(thresholds or [str(t) for t in listed])
    if alpha is None:
        value = recorded.get("alpha", DEFAULT_ALPHA)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ReportError(f"context.json: judge.alpha {value!r} is not a number")
        alpha = float(value)
    if not 0.0 < alpha < 1.0:
        raise ReportError(f"--alpha {alpha} is out of range: use 0 < alpha < 1, e.g. 0.01")
    cv, raised = process_term(process_cv, context)
    if not 0.0 <= cv < 1.0:
        raise ReportError(f"--process-cv {cv}: use 0 <= value < 1, e.g. 0.01")
    threshold = DEFAULT_THRESHOLD if default is None else default
    return Settings(threshold, per_metric, alpha, cv, raised, context)


def _shown(value: Any) -> str:
    """A recorded value as a short, inert text (it comes from the measured machine)."""
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def differences(recorded: Mapping[str, Any], used: Settings) -> tuple[str, ...]:
    """Each setting the recorded context would have judged with that `used` does not."""
    try:
        theirs = _resolve([], None, None, dict(recorded))
    except ReportError as exc:
        return (f"the recorded settings are unreadable ({exc}); shown, not used",)
    notes = []
    pairs = (
        ("threshold", theirs.threshold, used.threshold),
        ("per-metric thresholds", theirs.per_metric, used.per_metric),
        ("alpha", theirs.alpha, used.alpha),
        ("process term", theirs.process_cv, used.process_cv),
        ("interleave", recorded.get("interleave", OWN_INTERLEAVE), OWN_INTERLEAVE),
    )
    for name, mine, judged in pairs:
        if mine != judged:
            notes.append(f"{name}: recorded {_shown(mine)}, judged with {_shown(judged)}")
    extra = sorted(set(recorded_settings(recorded)) - {"threshold", "alpha", "process_cv"})
    if extra:
        notes.append(f"unknown recorded setting(s) {_shown(extra)}: not used")
    return tuple(notes)


def resolve(
    mode: str,
    thresholds: Sequence[str],
    alpha: float | None,
    process_cv: float | None,
    context: Mapping[str, Any],
) -> Settings:
    """The settings to judge with in `mode` (`MODES`); ReportError for an unusable value.

    `recorded`: the flags, else the run's recorded settings, else the defaults. `own`: the
    flags, else the defaults; `context` is shown without its settings or what the judge
    computes, and each of its settings that differs is in `notes`.
    """
    if mode not in MODES:
        raise ReportError(f"--settings {mode!r}: use one of {', '.join(MODES)}")
    if mode == "recorded":
        return _resolve(thresholds, alpha, process_cv, dict(context))
    shown = {k: v for k, v in context.items() if k not in (*COMPUTED, "judge", "interleave")}
    shown["recorded"] = {k: context[k] for k in ("judge", "interleave") if k in context}
    shown["interleave"] = OWN_INTERLEAVE
    used = _resolve(thresholds, DEFAULT_ALPHA if alpha is None else alpha, process_cv, shown)
    shown["judge"] = {
        "threshold": list(thresholds),
        "alpha": used.alpha,
        "process_cv": used.process_cv,
    }
    return Settings(
        used.threshold,
        used.per_metric,
        used.alpha,
        used.process_cv,
        used.raised,
        shown,
        differences(context, used),
    )
