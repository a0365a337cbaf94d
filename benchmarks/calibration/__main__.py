"""`python -m benchmarks.calibration` (`nox -s calibrate`): see `benchmarks.calibration.cli`."""

from benchmarks.calibration.cli import main

raise SystemExit(main())
