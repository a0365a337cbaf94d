"""KV-cache and recurrent-state accounting: analytic bytes from the config, measured from caches.

Owns `kv` (per-layer KV rules: GQA/MQA, sliding windows, MLA; `analytic_kv`, `measure_kv`),
`state` (the fixed conv/recurrent state of hybrid and SSM models), `static` (the allocated
and used bytes of transformers' `StaticCache`), `quantized` (the `kv_quant` backends of
transformers' `QuantizedCache`: what runs where, the empty start cache), `quantized_kv` (its
stored bytes after the prefill and after every decode step), `quantobuild` (building
quanto's C++ extension before anything is timed) and `point` (`KVAccount`, the protocol the
suite's measurements ask each engine's accounting through, and its `KVPoint`).

May import: benchmarks.harness.errors, torch, transformers, packaging, optimum.quanto.
"""
