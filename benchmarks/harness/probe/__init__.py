"""The host probes: fixed, code-independent kernels that measure the machine, never the code.

A run times them at its start, between its test modules and at its end (DESIGN §3, "host
probe records"): a memory-bound copy of a buffer several times the last-level cache and a
compute-bound float32 GEMM of a fixed shape on the CPU, and on CUDA/MPS the device's own copy and
GEMM, synchronized. Nothing in them depends on the code under test (no model, no transformers),
so when they move, the machine moved: the reports credit a benchmark with that move only as far
as they measured it (`reports.analysis.probes`). Nor does the code's process state: the CPU
probes run in a process of their own (`worker`, started early, fixed threads, flush-denormal
off), and every operand is explicitly float32. Owns `kernels` (what is run, sized per device),
`timing` (one probe point: synchronized calls, the median of a few), `worker` (the CPU probes'
process: imports only torch, psutil and this package's kernels) and `client` (the run's handle
on it: start, ask with timeouts, stop). Writing the records and deciding when to probe is the
suite's (`benchmarks/suite/hostprobe.py`).

May import: benchmarks.harness.device, torch, psutil.
"""
