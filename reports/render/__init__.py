"""Render: everything a reader sees, as one self-contained HTML page and Markdown.

Owns `report` (the report model built from history and verdicts), `headline` (the status, its
reason and the lines for a human), `tables` (the "now" table, change grid, KV table),
`roofline`, `runmode` (run-mode comparison tables), `quant` (the quantization view), `serve`
(latency against request rate), `capacity` (capacity within the SLOs: latency against offered
rate per capacity cell), `pareto` (throughput per user against total throughput across the
servers), `svgplot` (the small inline-SVG plotting both use), `html`
(the page, the summary), `gate` (the gate's lines and exit code), `gatejson` (the gate JSON),
`ab` (the A/B page) and the jinja2 `templates/` and
`static/` assets (uPlot, CSS, JS) inlined into the page.

May import: reports.errors, reports.history, reports.analysis, jinja2.
"""
