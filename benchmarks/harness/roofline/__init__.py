"""Roofline: analytic FLOPs and bytes per phase, the device's peaks, and % of peak.

Owns `roofline` (FLOPs and bytes moved per prefill and decode step, the `extra_info` fields),
`peaks` (a machine's peaks: measured, cached or from the datasheet table), `peakmeasure`
(measuring bandwidth and FLOP/s with torch), `peaktable` (vendor datasheet rows),
`dtypespeed` (which 16-bit dtypes this CPU only emulates) and `fit` (a cell's memory need:
weights + KV + activations, before building).

May import: benchmarks.harness.errors, benchmarks.harness.device, benchmarks.harness.model,
benchmarks.harness.cache, benchmarks.harness.quant, torch, psutil.
"""
