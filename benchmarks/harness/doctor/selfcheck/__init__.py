"""`doctor --self-check`: the first-contact probes, each run in its own process with a timeout.

Owns `run` (the probes, one process each, the verdict; `python -m
benchmarks.harness.doctor.selfcheck PROBE`), `compile` (graph breaks and launches per compiled
decode step), `graphs` (CUDA graphs over two cells), `gpu` (energy counter period, throttle time
under load), `peak` (% of peak on a matrix's biggest cell), `model` (tokens against `generate`,
FA2 against sdpa) and `versions` (the compile probe on other transformers versions, in overlay
environments). They build models and run the engine the suite runs.

May import: benchmarks.harness.errors, benchmarks.harness.records, benchmarks.harness.device,
benchmarks.harness.model, benchmarks.harness.matrix, benchmarks.harness.roofline,
benchmarks.harness.engine, benchmarks.harness.overhead, benchmarks.harness.runmode,
benchmarks.harness.doctor, torch, transformers, psutil, pynvml.
"""
