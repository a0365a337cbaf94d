"""phasebench's reports: load pytest-benchmark history, judge it against noise, render it.

Owns, lowest first (each imports only the ones before it, docs/architecture.md): `errors` ·
`history` (files -> runs -> current and baseline per machine) · `analysis` (series ->
verdicts, noise, change points, trends; pure) · `render` (the report model, HTML and Markdown
via jinja2) · `ab` (`python -m reports.ab`: paired A/B verdicts) and `cli` (`python -m
reports`) · `scenarios` (the real gate on synthetic histories). It reads JSON only and never
imports torch, transformers or `benchmarks`, so it installs with jinja2 alone.

May import: jinja2, yaml.
"""
