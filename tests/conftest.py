"""Fixtures every test of the suite's own gets.

Under `nox -s tests` the tests run on pytest-xdist workers, whose `PYTEST_XDIST_*` variables a
child process inherits; a benchmark run started from a test (pytester, subprocess, A/B,
calibration) would then believe it is an xdist worker, and pytest-benchmark turns itself off
there and records nothing. The whole session therefore runs without them (session scope, so
that module-scoped fixtures which start runs are covered too).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _not_an_xdist_worker() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name in [k for k in os.environ if k.startswith("PYTEST_XDIST_")]:
            patch.delenv(name)
        yield
