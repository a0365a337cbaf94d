"""Analysis: runs -> metric series -> verdicts. Pure functions, tested on synthetic series.

Owns `metrics` (which metrics a benchmark has, as series), `series` (the verdict of a series:
`judge_suite`), `decision` (the threshold rule, Holm, the MDE), `distributions`, `noise_model`
(run-to-run noise learnt from the baseline), `paired` (A/B paired ratios), `changepoints`,
`trends`, `thresholds` (`--threshold` values) and `simulate` (the rule on simulated suites).

May import: reports.errors, reports.history.
"""
