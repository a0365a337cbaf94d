"""`python -m benchmarks.harness.doctor.selfcheck PROBE ...`: one probe in this process."""

import sys

from benchmarks.harness.doctor.selfcheck.run import main

sys.exit(main())
