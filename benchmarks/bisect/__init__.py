"""Bisection: which commit of a range made a timing slower, by paired A/B (docs/bisect.md).

Owns `commits` (the range: first-parent commits, or a package's releases), `run` (`python -m
benchmarks.bisect`, `nox -s bisect`: the scan, each comparison an A/B run of one cell, the
search), `profile` (the culprit and its parent op by op) and `output` (`bisect.json`,
`summary.md`, `index.html`). The search and its error budget are pure and live
in `reports.analysis.bisection`; every comparison is an A/B run (`benchmarks.ab`).

Release order is PEP 440's (`packaging`, a dependency of transformers and pip).

May import: benchmarks.ab, benchmarks.harness, reports.analysis, packaging, yaml.
"""
