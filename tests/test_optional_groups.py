"""The suite imports without its optional dependency groups (serve, mlx, quant).

`nox -s smoke` and `nox -s bench-cpu` install only the base dependencies: one module-level
`import aiohttp` on the path of `benchmarks/conftest.py` stopped every run before it measured
(CI, December 2026). A module of an optional group is imported where a cell needs it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OPTIONAL = (
    "aiohttp", "fastapi", "uvicorn", "openai",  # serve
    "mlx", "mlx_lm",  # mlx
    "torchao", "bitsandbytes", "optimum", "hqq",  # quant
)  # fmt: skip

# `None` in sys.modules makes `import name` raise ModuleNotFoundError, as on a machine without it.
SCRIPT = """
import importlib, sys
for name in {optional!r}:
    sys.modules[name] = None
import benchmarks.conftest
for module in {modules!r}:
    importlib.import_module(module)
print("imported", len({modules!r}) + 1)
"""


def test_the_suite_imports_without_optional_groups() -> None:
    modules = sorted(f"benchmarks.{p.stem}" for p in (REPO / "benchmarks").glob("test_*.py"))
    assert "benchmarks.test_serve" in modules
    script = SCRIPT.format(optional=OPTIONAL, modules=modules)
    done = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"imported {len(modules) + 1}" in done.stdout
