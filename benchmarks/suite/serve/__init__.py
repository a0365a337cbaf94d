"""Serving cells in the suite (DESIGN §13): `cells` (collection-time reasons, the session's
servers, one at a time, and where their logs go), `record` (a cell's load, its passes' record,
the client's overhead against the fake server). The server, the client and the metrics are
`benchmarks.harness.serve`'s (docs/serving.md).

May import: benchmarks.harness, benchmarks.calibration, benchmarks.suite, torch, transformers,
pytest, packaging, psutil.
"""
