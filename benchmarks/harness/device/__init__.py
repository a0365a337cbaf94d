"""Devices and the machine: names, synchronisation, timers, memory counters, machine state.

Owns `devices` (device and dtype names, `device_sync`, `timed`, memory monitors, the CPU meter),
`synctimer` (the synchronised clock pytest-benchmark uses), `freemem` (free memory per device,
for the memory fit), `gpuid` (which GPU this is), `cpustate` (CPU load and frequency, other
processes' CPU use), `fpstate` (FTZ/DAZ, pinned per cell), `noise` (warm-up until stable, thread
pinning, thermal state), `fingerprint` (the machine and stack a run is recorded on, the MPS
fallback refusal), `nvml` (a typed NVML wrapper), the energy counters (`rapl`, `powermetrics`,
`energy`), `energyblock` (the block of timed calls energy per token is metered over),
`gpuwindow` (the GPU's throttle time, clocks and power during the rounds), `devstate` (GPU
state and energy around a benchmark's timed rounds) and `proctree` (a process tree remembered as
it is seen and ended whole: tp ranks, serving servers).
The bottom of the library: nothing here knows a model or a cache.

May import: benchmarks.harness.errors, torch, transformers, psutil, pynvml.
"""
