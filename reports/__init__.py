"""phasebench's reports: load pytest-benchmark history, judge it against noise, render it.

Stages (each a module, passing frozen values forward): `history` (files -> runs -> current and
baseline per machine), `metrics` (runs -> series), `analysis` (series -> verdicts; pure),
`changepoints` (steps in a series; pure), `report` (everything the outputs show), `render`
(HTML and Markdown via jinja2), `cli` (`python -m reports`). It reads JSON only and never
imports torch or transformers, so it installs with jinja2 alone.
"""
