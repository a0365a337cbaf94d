"""The benchmark suite's pytest glue: what turns a matrix into measured, recorded test items.

Owns `rounds` (the stash keys, the progress writer, the record skeleton and `Rounds`, which runs
the timed rounds), `configure` (options, the matrix, the shard, threads), `collect` (cells to
parametrized items, collection-time skips), `warmup` and `peaks` (the per-cell fixtures'
bodies), `partial` (a killed run's finished cells kept), `hostprobe` (the host probes' points
between tests, their records and the CPU probes' worker), `roofline` (a cell's roofline fields),
`tp/` (tensor-parallel cells: the collection-time reasons, the torchrun run per cell, the record
replayed from the ranks' rounds), `interleave` and `groups` (a comparison group's variants timed
in turn, for `test_interleaved`), `oplist` (the operators a profiled step ran) and `vs_optimum`
(`python -m benchmarks.suite.vs_optimum`: the engine against optimum-benchmark's per-token
timing). The test modules and `conftest.py` at
`benchmarks/`' top import from here; nothing in `benchmarks.harness` does (the library never
knows pytest).

May import: benchmarks.harness, benchmarks.calibration, torch, transformers, pytest,
pytest_benchmark, numpy, psutil.
"""
