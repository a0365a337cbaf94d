"""The gate's machine-readable output (DESIGN §6): `verdict_json` of a `Report`.

Schema 1 (fields are added, never changed): `status`, `status_reason`, `counts`,
`benchmarks[]` (per benchmark and metric: `fullname`, `metric`, `verdict`, `ratio`, interval,
p-values, `mde`, ...), the skipped and suspect files, stale machines, `machines[]` (per machine:
baseline rule, stack change, busy share, `shift`: what its timings were judged against, the
host probes' ratios, the suite's common move and the group moves with the suite-wide MDE;
`lean`: the calibrated lean test; drift), and `config`.

Deliberately not here: judging (`analysis`), HTML and Markdown (`html`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from reports.analysis.flags import implausible
from reports.analysis.judge import Attribution
from reports.analysis.series import Verdict
from reports.render.report import Report


def verdict_json(report: Report) -> dict[str, Any]:
    """The gate's machine-readable output (DESIGN §6)."""
    benchmarks: list[dict[str, Any]] = []
    for machine in report.machines:
        for v in machine.verdicts:
            benchmarks.append(
                {
                    "machine_id": v.machine_id,
                    "machine": machine.label,
                    "fullname": v.fullname,
                    "metric": v.metric,
                    "kind": v.kind,
                    "verdict": v.verdict,
                    "ratio": v.ratio,
                    "ci_low": v.ci_low,
                    "ci_high": v.ci_high,
                    "p_value": v.p_value,
                    "p_adjusted": v.p_adjusted,
                    "p_improved": v.p_improved,
                    "mde": v.mde,
                    "threshold": v.threshold,
                    "baseline_value": v.baseline_value,
                    "current_value": v.current_value,
                    "baseline_runs": v.baseline_runs,
                    "between_run_cv": v.between_cv,
                    "within_run_cv": v.within_cv,
                    "note": v.note,
                    "stack_change": v.stack_change,
                    "implausible": implausible(v),
                }
            )
    return {
        "schema": 1,
        "status": report.status,
        "status_reason": report.status_reason,
        "counts": dict(report.counts),
        "benchmarks": benchmarks,
        "skipped_files": [{"path": s.path, "reason": s.reason} for s in report.skipped],
        "suspect_current_files": list(report.suspect_current),
        "stale_machines": [{"machine_id": m, "reason": r} for m, r in report.stale],
        "machines": [
            {
                "machine_id": m.machine_id,
                "machine": m.label,
                "current_commit": m.current.commit_id,
                "partial": m.partial,
                "baseline_rule": m.baseline_rule,
                "stack_change": [
                    {"field": c.key, "baseline": c.baseline, "current": c.current}
                    for c in m.stack_change
                ],
                "removed_cells": list(m.removed),
                "busy_cpu_pct": m.busy_cpu_pct,
                "accuracy_flags": [asdict(a) for a in m.accuracy_flags],  # additive, as below
                # additive fields (schema 1 readers ignore them): machine or code, the lean
                "shift": shift_json(m.shift),
                "lean": None
                if m.lean is None
                else {
                    "p_value": m.lean.p_value,
                    "rejected": m.lean.rejected,
                    "timings": m.lean.timings,
                    "calibration_runs": m.lean.runs,
                    "leaning": [[v.fullname, v.metric] for v in m.lean.leaning],
                },
                "suite_drift": m.suite_drift,
                "drift": [
                    {
                        "fullname": d.fullname,
                        "metric": d.metric,
                        "rel_change": d.drift.rel_change,
                        "slope_per_run": d.drift.slope_per_run,
                        "runs": d.drift.runs,
                        "since_commit": d.since_commit,
                    }
                    for d in m.drifts
                ],
            }
            for m in report.machines
        ],
        "config": _config_json(report),
    }


def _group_json(g: Verdict) -> dict[str, Any]:
    return {
        "group": g.fullname,
        "metric": g.metric,
        "verdict": g.verdict,
        "ratio": g.ratio,
        "ci_low": g.ci_low,
        "ci_high": g.ci_high,
        "p_adjusted": g.p_adjusted,
        "mde": g.mde,
        "machine_or_code": g.attributed,
    }


def shift_json(shift: Attribution | None) -> dict[str, Any] | None:
    """`machines[].shift`: what the machine's timings were judged against (DESIGN §6)."""
    if shift is None:
        return None
    common = shift.common
    host = shift.host
    return {
        "mode": shift.mode,  # probes | common | none: what the attributions credited
        "named": shift.named,
        "ratio": None if common is None else common.ratio,  # the suite's common move
        "ci_low": None if common is None else common.ci_low,
        "ci_high": None if common is None else common.ci_high,
        "common_named": bool(common and common.named),
        "timings": None if common is None else common.timings,
        "run_effect_cv": shift.run_term**0.5,
        "rerun_correlation": shift.rho,
        "probes": None
        if host is None
        else {
            "moved": shift.host_named,
            "kinds": [
                {
                    "kind": m.kind,
                    "ratio": m.ratio,
                    "ci_low": m.ci_low,
                    "ci_high": m.ci_high,
                    "baseline_runs": m.runs,
                    "gain": m.gain,
                    "gain_high": m.gain_high,
                    "residual_cv": m.residual_var**0.5,
                }
                for m in host.moves
            ],
            "notes": list(host.notes),
        },
        "groups": [_group_json(g) for g in shift.groups],
        "mde_suite_wide": None if shift.suite is None else shift.suite.mde,
    }


def _config_json(report: Report) -> Mapping[str, Any]:
    c = report.config
    return {
        "base_branch": report.base_branch,
        "threshold": c.threshold,
        "per_metric_threshold": dict(c.per_metric),
        "alpha": c.alpha,
        "rule": (
            "fail: one-sided t test of worse-ratio <= 1 + threshold rejected at Holm-adjusted "
            "p <= alpha over every noisy metric of the suite"
        ),
        "ci_level": c.ci_level,
        "power": c.power,
        "prior_run_cv": c.prior_run_cv,
    }
