"""The errors a user can cause, one type per area, each carrying one actionable sentence.

A `PhasebenchError` is an expected failure of *input* (a matrix field, a model file, a device
name): callers print `str(error)` on one line and exit 2, without a traceback. Bugs raise
anything else and keep their traceback.
"""

from __future__ import annotations


class PhasebenchError(Exception):
    """Base of every user-facing error; the message names the file or field and the fix."""


class MatrixError(PhasebenchError):
    """A matrix YAML file is unreadable or invalid."""


class ModelError(PhasebenchError):
    """A model file or checkpoint is missing, unreadable or invalid."""


class DeviceError(PhasebenchError):
    """A device or dtype name is unknown, or the device cannot be used here."""


class EngineError(PhasebenchError):
    """A generation request is invalid (N <= 0, P + N beyond the model's positions, ...)."""


class KVError(PhasebenchError):
    """A cache object or config cannot be accounted for."""


class ServeError(PhasebenchError):
    """A serving input (a rate, a server, a URL) is invalid, or a server cannot be used."""
