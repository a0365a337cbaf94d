"""The phasebench benchmark suite, and the packages it drives.

Owns the suite: `conftest.py` (options, collection, the per-cell fixtures), `suite.py` (rounds,
cells, progress), `collect.py`/`configure.py` (the matrix turned into test items), the fixtures
(`fixtures_peaks.py`, `fixtures_warmup.py`) and one test module per measurement (`test_*.py`).
Below it: `harness` (the measurement library), `ab` (the A/B runner) and `calibration`.

May import: benchmarks.harness, benchmarks.calibration, torch, transformers, pytest,
pytest_benchmark.
"""
