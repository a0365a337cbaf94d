"""Calibration: how often the gate cries wolf on this machine, and what it catches.

Owns `slowdown` (the `PHASEBENCH_CALIBRATION_SLOWDOWN` knob the suite applies to its timed
rounds), `analysis` (pure: verdict JSON -> false-alarm rate, detection, MDE), `run` (history
mode: the matrix K times unchanged and M times slowed), `ab` (the same with A/B runs),
`accuracy_bounds` (the deviations behind the quantization accuracy bounds) and `cli`
(`python -m benchmarks.calibration`, `nox -s calibrate`). It judges nothing itself: `reports`
runs as a subprocess.

May import: benchmarks.harness, benchmarks.ab, torch.
"""
