"""Tensor-parallel cells on torch.distributed: per-rank bytes, the timing protocol, the workers.

Owns `bytes` (KV per rank by the model's TP plan, weights per rank from the local shards, the
per-rank memory fit), `skips` (which transformers loads TP and how, the collection-time skip
reasons), `timing` (barrier -> sync -> t0 -> call -> sync -> t1 on every rank, the round's time
max(t1) - min(t0) on the ranks' one clock), `rankmemory` (a rank's load and run peaks),
`cpuranks` (CPU ranks see no accelerator: the launcher's environment, the rank's hiding, the
Mac skip), `worker` and `rank` (one torchrun rank: load, assert bytes, time rounds, write its
JSON), `files` (the rank records and stack dumps, written whole) and `launch` (the
parent: the saved random model, torchrun as a child process group with a timeout, no orphan
left, the failure reason). The suite runs them for the matrix's `tp` axis
(`benchmarks/suite/tp/cells.py`, `benchmarks/suite/tp/record.py`): docs/tensor-parallel.md.

May import: benchmarks.harness.errors, benchmarks.harness.device, benchmarks.harness.model,
benchmarks.harness.cache, benchmarks.harness.roofline, benchmarks.harness.engine, torch,
transformers, packaging, psutil.
"""
