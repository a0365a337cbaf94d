"""The phasebench benchmark suite, and the packages it drives.

Owns the suite: `conftest.py` (options, collection, the per-cell fixtures) and one test module
per measurement (`test_*.py`); their pytest glue is the `suite/` package. Below it: `harness`
(the measurement library), `ab` (the A/B runner) and `calibration`.

May import: benchmarks.harness, benchmarks.calibration, torch, transformers, pytest,
pytest_benchmark.
"""
