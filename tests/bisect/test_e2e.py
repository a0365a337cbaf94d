"""`python -m benchmarks.bisect` end to end on a held-out range (issue 52).

A copy of this tree becomes a fresh repository: the good commit, then eight first-parent commits
of which one makes tiny-llama deeper (2 -> 6 layers: decode clearly slower) and the others change
only text. The bisection must name that commit and verify it (exit 0); over a range after it
(nothing changes) it must say "not reproducible" (exit 4). Bad input is one line and exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MATRIX = """schema: 1
description: one tiny model for the bisect end-to-end test
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [16]
new_tokens: [4]
measurements: [decode]
warmup: 1
rounds: 2
seed: 0
"""
CULPRIT = 5  # the commit (1..8) that makes the model deeper


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def held_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The repository and its commits [good, 1, ..., 8]."""
    repo = tmp_path_factory.mktemp("bisect") / "repo"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    (repo / "tiny.yaml").write_text(MATRIX, encoding="utf-8")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "good")
    shas = [_git(repo, "rev-parse", "HEAD")]
    model = repo / "matrix" / "models" / "tiny-llama.yaml"
    for i in range(1, 9):
        if i == CULPRIT:
            text = model.read_text(encoding="utf-8")
            model.write_text(text.replace("num_hidden_layers: 2", "num_hidden_layers: 6"))
            message = "tiny-llama: six layers"
        else:
            with (repo / "NOTES.md").open("a", encoding="utf-8") as notes:
                notes.write(f"note {i}\n")
            message = f"notes: {i}"
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", message)
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas


def run_bisect(repo: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PHASEBENCH_AB_ENVS"] = str(repo.parent / "envs")
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.bisect", "--matrix", "tiny.yaml", *args],
        cwd=repo, env=env, capture_output=True, text=True, check=False, timeout=timeout,
    )  # fmt: skip


@pytest.mark.slow
def test_the_commit_that_made_decode_slower_is_named_and_verified(held_out):
    repo, shas = held_out
    out = repo / "out" / "found"
    done = run_bisect(repo, "--good", shas[0], "--bad", shas[-1], "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    doc = json.loads((out / "bisect.json").read_text(encoding="utf-8"))
    assert doc["schema"] == 1
    assert doc["verdict"] == "culprit"
    assert [c["ref"] for c in doc["culprits"]] == [shas[CULPRIT]]
    culprit = doc["culprits"][0]
    assert culprit["parent"] == shas[CULPRIT - 1]
    assert culprit["ci_low"] > 1.05
    assert doc["steps"][-1]["purpose"] == "verify"
    assert doc["judged"]["metric"] == "decode_step_s"
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert "tiny-llama: six layers" in summary
    assert "matrix/models/tiny-llama.yaml" in summary  # the diff stat
    assert "<svg" in (out / "index.html").read_text(encoding="utf-8")
    # what in the change costs: the op-level profile of the culprit and its parent
    assert "error" not in doc["profile"], doc["profile"]
    mm = next(r for r in doc["profile"]["rows"] if r["op"] == "aten::mm")
    assert mm["culprit_calls"] > mm["parent_calls"]  # more layers, more matmuls per step
    assert "What in" in summary


@pytest.mark.slow
def test_a_range_where_nothing_changes_is_not_reproducible(held_out):
    repo, shas = held_out
    out = repo / "out" / "none"
    done = run_bisect(repo, "--good", shas[CULPRIT], "--bad", shas[-1], "--out", str(out))
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-2000:]
    doc = json.loads((out / "bisect.json").read_text(encoding="utf-8"))
    assert doc["verdict"] == "not-reproducible"
    assert doc["culprits"] == []


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_bad_ranges_are_one_line_and_exit_2(held_out):
    repo, shas = held_out
    line = _one_error_line(run_bisect(repo, "--good", "no-such-ref", "--bad", shas[-1]))
    assert "no-such-ref" in line
    assert "git rev-parse" in line
    line = _one_error_line(run_bisect(repo, "--good", shas[-1], "--bad", shas[0]))
    assert "not on the first-parent line" in line
    line = _one_error_line(run_bisect(repo, "--good", shas[2], "--bad", shas[2]))
    assert "same commit" in line
    line = _one_error_line(run_bisect(repo, "--good", shas[0], "--base", "x"))
    assert "--base is set by each step" in line
