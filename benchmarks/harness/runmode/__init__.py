"""How a cell's model runs: attention kernel, cache implementation, torch.compile (DESIGN §9).

Owns `decide` (what this machine can run, building a cell's model, the engine's start cache),
`compiled` (torch.compile as a measurement: compile cost, graph breaks, recompilations) and
`kvlayout` (the KV layout a cell's cache implementation holds, checked against measurement),
`kvaccount` (torch's `cache.point.KVAccount`: what the measurements record and assert) and
`quantcheck` (a quantized cell's accuracy and Linears left dense, measured once at build).

May import: benchmarks.harness.errors, benchmarks.harness.device, benchmarks.harness.model,
benchmarks.harness.cache, benchmarks.harness.quant, benchmarks.harness.matrix,
benchmarks.harness.engine, benchmarks.harness.kvquant, torch, transformers, packaging.
"""
