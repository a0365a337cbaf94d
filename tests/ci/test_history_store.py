"""Spec of the history store (.github/scripts/history_store.py) against real git remotes.

The shard layout is produced by `stage` and downloaded the way actions/download-artifact v8
extracts it (one artifact or many, with and without `merge-multiple`); the store must read the
same history either way, refuse a missing input with a clear message, and store a re-run's
files once.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def _load_store():
    scripts = str(ROOT / ".github" / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)  # history_store.py imports shard_stage as its sibling
    spec = importlib.util.spec_from_file_location(
        "history_store", ROOT / ".github" / "scripts" / "history_store.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


store = _load_store()


def history_json(name: str = "x") -> str:
    return json.dumps({"machine_info": {}, "commit_info": {"id": name}, "benchmarks": []})


def upload(tmp: Path, cls: str, index: int, files: dict[str, str], mode: str = "history") -> Path:
    """What one shard job uploads: `stage`'s folder (the artifact's root is its parent)."""
    results = tmp / f"results-{cls}-{index}"
    machine = results / "Linux-CPython-3.11-64bit"
    machine.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (machine / name).write_text(text, encoding="utf-8")
    outcomes = {"ab": "skipped", "history": "skipped", mode: "success"}
    root = tmp / f"upload-{cls}-{index}"
    store.stage(
        cls=cls,
        index=index,
        shard=f"{index + 1}/9",
        outcomes=outcomes,
        sources={"ab": results, "history": results},
        into=root,
    )
    return root


def download(uploads: dict[str, Path], dest: Path, *, merge_multiple: bool) -> Path:
    """actions/download-artifact v8.0.1 with `pattern:`: a single match, or `merge-multiple`,
    is extracted into `path/`; several matches without it, each into `path/<name>/`."""
    for name, root in uploads.items():
        target = dest if merge_multiple or len(uploads) == 1 else dest / name
        shutil.copytree(root, target, dirs_exist_ok=True)
    return dest


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def remote(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    (tmp_path / "gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
    bare = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(bare))
    # What GitHub allows: partial clones (`--filter=blob:none`) and fetching blobs by id.
    git("-C", str(bare), "config", "uploadpack.allowFilter", "true")
    git("-C", str(bare), "config", "uploadpack.allowAnySHA1InWant", "true")
    return f"file://{bare}"


def tree(remote: str) -> list[str]:
    bare = remote.removeprefix("file://")
    return git("--git-dir", bare, "ls-tree", "-r", "--name-only", store.BRANCH).split()


@pytest.mark.parametrize("merge_multiple", [True, False], ids=["merge-multiple", "plain"])
@pytest.mark.parametrize("count", [1, 3], ids=["one-artifact", "three-artifacts"])
def test_collect_reads_the_same_history_from_one_artifact_or_many(tmp_path, count, merge_multiple):
    uploads = {
        f"bench-cuda-{k}": upload(tmp_path, "cuda", k, {"0001_a.json": history_json(str(k))})
        for k in range(count)
    }
    shards = download(uploads, tmp_path / "shards", merge_multiple=merge_multiple)
    if count > 1 and not merge_multiple:
        # The old layout: each artifact under its own name, one level too deep for `collect`.
        assert sorted(p.name for p in shards.iterdir()) == sorted(uploads)
        assert store.collect(shards, tmp_path / "out", run_id="9", now=NOW) == []
        return
    assert store.collect(shards, tmp_path / "out", run_id="9", now=NOW) == ["cuda"]
    stored = sorted(p.name for p in (tmp_path / "out" / "cuda").iterdir())
    assert [name.split("-")[2] for name in stored] == [f"s{k}" for k in range(count)]
    assert all(name.startswith("20261201T120000Z-r9-") for name in stored)


def test_collect_skips_ab_shards_and_invalid_files_and_keeps_each_shard_apart(tmp_path):
    uploads = {
        "bench-cuda-0": upload(tmp_path, "cuda", 0, {"0001_abc.json": history_json("a")}),
        "bench-cuda-1": upload(tmp_path, "cuda", 1, {"0001_abc.json": history_json("b")}),
        "bench-mps-0": upload(
            tmp_path, "mps", 0, {"0001_abc.json": history_json(), "0002_bad.json": "{trunc"}
        ),
        "bench-mps-1": upload(tmp_path, "mps", 1, {"head.json": history_json("h")}, mode="ab"),
    }
    shards = download(uploads, tmp_path / "shards", merge_multiple=True)
    classes = store.collect(shards, tmp_path / "out", run_id="55", now=NOW)
    assert classes == ["cuda", "mps"]
    cuda = sorted(p.name for p in (tmp_path / "out" / "cuda").iterdir())
    assert len(cuda) == 2  # both shards wrote 0001_abc.json: the stored names differ
    assert [name.split("-")[2] for name in cuda] == ["s0", "s1"]
    assert len(list((tmp_path / "out" / "mps").iterdir())) == 1  # the A/B shard is not history


def test_a_missing_input_is_a_clear_error_not_a_crash(tmp_path, remote, capsys):
    with pytest.raises(store.StoreError, match="no bench-\\* artifact"):
        store.collect(tmp_path / "absent", tmp_path / "out", run_id="1")
    with pytest.raises(store.StoreError, match="nothing to store"):
        store.push(remote, tmp_path / "absent", "m")
    (tmp_path / "empty").mkdir()
    with pytest.raises(store.StoreError, match="nothing to store"):
        store.push(remote, tmp_path / "empty", "m")
    code = store.main(["push", "--remote", remote, "--from", str(tmp_path / "x"), "--message", "m"])
    assert code == 1
    assert capsys.readouterr().err.startswith("::error::history store: nothing to store")


def test_stage_marks_a_failed_or_timed_out_shard_partial_and_keeps_what_it_saved(tmp_path):
    results = tmp_path / "bench"
    results.mkdir()
    (results / "0001_a.json").write_text(history_json())
    folder = store.stage(
        cls="cuda",
        index=3,
        shard="4/4",
        outcomes={"ab": "skipped", "history": "failure"},
        sources={"ab": tmp_path / "none", "history": results},
        into=tmp_path / "up",
    )
    assert folder.name == "bench-cuda-3-a1"
    meta = json.loads((folder / "outcome.json").read_text())
    assert meta == {
        "schema": 1,
        "class": "cuda",
        "shard": "4/4",
        "attempt": 1,
        "mode": "history",
        "outcome": "failure",
        "partial": True,
    }
    assert (folder / "data" / "0001_a.json").is_file()
    none = store.stage(
        cls="cuda",
        index=0,
        shard="1/4",
        outcomes={"ab": "skipped", "history": "skipped"},
        sources={},
        into=tmp_path / "up",
    )
    assert json.loads((none / "outcome.json").read_text())["mode"] == "none"
    with pytest.raises(store.LayoutError, match="outcome"):
        store.stage(
            cls="cuda", index=0, shard="1/1", outcomes={"ab": "weird"}, sources={}, into=tmp_path
        )


def collected(tmp_path: Path, run: str, payloads: dict[int, str], when: datetime) -> Path:
    uploads = {
        f"bench-cuda-{k}": upload(tmp_path / run, "cuda", k, {"0001_x.json": history_json(text)})
        for k, text in payloads.items()
    }
    shards = download(uploads, tmp_path / run / "shards", merge_multiple=True)
    store.collect(shards, tmp_path / run / "collected", run_id=run, now=when)
    return tmp_path / run / "collected"


def test_push_creates_the_orphan_branch_and_fetch_reads_it_back(tmp_path, remote):
    source = collected(tmp_path, "1", {0: "a"}, NOW)
    assert store.push(remote, source, "history: run 1") == 1
    bare = remote.removeprefix("file://")
    assert len(git("--git-dir", bare, "rev-list", "--parents", store.BRANCH).split()) == 1
    [name] = tree(remote)
    assert name.startswith("history/cuda/20261201T120000Z-r1-s0-")
    assert store.fetch(remote, ["cuda", "mps"], tmp_path / "base", now=NOW) == 1
    fetched = tmp_path / "base" / "cuda" / Path(name).name
    assert json.loads(fetched.read_text())["commit_info"]["id"] == "a"


def test_a_rerun_of_store_stores_nothing_twice(tmp_path, remote):
    first = collected(tmp_path, "7", {0: "a", 1: "b"}, NOW)
    assert store.push(remote, first, "attempt 1") == 2
    # Attempt 2 of the same run, a day later: same shard data, new stamps.
    again = collected(tmp_path / "again", "7", {0: "a", 1: "b"}, NOW + timedelta(days=1))
    assert store.push(remote, again, "attempt 2") == 0
    # A shard that was re-measured in the re-run is new data and is stored.
    remeasured = collected(tmp_path / "re", "7", {0: "a", 1: "b2"}, NOW + timedelta(days=1))
    assert store.push(remote, remeasured, "attempt 3") == 1
    assert len(tree(remote)) == 3


def test_fetch_takes_only_the_newest_runs_within_the_age_limit(tmp_path, remote):
    for i in range(6):
        source = collected(
            tmp_path, str(100 + i), {0: f"r{i}a", 1: f"r{i}b"}, NOW - timedelta(days=10 * (5 - i))
        )
        store.push(remote, source, f"run {i}")
    assert len(tree(remote)) == 12
    assert store.fetch(remote, ["cuda"], tmp_path / "two", max_runs=2, now=NOW) == 4
    runs = {p.name.split("-")[1] for p in (tmp_path / "two" / "cuda").iterdir()}
    assert runs == {"r104", "r105"}
    assert store.fetch(remote, ["cuda"], tmp_path / "young", max_age_days=25, now=NOW) == 6
    runs = {p.name.split("-")[1] for p in (tmp_path / "young" / "cuda").iterdir()}
    assert runs == {"r103", "r104", "r105"}


def test_select_runs_keeps_undated_legacy_names_as_the_oldest():
    names = [
        "55.1-s0-0001_x.json",
        "20261130T000000Z-r60-s0-0123456789abcdef.json",
        "20261130T000000Z-r60-s1-fedcba9876543210.json",
        "20261001T000000Z-r58-s0-00000000000000aa.json",
    ]
    picked = store.select_runs(names, max_runs=2, max_age_days=30, now=NOW)
    assert picked == sorted([names[0], names[1], names[2]])  # r58 is too old
    assert store.select_runs(names, max_runs=1, max_age_days=365, now=NOW) == sorted(names[1:3])
    assert store.select_runs(names, max_runs=0, max_age_days=365, now=NOW) == []


def test_fetch_downloads_only_the_tips_trees_and_the_selected_files(tmp_path, remote):
    for i in range(4):
        store.push(remote, collected(tmp_path, str(i), {0: f"p{i}"}, NOW - timedelta(days=i)), "r")
    calls = []
    real = store._git

    def spy(repo, *args, check=True, env=None):
        calls.append(args)
        return real(repo, *args, check=check, env=env)

    store._git = spy
    try:
        assert store.fetch(remote, ["cuda"], tmp_path / "base", max_runs=1, now=NOW) == 1
    finally:
        store._git = real
    fetches = [c for c in calls if c[0] == "fetch"]
    assert fetches
    assert all("--depth=1" in c and "--filter=blob:none" in c for c in fetches)
    [checkout] = [c for c in calls if c[0] == "checkout"]
    assert len([a for a in checkout if a.startswith("history/")]) == 1


def test_concurrent_pushes_both_land(tmp_path, remote, monkeypatch):
    monkeypatch.setattr(store.time, "sleep", lambda _s: None)
    runs = {r: collected(tmp_path, r, {0: r}, NOW) for r in ("1", "2", "3")}
    store.push(remote, runs["1"], "run 1")
    # Run 3 pushes between run 2's fetch and run 2's push: run 2 is rejected once, then retries.
    real_git = store._git
    raced = []

    def racing_git(repo, *args, check=True, env=None):
        if args[:1] == ("push",) and not raced:
            raced.append(True)
            store.push(remote, runs["3"], "run 3")
        return real_git(repo, *args, check=check, env=env)

    monkeypatch.setattr(store, "_git", racing_git)
    assert store.push(remote, runs["2"], "run 2") == 1
    assert [name.split("-")[1] for name in tree(remote)] == ["r1", "r2", "r3"]


def test_a_file_whose_name_does_not_match_its_content_is_refused(tmp_path, remote):
    source = collected(tmp_path, "1", {0: "a"}, NOW)
    [path] = (source / "cuda").iterdir()
    path.write_text(history_json("tampered"))
    with pytest.raises(store.StoreError, match="does not match the hash"):
        store.push(remote, source, "m")


def test_is_history_file_refuses_what_pytest_benchmark_does_not_write(tmp_path):
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "ok.json").write_text(history_json())
    (tmp_path / "link.json").symlink_to(tmp_path / "ok.json")
    assert store.is_history_file(tmp_path / "ok.json") is None
    assert "benchmarks" in store.is_history_file(tmp_path / "list.json")
    assert store.is_history_file(tmp_path / "link.json") == "not a regular file"


def test_fetch_of_a_missing_branch_is_an_empty_history(tmp_path, remote):
    assert store.fetch(remote, ["cuda"], tmp_path / "base") == 0
    assert not (tmp_path / "base").exists()


def test_an_unreachable_store_is_an_error_not_an_empty_history(tmp_path, remote):
    with pytest.raises(store.StoreError, match="cannot read"):
        store.fetch(str(tmp_path / "no-such-remote.git"), ["cuda"], tmp_path / "base")


def test_the_token_is_read_from_the_environment_never_put_in_a_command_line(monkeypatch):
    seen = []
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secret")
    monkeypatch.setattr(
        store.subprocess,
        "run",
        lambda cmd, **kw: seen.append(cmd) or subprocess.CompletedProcess(cmd, 0, "", ""),
    )
    store._git(Path(), "ls-remote", "origin")
    assert seen
    assert "ghs_secret" not in " ".join(seen[0])
    assert any("credential.helper=!f()" in part for part in seen[0])


def test_the_store_cli_reports_bad_class_names_on_one_line(tmp_path, capsys):
    (tmp_path / "collected" / "Bad Class").mkdir(parents=True)
    args = ["fetch", "--remote", str(tmp_path / "none.git"), "--classes-from"]
    assert store.main([*args, str(tmp_path / "collected"), "--into", str(tmp_path / "o")]) == 1
    assert capsys.readouterr().err.startswith("::error::history store:")
