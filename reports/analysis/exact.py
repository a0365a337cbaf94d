"""Deterministic metrics (KV bytes, weights bytes): the current value against the last baseline
value, exactly; larger fails, smaller is improved, equal passes (`judge_exact`).

Deliberately not here: the noisy metrics' rule (`series`, `decision`).
"""

from __future__ import annotations

from dataclasses import replace

from reports.analysis.series import AnalysisConfig, MetricSeries, Verdict


def exact_change_text(delta: float) -> str:
    """An exact metric's change for a note: whole bytes, or the fraction a per-token figure has."""
    size = abs(delta)
    return f"{size:,.0f}" if float(size).is_integer() else f"{size:,.6g}"


def judge_exact(series: MetricSeries, config: AnalysisConfig) -> Verdict:
    """Deterministic metric: the current value against the last baseline value, exactly.

    Larger = `fail`, smaller = `improved` (lower is better for bytes), equal = `pass`; the note
    says by how many units it changed.
    """
    threshold = config.threshold_for(series.metric)
    v = Verdict(series.machine_id, series.fullname, series.metric, "exact", "new", threshold)
    last = series.baseline[-1][-1] if series.baseline else None
    cur = series.current[-1] if series.current else None
    if last is None:
        if cur is None:
            return replace(v, verdict="missing")
        return replace(v, current_value=cur, note="no baseline value")
    v = replace(v, baseline_value=last, baseline_runs=len(series.baseline))
    if cur is None:
        return replace(v, verdict="missing")
    v = replace(v, current_value=cur, ratio=cur / last if last else None)
    if cur == last:
        return replace(v, verdict="pass", note="unchanged")
    grew = cur > last
    return replace(
        v,
        verdict="fail" if grew else "improved",
        note=f"{'grew' if grew else 'shrank'} by {exact_change_text(cur - last)} (exact "
        "comparison)",
    )
