"""The CPU probes' worker in a real suite run (benchmarks/suite/hostprobe.py): started in
`pytest_configure`, before collection imports the test modules; and a worker that hangs mid-run
stops the probing with its reason recorded while the run and its benchmarks' records are saved.

A plugin given with `-p` (imported before the suite's own conftest) swaps the worker for
`tests/harness/probe/fakeworker.py` (a valid start-up line, one point, then silence), lowers the
point timeout to 2 s, and notes at `pytest_collection` whether the worker was running already.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.suite_run import is_probe, run_suite

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "harness" / "probe" / "fakeworker.py"

MATRIX = """\
schema: 1
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [12]
new_tokens: [4]
measurements: [prefill]
warmup: 1
rounds: 3
"""

PLUGIN = """\
import json
import sys
from pathlib import Path

from benchmarks.harness.probe import client
from benchmarks.suite import hostprobe

client.worker_command = lambda threads: [sys.executable, {fake!r}, "hang-second-point"]
client.POINT_TIMEOUT_S = 2.0
client.CLOSE_TIMEOUT_S = 0.2


def pytest_collection(session):
    worker = session.config.stash.get(hostprobe.WORKER, None)
    loaded = sorted(m for m in sys.modules if m.startswith("benchmarks.test_"))
    note = {{"worker_pid": None if worker is None else worker.pid, "test_modules": loaded}}
    Path({out!r}).write_text(json.dumps(note), encoding="utf-8")
"""


def test_a_hung_worker_stops_the_probes_with_its_reason_and_the_run_is_saved(tmp_path):
    note = tmp_path / "note.json"
    (tmp_path / "hung_worker_plugin.py").write_text(
        PLUGIN.format(fake=str(FAKE), out=str(note)), encoding="utf-8"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    # exit 0 and one history file asserted there
    stdout, _ = run_suite(tmp_path, MATRIX, args=["-p", "hung_worker_plugin"], env=env)
    # Started in pytest_configure: running before collection imported any test module.
    started = json.loads(note.read_text(encoding="utf-8"))
    assert started["worker_pid"] is not None
    assert started["test_modules"] == []
    assert "host probes stopped: the probe worker gave no point in 2 s" in stdout

    (path,) = sorted((tmp_path / "history").rglob("*.json"))
    saved = json.loads(path.read_text(encoding="utf-8"))
    cells = [b for b in saved["benchmarks"] if not is_probe(b)]
    assert cells  # the benchmarks' records are saved
    assert all(b["stats"]["data"] for b in cells)
    probes = [b for b in saved["benchmarks"] if is_probe(b)]
    assert {p["extra_info"]["host_probe"] for p in probes} == {"memory", "compute"}
    reason = saved["machine_info"]["phasebench"]["host_probes_stopped"]
    assert "no point in 2 s" in reason
    for probe in probes:
        extra = probe["extra_info"]
        assert [p["at"] for p in extra["points"]] == ["start"]  # the point before the hang
        assert extra["stopped"] == reason
        assert (extra["process"], extra["threads"], extra["dtype"]) == ("own", 1, "float32")
