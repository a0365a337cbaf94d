"""phasebench's measurement library: devices, models, caches, the prefill/decode engine.

Owns, by package, lowest first (each imports only the ones before it, docs/architecture.md):
`errors`, `records` (the JSON edge) · `device` (devices, sync, timers, machine state) · `model`
(building models, transformers compatibility) · `cache` (KV and state accounting), `quant`
(quantized weights: methods, stored and predicted bytes, accuracy) · `roofline`
and `matrix` · `engine` (the owned prefill/decode loop) · `overhead`, `profiling`, `runmode`
(attention/cache/compile per cell), `mlx` (the MLX engine, DESIGN §14), `cellmodel` (the
protocol both engines' built cells implement) · `plan`, `modelcache`, `tp` · `serve` (a server
under load: launcher, load generator, metrics) · `doctor` (is this machine fit to benchmark?) ·
`cli` (`python -m benchmarks.harness`). It never imports pytest, `reports`, the A/B runner or
the calibration (DESIGN §1): the benchmark suite in `benchmarks/test_*.py` drives it.

May import: torch, transformers.
"""
