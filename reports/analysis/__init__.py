"""Analysis: runs -> metric series -> verdicts. Pure functions, tested on synthetic series.

Owns `metrics` (which metrics a benchmark has, as series; a run's probe records as the host's
evidence, each benchmark's probe levels at its own window), `series` (the verdict of a series),
`exact` (byte counts compared exactly), `judge` (the suite's judgement: verdicts, machine or
code, the lean, PASS only over decided timings), `priors` (the suite's noise floor and group
loadings), machine or code in its reading order (`attribution`: `timing_model` each timing's own
loadings on the probes, with `smallmatrix`; `evidence` its attributions; `groups` the group
moves), `probes` (the host probes' move over runs), `timeline` (a run's probe points in time,
the level at a window), `lean` (the lean, calibrated by leave-one-run-out), `tails` (Student t
degrees of freedom per side), `shift` (the suite's common move), `headline_rows` (the issue-28
rows), `worlds`, `factor_worlds` and `gate_rows` (the issue-41 and issue-51 synthetic hosts and
their rows), `decision` (the threshold rule, weighted Holm, the MDE, attributions, tails),
`distributions`, `noise_model` (run-to-run noise learnt from the baseline), `levels` (a run's
location, the outlier rule for both sides, main's short new level, the machine's noise floor),
`flags` (busy machine, implausible changes, drift), `accuracy` (a quantized cell's accuracy and
its flag), `paired` (A/B paired ratios and their checks), `bisection` (which commit: the search
by paired comparisons) with `bisect_world` (its simulated ranges), `changepoints`, `trends`,
`consistency` (one computation timed by two modules), `thresholds` (`--threshold` values),
`simulate` (the rule on simulated suites) and `robustness` (the issue-17 rows: heavy tails, few
rounds, recent step, recurring state, drift).

May import: reports.errors, reports.history.
"""
