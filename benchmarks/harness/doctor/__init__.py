"""`python -m benchmarks.harness doctor`: is this machine fit to benchmark? (DESIGN §10)

Owns the checks, one module per concern, each a small function returning `Finding`s (a level
ok/warn/bad/skip, a one-line message with the measured figure, and what to do): `findings`
(the finding and the exit status), `cpu` (governor, turbo, SMT, isolated CPUs, load, threads,
FTZ/DAZ), `gpu` (NVML: persistence, ECC, MIG, clocks, power limit, other processes; behind an
injectable reader) and `gpuchecks` (judging those readings), `mps` (the CPU-fallback variable,
low-power mode, power source, thermal limit), `timing` (timer resolution, synced vs unsynced),
`peakcheck` (measured peaks against the datasheet), `report` (lines and JSON) and `run` (the
verb). It reads the machine and never changes it: every fix is printed, none is applied.
`--self-check` adds the first-contact probes, the `selfcheck/` package (its docstring lists
them); they build models and run the engine the suite runs.

May import: benchmarks.harness.errors, benchmarks.harness.records, benchmarks.harness.device,
benchmarks.harness.model, benchmarks.harness.matrix, benchmarks.harness.roofline,
benchmarks.harness.engine, benchmarks.harness.overhead, benchmarks.harness.runmode, torch,
transformers, psutil, pynvml.
"""
