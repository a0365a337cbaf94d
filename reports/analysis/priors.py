"""What a machine's whole suite lends each of its series: the noise floor and the group loadings.

- `suite_prior`: the run-to-run variance prior per machine, the configured one with the
  machine's typical variance over its timings as its floor (`levels.suite_run_var`), or, when
  most series have a single baseline run, the cross-suite spread of the current-less-baseline
  differences (`levels.cross_suite_run_var`).
- `group_priors`: each (machine, metric) group's pooled loadings on the host probes, toward
  which each member's own are shrunk (`timing_model.group_loadings`).

Deliberately not here: the verdicts that use them (`series`, `judge`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from reports.analysis.levels import (
    common_rounds,
    cross_suite_run_var,
    cross_suite_weight_runs,
    suite_run_var,
)
from reports.analysis.noise_model import Prior, kept_locations
from reports.analysis.series import (
    AnalysisConfig,
    MetricSeries,
    adjusted,
    baseline_start,
    log_location,
    model_inputs,
    verdict_window,
)
from reports.analysis.timing_model import GroupPrior, Levels, group_loadings


def suite_prior(series: Sequence[MetricSeries], config: AnalysisConfig) -> dict[str, Prior]:
    """The prior per machine: the configured one with the machine's noise as its floor.

    Over a machine's timing series, `levels.suite_run_var` of their kept adjusted baseline
    locations; when most series have a single baseline run (a second run of one commit), the
    spread of current-minus-baseline differences across the suite instead
    (`levels.cross_suite_run_var`), worth `cross_suite_weight_runs` runs.
    """
    out: dict[str, Prior] = {}
    for machine in dict.fromkeys(s.machine_id for s in series):
        timings = [
            s for s in series if s.machine_id == machine and s.kind == "timing" and s.baseline
        ]
        per_series = []
        for s in timings:
            if len(s.baseline) >= 2:
                rounds = common_rounds([*s.baseline, *s.current_repeats, s.current or ()])
                # the window the verdict uses
                first, _ = baseline_start(adjusted(s), config, rounds)
                offsets = s.baseline_offsets[first:] if s.baseline_offsets else None
                per_series.append(kept_locations(s.baseline[first:], offsets, rounds))
        floor = suite_run_var(per_series)
        weight = 0.0
        singles = [s for s in timings if len(s.baseline) == 1 and s.current]
        if floor is None and len(singles) > len(per_series):
            diffs = [
                log_location(s.current, r) - log_location(s.baseline[0], r)
                for s in singles
                if s.current and (r := min(len(s.current), len(s.baseline[0])))
            ]
            floor = cross_suite_run_var(diffs)
            weight = cross_suite_weight_runs(len(diffs)) if floor is not None else 0.0
        out[machine] = replace(config.prior, suite_run_var=floor, suite_weight_runs=weight)
    return out


def group_priors(
    series: Sequence[MetricSeries], config: AnalysisConfig
) -> dict[tuple[str, str], GroupPrior]:
    """Each (machine, metric) group's pooled loadings on the host probes (`timing_model`)."""
    members: dict[tuple[str, str], list[tuple[list[float], list[Levels]]]] = {}
    for s in series:
        if s.kind == "exact" or not s.baseline_probes:
            continue
        rounds, first, _ = verdict_window(s, config)
        if (inputs := model_inputs(s, rounds, first)) is not None:
            members.setdefault((s.machine_id, s.metric), []).append(inputs)
    return {
        key: prior for key, found in members.items() if (prior := group_loadings(found)) is not None
    }
