"""The benchmark matrix: its YAML file, its fields and axes, and its cells; sharding.

Owns `cells` (`load_matrix`, `Cell`, `Matrix`), `fields` (per-field validation), `axes` (the
run-mode axes: attention, cache, compile), `serving` (the serving axes, DESIGN §13) and `shard`
(`--shard i/n` and the GPU per worker).
A broken matrix fails here, in milliseconds, before anything is built (the `quant` axis's values
come from the torch-free `quant.names`).

May import: benchmarks.harness.errors, benchmarks.harness.model, benchmarks.harness.quant.names,
yaml.
"""
