"""`python -m benchmarks.ab`: see `benchmarks.ab.run`."""

from benchmarks.ab.run import main

raise SystemExit(main())
