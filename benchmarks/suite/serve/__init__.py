"""Serving cells in the suite (DESIGN §13): `cells` (collection-time reasons, the session's
servers, one at a time, checked alive, failed for good when hung or dead, and where their logs
go), `load` (a cell's load, workload and timeouts), `passes` (the first request alone, each
pass checked before the next, the per-request export, the error verdict), `sla` (a capacity
cell's searches), `record` (its passes' record, the client's overhead against the fake
server). The server, the client and the metrics are
`benchmarks.harness.serve`'s (docs/serving.md).

May import: benchmarks.harness, benchmarks.calibration, benchmarks.suite, torch, transformers,
pytest, packaging, psutil.
"""
