"""Quantized KV caches (the `kv_quant` axis): one place for everything about them.

Owns `backends` (transformers' `QuantizedCache` backends: what runs where, the collection-time
reasons, the empty start cache), `kvbytes` (the stored bytes after the prefill and after every
decode step, exact, and the roofline estimates), `quantobuild` (building quanto's C++ extension
before anything is timed), `quantizetime` (where a backend's quantization time goes: the
prefill and each flush, measured untimed) and `report` (the `kv --kv-quant` CLI's timeline,
analytic and measured). Dense KV accounting is `cache`; quantized weights are `quant`.

It sits above the engine (the CLI's measured timeline runs it) and below `runmode`, which
builds a cell's start cache from `backends` and its expected layout from `kvbytes`.

May import: benchmarks.harness.errors, benchmarks.harness.device, benchmarks.harness.model,
benchmarks.harness.cache, benchmarks.harness.quant, benchmarks.harness.engine, torch,
transformers, packaging, optimum.quanto.
"""
