"""Tensor-parallel cells in the suite: `cells` (collection-time reasons, one torchrun per cell
before any timer, `TPRun`), `record` (the ranks' rounds replayed into the prefill and decode
records, per-rank bytes), `roofline` (one rank's FLOPs and bytes). The ranks themselves are
`benchmarks.harness.tp`'s (docs/tensor-parallel.md).

May import: benchmarks.harness, benchmarks.suite, torch, transformers, pytest, pytest_benchmark.
"""
