"""MLX beside torch (DESIGN §14): mlx-lm's models run by the suite's own loop, fenced with
`mx.eval`, their KV caches' bytes predicted and asserted exactly.

Owns `available` (mlx and mlx-lm here? versions, the install command), `kvrules` (mlx-lm's
KVCache, RotatingKVCache and QuantizedKVCache as arithmetic: each one's growth rule and bytes),
`kvplan` (which cache each layer gets, from the config), `measure` (a real cache's bytes),
`runtime` (devices, dtypes, the fence, the timer, memory counters), `weights` (stored and
predicted weight bytes), `build` (the model: random weights or a checkpoint through mlx-lm's
loader, mlx4 / mlx8 weights), `engine` (the owned loop), `account` (the cell's `KVAccount`),
`roofline`, `loaded` (the built cell the suite measures) and `skip` (collection-time reasons).

mlx is optional: no module imports mlx or mlx_lm at module level; `available` says why a cell
cannot run. The suite reaches this package through `benchmarks.harness.modelcache` (builds)
and `skip` (collection).

May import: benchmarks.harness.errors, benchmarks.harness.records, benchmarks.harness.device,
benchmarks.harness.model, benchmarks.harness.cache, benchmarks.harness.quant,
benchmarks.harness.matrix, benchmarks.harness.roofline, benchmarks.harness.engine, torch,
numpy, mlx, mlx_lm, huggingface_hub.
"""
