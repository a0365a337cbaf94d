"""`python -m reports ...`: see `reports.cli`."""

from __future__ import annotations

import sys

from reports.cli import main

sys.exit(main())
