"""The root conftest records the planned benchmarks: selected, not deselected, not skip-marked."""

from __future__ import annotations

import json
from pathlib import Path

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]

CONFTEST = f"""
import importlib.util, json
path = {str(ROOT / "conftest.py")!r}
spec = importlib.util.spec_from_file_location("phasebench_root_conftest", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

def pytest_collection_finish(session):
    print("PLANNED=" + json.dumps(mod.planned_benchmarks(session.items)))
"""

TESTS = """
import pytest

@pytest.mark.parametrize("cell", ["a", "b", "c"])
def test_prefill(benchmark, cell):
    benchmark(lambda: None)

@pytest.mark.skip(reason="this cell cannot run here")
def test_skipped(benchmark):
    benchmark(lambda: None)

@pytest.mark.skipif(True, reason="known at collection")
def test_skipif_true(benchmark):
    benchmark(lambda: None)

@pytest.mark.skipif(False, reason="not skipped")
def test_skipif_false(benchmark):
    benchmark(lambda: None)

def test_not_a_benchmark():
    pass
"""


def _planned(pytester, *args: str) -> list[str]:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=TESTS)
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", *args)
    (line,) = [x for x in result.outlines if x.startswith("PLANNED=")]
    return list(json.loads(line.removeprefix("PLANNED=")))


def test_planned_lists_selected_benchmarks_only(pytester):
    assert _planned(pytester) == [
        "test_suite.py::test_prefill[a]",
        "test_suite.py::test_prefill[b]",
        "test_suite.py::test_prefill[c]",
        "test_suite.py::test_skipif_false",
    ]


def test_deselected_benchmarks_are_not_planned(pytester):
    assert _planned(pytester, "-k", "prefill and not b") == [
        "test_suite.py::test_prefill[a]",
        "test_suite.py::test_prefill[c]",
    ]
