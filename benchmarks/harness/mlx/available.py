"""Whether MLX can run here: mlx and mlx-lm importable, their versions, the install command.

mlx is optional (pyproject's `mlx` dependency group): nothing in `benchmarks.harness` imports it
at module level, and a cell with `engine: mlx` on a machine without it is skipped at collection
with `INSTALL` as the fix. mlx-lm 0.32.2 declares transformers >= 5.7 (pip will not install it
beside 4.x) and imports transformers when it is imported: if that import fails, the reason says
so, naming the requirement.

It deliberately does not build or run anything.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import sys

# What the `mlx` dependency group holds (pyproject.toml): mlx itself (Metal on Apple silicon,
# `mlx[cpu]` on Linux) and mlx-lm, pinned: an mlx-lm upgrade changes model files and cache
# rules, so it is a reviewed change (and a stack change in history: `versions`).
MLX_VERSION = "0.32.4"
MLX_LM_VERSION = "0.32.2"
_MLX = "mlx[cpu]" if sys.platform.startswith("linux") else "mlx"
INSTALL = (
    f"pip install --group mlx from the repository root, i.e. pip install '{_MLX}=={MLX_VERSION}' "
    f"'mlx-lm=={MLX_LM_VERSION}'; nox -s bench-cpu-mlx and bench-mps install them"
)
DISTRIBUTIONS = {"mlx": "mlx", "mlx_lm": "mlx-lm"}


@functools.cache
def unavailable_reason() -> str | None:
    """Why MLX cells cannot run in this interpreter (one line with the fix), or None.

    Imports mlx-lm's cache module once (seconds: it imports transformers) to be sure it loads.
    """
    missing = [dist for module, dist in DISTRIBUTIONS.items() if not _has(module)]
    if missing:
        return f"engine mlx needs {' and '.join(missing)}, not installed here ({INSTALL})"
    try:
        importlib.import_module("mlx.core")
        importlib.import_module("mlx_lm.models.cache")
    except Exception as error:  # an mlx-lm too new for this transformers, a broken wheel
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return (
            f"engine mlx: mlx-lm does not import here ({first}); mlx-lm {MLX_LM_VERSION} declares "
            "transformers >= 5.7"
        )
    return None


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def versions() -> dict[str, str]:
    """`mlx` and `mlx_lm` versions as installed (empty where mlx is absent): the stack's."""
    found: dict[str, str] = {}
    for module, dist in DISTRIBUTIONS.items():
        try:
            found[module] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found
