"""phasebench's measurement library: devices, models, the prefill/decode engine, KV accounting.

It imports torch and transformers, never pytest and never `reports` (DESIGN §1): the benchmark
suite in `benchmarks/test_*.py` drives it, and `python -m benchmarks.harness` exposes its CLI.
"""
