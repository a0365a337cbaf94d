"""KV-cache and recurrent-state accounting: analytic bytes from the config, measured from caches.

Owns `kv` (per-layer KV rules: GQA/MQA, sliding windows, MLA; `analytic_kv`, `measure_kv`),
`state` (the fixed conv/recurrent state of hybrid and SSM models), `static` (the allocated
and used bytes of transformers' `StaticCache`) and `point` (`KVAccount`, the protocol the
suite's measurements ask each engine's accounting through, and its `KVPoint`). Quantized caches
are `benchmarks.harness.kvquant`.

May import: benchmarks.harness.errors, torch, transformers, packaging, optimum.quanto.
"""
