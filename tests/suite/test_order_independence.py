"""Spec: a cell starts in the same process state whatever cells ran before it (issue 19, item 4).

A plugin plays the worst neighbour: after every test it turns flush-to-zero on (as loading a
`-ffast-math` library compiled by inductor does) and drops torch to one intra-op thread (as a
probe that forgot to restore it would). It records, when each test body starts (its model built
and warmed), the FP state and the thread count the cell runs with. Every test must see the
same state as the first, which ran before any misbehaviour.
"""

from __future__ import annotations

import json

import pytest

from tests.suite.test_suite_pytester import MODELS, run_suite, write_matrix

pytest_plugins = ["pytester"]

NEIGHBOUR = """
import json, os
import pytest
import torch
from benchmarks.harness.device.fpstate import read_fp_state

def pytest_runtest_call(item):
    state = read_fp_state()
    line = {"test": item.nodeid, "ftz": state.flush_to_zero, "daz": state.denormals_are_zero,
            "threads": torch.get_num_threads()}
    with open(os.environ["STATE_LOG"], "a") as log:
        log.write(json.dumps(line) + "\\n")

@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    torch.set_flush_denormal(True)
    torch.set_num_threads(1)
"""

MATRIX = """\
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [8, 12]
new_tokens: [3]
measurements: [prefill, decode]
warmup: 1
rounds: 1
"""


def test_every_cell_starts_in_the_state_of_the_first_whatever_ran_before(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    pytester.makepyfile(neighbour=NEIGHBOUR)
    log = pytester.path / "state.jsonl"
    monkeypatch.setenv("STATE_LOG", str(log))
    models = pytester.path / "models"
    models.mkdir()
    (models / "tiny-llama.yaml").write_text((MODELS / "tiny-llama.yaml").read_text())
    matrix = write_matrix(pytester.path / "m.yaml", MATRIX)
    result = run_suite(
        pytester,
        "-p",
        "neighbour",
        "--threads",
        "2",
        "--matrix",
        str(matrix),
        "--models-dir",
        str(models),
        "--benchmark-disable",
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    states = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(states) == 6  # 2 cells x (prefill, decode, and the KV check that always runs)
    first = {k: v for k, v in states[0].items() if k != "test"}
    assert first == {"ftz": False, "daz": False, "threads": 2}
    for state in states[1:]:
        assert {k: v for k, v in state.items() if k != "test"} == first, state["test"]
