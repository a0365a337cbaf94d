"""`python -m benchmarks.bisect`."""

import sys

from benchmarks.bisect.run import main

sys.exit(main())
