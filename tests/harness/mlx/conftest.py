"""The `mx` fixture: `mlx.core`, or a skip whose reason names what is missing and its fix."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from tests.harness.mlx.mlxskip import REASON


@pytest.fixture(scope="session")
def mx() -> ModuleType:
    """mlx.core (imported only where mlx and mlx-lm import: `available.unavailable_reason`)."""
    if REASON is not None:
        pytest.skip(REASON)
    return importlib.import_module("mlx.core")
