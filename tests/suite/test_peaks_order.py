"""Device peaks are measured before the model is built, so no timed round follows the burst.

A peak measurement is seconds of full-power copies and GEMMs after which the caching allocator
is emptied; a timed round right after it pays a cold `cudaMalloc` on a hot GPU. The suite runs
(in a subprocess, as a user runs it) with a plugin that stands in for the device: a fake
allocator whose first `malloc` after `empty_cache` is cold, a fake peak measurement that empties
it, and every model build, warmup generation and timed round allocating from it. The log says
who paid the cold `malloc`: it must be a build, never a timed round.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.roofline.peaks import Peaks
from benchmarks.suite import peaks as fixtures_peaks
from benchmarks.suite.configure import PEAKS
from benchmarks.suite.peaks import device_peaks

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = '''
"""A fake device allocator wired into the suite (see tests/suite/test_peaks_order.py)."""
import json
import os

from benchmarks.suite import peaks as fixtures_peaks
from benchmarks.suite import rounds as suite
from benchmarks.harness import modelcache
from benchmarks.harness.engine import Engine
from benchmarks.harness.roofline.peaks import Peaks

LOG = []  # (who, cold)
STATE = {"cold": True}


def malloc(who):
    LOG.append((who, STATE["cold"]))
    STATE["cold"] = False


def fake_resolve_peaks(request):
    LOG.append((f"peaks {request.device} {request.dtype}", None))
    STATE["cold"] = True  # the measurement ends with empty_cache
    return Peaks.unknown(request.dtype)


def wrap(owner, name, who):
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        malloc(who)
        return original(*args, **kwargs)

    setattr(owner, name, wrapped)


def pytest_configure(config):
    fixtures_peaks.resolve_peaks = fake_resolve_peaks
    wrap(modelcache.ModelCache, "_build", "build")
    wrap(Engine, "generate", "generate")  # the warmup, and test_generate's timed call
    wrap(suite.Rounds, "target", "timed")  # every timed round, first


def pytest_unconfigure(config):
    with open(os.environ["FAKE_ALLOC_LOG"], "w") as f:
        json.dump(LOG, f)
'''

MATRIX = """\
schema: 1
models: [tiny-llama]
devices: [cpu]
dtypes: [float32, bfloat16]
batch: [1]
prompt_len: [8, 16]
new_tokens: [3]
warmup: 1
rounds: 2
"""


def test_peaks_come_before_each_build_and_no_timed_round_pays_the_cold_malloc(tmp_path):
    (tmp_path / "fakealloc.py").write_text(PLUGIN, encoding="utf-8")
    (tmp_path / "m.yaml").write_text(MATRIX, encoding="utf-8")
    log_path = tmp_path / "log.json"
    command = [
        sys.executable, "-m", "pytest", str(ROOT / "benchmarks"),
        "-c", str(ROOT / "pyproject.toml"), "-p", "no:cacheprovider", "-p", "fakealloc",
        "--peaks", "measured", "--allow-slow-dtypes", "--matrix", str(tmp_path / "m.yaml"),
        "--benchmark-storage", f"file://{tmp_path / 'history'}",
        "-k", "prefill or decode or generate",
    ]  # fmt: skip
    env = {"FAKE_ALLOC_LOG": str(log_path), "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    done = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**_inherited(), **env},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = [tuple(entry) for entry in json.loads(log_path.read_text())]
    whos = [who for who, _ in log]
    # One measurement per device and dtype, each right before that dtype's build.
    assert [w for w in whos if w.startswith("peaks") or w == "build"] == [
        "peaks cpu torch.float32",
        "build",
        "peaks cpu torch.bfloat16",
        "build",
    ]
    cold = [who for who, was_cold in log if was_cold]
    assert cold == ["build", "build"], log
    assert ("timed", True) not in log
    # dtypes x cells x measurements x (rounds + the module's untimed warm round, which runs
    # the timed call too)
    assert whos.count("timed") == 2 * 2 * 3 * (2 + 1)


def _inherited() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}


class _Config:
    """What `device_peaks` reads of pytest's config: the stash and `--peaks`."""

    def __init__(self, mode: str) -> None:
        self.stash = {PEAKS: {}}
        self._mode = mode

    def getoption(self, name: str) -> str:
        assert name == "peaks"
        return self._mode


class _Held:
    def __init__(self, device: str, dtype: str) -> None:
        self.device, self.dtype = torch.device(device), getattr(torch, dtype)


class _ModelCache:
    def __init__(self, held: _Held | None) -> None:
        self.current = held
        self.events: list[str] = []

    def release(self) -> None:
        self.events.append("release")
        self.current = None


def test_a_held_model_of_another_dtype_is_released_before_a_measurement(monkeypatch):
    cache = _ModelCache(_Held("cpu", "float32"))

    def fake_resolve(request):
        cache.events.append(f"measure {request.dtype}")
        return Peaks.unknown(request.dtype)

    monkeypatch.setattr(fixtures_peaks, "resolve_peaks", fake_resolve)
    cell = Cell("tiny-llama", "cpu", "bfloat16", 1, 8, 3, warmup=0, rounds=1, seed=0)
    config = _Config("measured")
    first = device_peaks(config, cell, lambda line: None, cache)
    again = device_peaks(config, cell, lambda line: None, cache)
    assert first is again  # once per device and dtype per run
    assert cache.events == ["release", "measure torch.bfloat16"]


def test_a_held_model_of_the_same_device_and_dtype_or_table_peaks_release_nothing(monkeypatch):
    monkeypatch.setattr(fixtures_peaks, "resolve_peaks", lambda r: Peaks.unknown(r.dtype))
    cell = Cell("tiny-llama", "cpu", "float32", 1, 8, 3, warmup=0, rounds=1, seed=0)
    same = _ModelCache(_Held("cpu", "float32"))
    device_peaks(_Config("measured"), cell, lambda line: None, same)
    other = _ModelCache(_Held("cpu", "bfloat16"))
    device_peaks(_Config("table"), cell, lambda line: None, other)
    assert same.events == other.events == []
