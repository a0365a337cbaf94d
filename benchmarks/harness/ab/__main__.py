"""`python -m benchmarks.harness.ab`: see `benchmarks.harness.ab.run`."""

from benchmarks.harness.ab.run import main

raise SystemExit(main())
