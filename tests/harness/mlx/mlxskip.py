"""The skip mark of tests that run mlx: the reason names what is missing and how to install it
(on transformers 4.x, mlx-lm 0.32 cannot import: the reason says so)."""

from __future__ import annotations

import pytest

from benchmarks.harness.mlx.available import unavailable_reason

REASON = unavailable_reason()
needs_mlx = pytest.mark.skipif(REASON is not None, reason=REASON or "")
