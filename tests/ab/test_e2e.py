"""`python -m benchmarks.ab` end to end: a tiny real A/B run, and the exit-2 paths.

The A/B run compares HEAD (base) with the working tree (head) on one tiny model, measured with
the working tree's apparatus (`--apparatus head`: HEAD may predate A/B mode while this is being
developed). It checks the plumbing, not speed: both sides wrote pytest-benchmark JSON with every
pair, the coordinator alternated their rounds pair by pair, `ab.json` agrees with the exit code,
and the exact KV/weights comparisons of two identical stacks pass.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

from benchmarks.ab.cpus import default_threads

ROOT = Path(__file__).resolve().parents[2]
PAIRS = 6
MATRIX = """schema: 1
description: one tiny model for the A/B end-to-end test
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [16]
new_tokens: [4]
warmup: 1
rounds: 2
seed: 0
"""


def run_ab(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.ab", *args],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def matrix(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(MATRIX, encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_tiny_ab_run_interleaves_pairs_and_judges_them(tmp_path: Path, matrix: Path):
    out = tmp_path / "ab"
    # Up to PAIRS + 3 pairs, but a zero time budget and no precision target stop every
    # benchmark at --min-pairs: the early stop must keep the rounds timed so far as an ordinary
    # pytest-benchmark record (the precision stop: tests/ab/test_precision.py).
    # No --threads: the default thread count and pinning are under test.
    done = run_ab(
        "--base", "HEAD", "--apparatus", "head", "--matrix", str(matrix), "--out", str(out),
        "--pairs", str(PAIRS + 3), "--min-pairs", str(PAIRS), "--pair-budget-s", "0",
        "--pair-target", "0", "-k", "not overhead",
    )  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stdout + done.stderr  # 3: inconclusive, not PASS
    doc = json.loads((out / "ab.json").read_text(encoding="utf-8"))
    assert doc["schema"] == 1
    assert doc["status"] == {0: "pass", 1: "fail", 3: "inconclusive"}[done.returncode]
    assert doc["context"]["interleave"] == "rounds"
    # Without --threads each side runs one core fewer than the machine's, its rounds pinned to
    # the last CPUs (Linux; elsewhere nothing is pinned), and both sides' records say so.
    threads = default_threads()
    assert doc["context"]["threads"] == threads
    assert doc["context"]["threads_from"].startswith("default")
    linux = hasattr(os, "sched_getaffinity")
    pinned = sorted(os.sched_getaffinity(0))[-threads:] if linux else None
    assert doc["context"]["cpus"] == pinned
    timings = [b for b in doc["benchmarks"] if b["kind"] == "timing"]
    assert {b["metric"] for b in timings} >= {"prefill_s", "decode_step_s", "e2e_s"}
    assert all(b["pairs"] == PAIRS for b in timings)
    assert all(b["ci_low"] <= b["ratio"] <= b["ci_high"] for b in timings)
    exact = [b for b in doc["benchmarks"] if b["kind"] == "exact"]
    assert exact
    assert all(b["verdict"] == "pass" for b in exact)
    for side in ("base", "head"):
        raw = json.loads((out / f"{side}.json").read_text(encoding="utf-8"))
        assert all(len(b["stats"]["data"]) == PAIRS for b in raw["benchmarks"])
    # The coordinator's log: per benchmark, each pair's two rounds were granted back to back.
    turns: dict[str, list[tuple[str, int]]] = defaultdict(list)
    stops: dict[str, set[str]] = defaultdict(set)
    for line in (out / "turns.jsonl").read_text(encoding="utf-8").splitlines():
        turn = json.loads(line)
        if turn.get("op") == "stop":
            assert turn["pairs"] == PAIRS, turn
            stops[turn["key"]].add(turn["side"])
            continue
        assert turn["paired"], turn
        turns[turn["key"]].append((turn["side"], turn["round"]))
    assert len(turns) == len(timings)
    assert all(stops[key] == {"base", "head"} for key in turns)
    for sequence in turns.values():
        assert len(sequence) == 2 * PAIRS
        for i in range(PAIRS):
            pair = sequence[2 * i : 2 * i + 2]
            assert {s for s, _ in pair} == {"base", "head"}
            assert {r for _, r in pair} == {i}
    assert (out / "index.html").is_file()
    assert "phasebench A/B" in (out / "summary.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_process_level_interleaving_runs_the_sides_one_after_the_other(tmp_path, matrix):
    """The fallback when both models do not fit: whole sides in turn, the same judging."""
    out = tmp_path / "ab"
    # No --threads: the default thread count and pinning are under test.
    done = run_ab(
        "--base", "HEAD", "--apparatus", "head", "--matrix", str(matrix), "--out", str(out),
        "--pairs", "3", "--interleave", "process", "-k", "decode",
    )  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stdout + done.stderr  # 3: inconclusive, not PASS
    doc = json.loads((out / "ab.json").read_text(encoding="utf-8"))
    assert doc["context"]["interleave"] == "process"
    assert doc["process_cv"] >= 0.03  # the run-level term of process interleave
    assert "judge" in doc["context"]  # re-judging reads the run's settings
    assert not (out / "turns.jsonl").exists()
    base, head = (
        json.loads((out / f"{s}.json").read_text(encoding="utf-8")) for s in ("base", "head")
    )
    assert base["datetime"] < head["datetime"]  # the base ran first, whole
    assert [b["verdict"] for b in doc["benchmarks"] if b["kind"] == "exact"]


def test_sigterm_stops_the_sides_and_removes_the_worktree(tmp_path: Path, matrix: Path):
    """A CI step timeout signals the command: no side process or worktree is left behind."""
    # Its own TMPDIR (short: the coordinator's socket path must stay under ~100 characters)
    # tells this run's worktree apart from those of tests running in parallel.
    scratch = Path(tempfile.mkdtemp(prefix="ab-term-", dir="/tmp"))
    env = {**os.environ, "TMPDIR": str(scratch)}
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.ab", "--base", "HEAD", "--apparatus", "head",
         "--matrix", str(matrix), "--out", str(tmp_path / "ab"), "--pairs", "50"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "apparatus:" in line:  # the sides are being started
                break
        assert any(str(scratch) in w for w in _worktrees())
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 128 + signal.SIGTERM
        assert not any(str(scratch) in w for w in _worktrees())
        # What the command made (worktree, socket folder); torch and pytest keep caches there too.
        assert not list(scratch.glob("phasebench-ab-*"))
    finally:
        process.kill()
        shutil.rmtree(scratch, ignore_errors=True)


def _worktrees() -> list[str]:
    listed = subprocess.run(
        ["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return listed.stdout.splitlines()


def test_an_unknown_ref_is_one_line_and_exit_2(tmp_path: Path, matrix: Path):
    done = run_ab("--base", "no-such-ref-4711", "--matrix", str(matrix), "--out", str(tmp_path))
    assert "no-such-ref-4711" in _one_error_line(done)


def test_a_broken_matrix_is_one_line_and_exit_2(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(MATRIX.replace("tiny-llama", "no-such-model"), encoding="utf-8")
    stale = tmp_path / "ab.json"
    stale.write_text('{"schema": 1, "status": "pass"}', encoding="utf-8")
    done = run_ab(
        "--base", "HEAD", "--apparatus", "head", "--matrix", str(bad), "--out", str(tmp_path)
    )
    assert "no-such-model" in _one_error_line(done)
    assert not stale.exists()  # an older run's verdicts never outlive a failed one


def test_a_base_from_before_ab_mode_is_refused_with_the_default_apparatus(tmp_path, matrix):
    root = subprocess.run(
        ["git", "rev-list", "--max-parents=0", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    done = run_ab("--base", root, "--matrix", str(matrix), "--out", str(tmp_path))
    line = _one_error_line(done)
    assert "predates A/B mode" in line
    assert "--apparatus head" in line


def test_a_side_that_cannot_be_built_is_one_line_and_exit_2(tmp_path: Path, matrix: Path):
    """A torch requirement pip cannot satisfy (a wheel path that does not exist; no network)."""
    done = run_ab(
        "--base", "HEAD", "--apparatus", "head", "--matrix", str(matrix), "--out", str(tmp_path),
        "--head-env", f"PHASEBENCH_TORCH={tmp_path / 'missing' / 'torch-9.9-py3-none-any.whl'}",
        env={"PHASEBENCH_AB_ENVS": str(tmp_path / "envs")},
    )  # fmt: skip
    line = _one_error_line(done)
    assert "could not be built" in line
    assert "env-head.log" in line


def test_bad_env_assignments_are_refused(tmp_path: Path, matrix: Path):
    done = run_ab("--base", "HEAD", "--head-env", "NOEQUALS", "--matrix", str(matrix))
    assert "--head-env" in _one_error_line(done)


# The first release with A/B mode (turnstile protocol 1: no "stop", no round pinning). The first
# pull requests after protocol 2 lands measure with it (the merge-base is the apparatus).
FIRST_AB_RELEASE = "645d7651cf49"


@pytest.mark.slow
def test_an_apparatus_of_the_first_ab_release_still_measures(tmp_path: Path, matrix: Path):
    """Its turnstile is never sent "stop" (every benchmark runs all --pairs) and its sides are
    pinned whole, as that release did; the run is judged as usual."""
    known = subprocess.run(
        ["git", "cat-file", "-e", f"{FIRST_AB_RELEASE}^{{commit}}"], cwd=ROOT, check=False
    )
    if known.returncode != 0:
        pytest.skip(f"{FIRST_AB_RELEASE} is not in this clone's history (a shallow clone)")
    out = tmp_path / "ab"
    done = run_ab(
        "--base", FIRST_AB_RELEASE, "--matrix", str(matrix), "--out", str(out),
        "--pairs", "4", "--min-pairs", "2", "--pair-budget-s", "0", "--threads", "1",
        "-k", "decode",
    )  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stdout + done.stderr  # 3: inconclusive, not PASS
    assert "turnstile is protocol 1" in done.stdout
    doc = json.loads((out / "ab.json").read_text(encoding="utf-8"))
    assert doc["context"]["apparatus"] == "base"
    timings = [b for b in doc["benchmarks"] if b["kind"] == "timing"]
    assert timings
    assert all(b["pairs"] == 4 for b in timings)  # the budget would have stopped them at 2
    turns = (out / "turns.jsonl").read_text(encoding="utf-8")
    assert '"stop"' not in turns
