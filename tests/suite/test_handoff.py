"""One asserting pass per cell: the KV test asserts on the pass `test_generate` just ran
(`benchmarks/suite/handoff.py`), and that pass never lives into another test's measurements.

A plugin logs every `Engine.generate` call (which test made it, with or without a probe) and
what was kept when each test body began.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.suite import handoff
from tests.suite.test_suite_pytester import ONE, models_dir, run_suite, write_matrix

pytest_plugins = ["pytester"]

SPY = """
import json, os
from benchmarks.harness import engine
from benchmarks.suite import handoff

_CURRENT = []
_generate = engine.Engine.generate

def _logged(self, input_ids, new_tokens, probe=None):
    _log({"generate": _CURRENT[-1], "probe": probe is not None})
    return _generate(self, input_ids, new_tokens, probe=probe)

engine.Engine.generate = _logged

def _log(line):
    with open(os.environ["HANDOFF_LOG"], "a") as log:
        log.write(json.dumps(line) + "\\n")

def pytest_runtest_call(item):
    _CURRENT.append(item.name)
    _log({"test": item.name, "kept": sorted(handoff._KEPT)})
"""

# One tiny cell (the suite's `ONE`) with a dynamic and a static cache.
MATRIX = ONE + "cache: [dynamic, static]\nmeasurements: [prefill, decode, generate]\n"


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *extra: str) -> list[dict]:
    pytester.makepyfile(spy=SPY)
    log = pytester.path / "handoff.jsonl"
    log.unlink(missing_ok=True)
    monkeypatch.setenv("HANDOFF_LOG", str(log))
    models = models_dir(pytester.path)
    matrix = write_matrix(pytester.path / "m.yaml", MATRIX)
    result = run_suite(
        pytester, "-p", "spy", "--matrix", str(matrix), "--models-dir", str(models),
        "--benchmark-disable", *extra,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_kv_test_asserts_on_the_generate_pass_and_a_static_cell_reads_its_own(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    lines = _run(pytester, monkeypatch)
    calls = [(line["generate"], line["probe"]) for line in lines if "generate" in line]
    dynamic, static = "cache_dynamic", "cache_static"
    # Dynamic cell: one pass (test_generate's), none in its KV test. Static cell: the KV test
    # runs its own, reading the cache at every point.
    assert [c for c in calls if dynamic in c[0]] == [
        (next(n for n, _ in calls if dynamic in n and n.startswith("test_generate")), False)
    ]
    static_calls = sorted((n.split("[")[0], p) for n, p in calls if static in n)
    assert static_calls == [("test_generate", False), ("test_kv_cache", True)]
    # A kept pass is there only when the same cell's KV test begins.
    for line in (line for line in lines if "test" in line):
        if line["test"].startswith("test_kv_cache"):
            assert line["kept"]
            assert line["kept"][0] in line["test"]
        else:
            assert line["kept"] == [], line


def test_a_pass_no_kv_test_takes_is_dropped_before_the_next_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    lines = _run(pytester, monkeypatch, "-k", "not kv_cache")
    tests = [line for line in lines if "test" in line]
    assert tests
    assert not any(t["test"].startswith("test_kv_cache") for t in tests)
    assert [t for t in tests if t["kept"]] == []


def test_take_hands_over_only_the_cells_own_pass_once():
    handoff.keep("a", "pass-a")
    handoff.release_unless("a")
    assert handoff.take("b") is None
    assert handoff.take("a") is None  # take("b") dropped it: nothing outlives a handover
    handoff.keep("a", "pass-a")
    handoff.release_unless("a")
    assert handoff.take("a") == "pass-a"
    assert handoff.take("a") is None
    handoff.keep("a", "pass-a")
    handoff.release_unless(None)
    assert handoff.take("a") is None
