"""Analysis: runs -> metric series -> verdicts. Pure functions, tested on synthetic series.

Owns `metrics` (which metrics a benchmark has, as series), `series` (the verdict of a series),
`judge` (the suite's judgement: verdicts, the common shift, the lean test), `shift` (the
common shift and the lean test on plain numbers), `headline_rows` (the issue-28 rows),
`decision` (the threshold rule, Holm, the MDE), `distributions`, `noise_model` (run-to-run
noise learnt from the baseline), `levels` (a run's location, the outlier rule for
both sides, main's short new level, the machine's noise floor), `flags` (busy machine,
implausible changes, drift), `accuracy` (a quantized cell's accuracy and its flag), `paired`
(A/B paired ratios and their checks), `changepoints`, `trends`, `consistency` (one computation
timed by two modules), `thresholds` (`--threshold` values), `simulate` (the rule on simulated
suites) and `robustness` (the issue-17 rows: heavy tails, few rounds, recent step, recurring
state, drift).

May import: reports.errors, reports.history.
"""
