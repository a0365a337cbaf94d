"""reports.history.load: reading, skipping with a reason, grouping by machine, current vs
baseline."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from reports.errors import ReportError
from reports.history.load import load_history, read_run_file
from reports.history.selection import SelectOptions, files_that_could_be_current, select_comparisons
from tests.data.reports.make_history import (
    Cell,
    RunSpec,
    current_spec,
    make_run,
    write_history,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "reports"
ONE_CELL = (Cell(prompt_len=32, new_tokens=4),)
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def write(path: Path, doc) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_checked_in_history_loads_as_one_machine_with_six_runs():
    history = load_history([DATA / "small_history"])
    assert history.skipped == ()
    assert list(history.machines) == ["ab12cd34"]
    runs = history.machines["ab12cd34"]
    assert len(runs) == 6
    assert [r.branch for r in runs] == ["main"] * 5 + ["feature"]
    bench = next(iter(runs[0].benchmarks.values()))
    assert len(bench.rounds_s) == 5
    assert bench.extra["schema"] == 1


def test_directories_are_read_recursively(tmp_path):
    shutil.copytree(DATA / "small_history", tmp_path / "a" / "b" / "c")
    assert load_history([tmp_path]).run_count == 6


def test_missing_history_path_is_a_user_error(tmp_path):
    with pytest.raises(ReportError, match="does not exist"):
        load_history([tmp_path / "nope"])


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"machine_info": {}, "benchmarks": [', "not valid JSON"),
        ("", "empty file"),
        ("this is not json", "not valid JSON"),
        ("[1, 2, 3]", "wrong shape"),
        ('{"benchmarks": [{"fullname": "x"}], "machine_info": {}}', "wrong shape"),
        ('{"benchmarks": []}', "wrong shape"),
    ],
)
def test_unreadable_files_are_named_and_skipped_never_raised(tmp_path, content, reason):
    shutil.copytree(DATA / "small_history", tmp_path / "h")
    bad = tmp_path / "h" / "bad.json"
    bad.write_text(content, encoding="utf-8")
    history = load_history([tmp_path / "h"])
    assert history.run_count == 6
    assert [s.path for s in history.skipped] == [str(bad)]
    assert reason in history.skipped[0].reason


def test_a_truncated_real_file_is_skipped(tmp_path):
    src = sorted((DATA / "small_history").rglob("*.json"))[0]
    cut = tmp_path / "cut.json"
    cut.write_text(src.read_text()[:2000], encoding="utf-8")
    got = read_run_file(cut)
    assert not hasattr(got, "benchmarks")
    assert "truncated" in got.reason


def test_unknown_machine_schema_skips_the_file_and_names_the_version(tmp_path):
    doc = make_run(RunSpec(commit="a" * 40, when=T0), ONE_CELL)
    doc["machine_info"]["phasebench"]["schema"] = 2
    path = write(tmp_path / "f.json", doc)
    history = load_history([path])
    assert history.run_count == 0
    assert "unknown schema" in history.skipped[0].reason
    assert "schema is 2" in history.skipped[0].reason


def test_unknown_extra_info_schema_skips_that_benchmark_only(tmp_path):
    doc = make_run(RunSpec(commit="a" * 40, when=T0), ONE_CELL)
    doc["benchmarks"][0]["extra_info"]["schema"] = 99
    history = load_history([write(tmp_path / "f.json", doc)])
    run = history.machines["ab12cd34"][0]
    assert len(run.benchmarks) == len(doc["benchmarks"]) - 1
    assert doc["benchmarks"][0]["fullname"] in history.skipped[0].reason


def test_foreign_pytest_benchmark_file_is_grouped_by_machine_info():
    history = load_history([DATA / "foreign_pytest_benchmark.json"])
    (machine,) = history.machines
    assert machine.startswith("mi-")
    run = history.machines[machine][0]
    assert run.env["cpu"] == "AMD EPYC 7B13"
    assert all(b.extra == {} for b in run.benchmarks.values())


def test_files_without_raw_rounds_use_the_median_as_one_observation(tmp_path):
    doc = make_run(RunSpec(commit="a" * 40, when=T0), ONE_CELL)
    for b in doc["benchmarks"]:
        del b["stats"]["data"]
    run = load_history([write(tmp_path / "f.json", doc)]).machines["ab12cd34"][0]
    bench = next(iter(run.benchmarks.values()))
    assert bench.rounds_s == (doc["benchmarks"][0]["stats"]["median"],)


def test_runs_are_grouped_by_fingerprint_not_by_folder(tmp_path):
    for i, fid in enumerate(["aaaa1111", "bbbb2222", "aaaa1111"]):
        spec = RunSpec(commit=f"{i:040d}", when=T0 + timedelta(days=i), fingerprint_id=fid)
        write(tmp_path / "same-folder" / f"{i}.json", make_run(spec, ONE_CELL))
    history = load_history([tmp_path])
    assert {k: len(v) for k, v in history.machines.items()} == {"aaaa1111": 2, "bbbb2222": 1}


def test_shards_of_one_commit_merge_into_one_run_and_reruns_do_not(tmp_path):
    cells = (Cell(prompt_len=32), Cell(prompt_len=64))
    spec = RunSpec(commit="c" * 40, when=T0)
    full = make_run(spec, cells)
    shard1, shard2 = dict(full), dict(full)
    shard1["benchmarks"] = full["benchmarks"][:4]
    shard2["benchmarks"] = full["benchmarks"][4:]
    write(tmp_path / "1.json", shard1)
    later = dict(shard2, datetime=(T0 + timedelta(minutes=1)).isoformat())
    write(tmp_path / "2.json", later)
    rerun = dict(full, datetime=(T0 + timedelta(minutes=5)).isoformat())
    write(tmp_path / "3.json", rerun)
    runs = load_history([tmp_path]).machines["ab12cd34"]
    assert [len(r.paths) for r in runs] == [2, 1]
    assert len(runs[0].benchmarks) == 8


def test_current_is_newest_and_baseline_is_earlier_main_runs(tmp_path):
    write_history(tmp_path, 4, cells=ONE_CELL, current=current_spec(days_after=10))
    # a run on another branch in between is not baseline when main runs exist
    other = RunSpec(commit="9" * 40, when=T0 + timedelta(days=5), branch="other")
    write(tmp_path / "x" / "other.json", make_run(other, ONE_CELL))
    sel = select_comparisons(load_history([tmp_path]), SelectOptions("main"))
    (comp,) = sel.comparisons
    assert comp.current.branch == "feature"
    assert [r.branch for r in comp.baseline] == ["main"] * 4
    assert "on branch main" in comp.baseline_rule


def test_without_base_branch_runs_all_earlier_runs_are_baseline(tmp_path):
    write_history(tmp_path, 3, cells=ONE_CELL, base=RunSpec(commit="", when=T0, branch="dev"))
    (comp,) = select_comparisons(load_history([tmp_path]), SelectOptions("main")).comparisons
    assert len(comp.baseline) == 2
    assert "no earlier run on branch main" in comp.baseline_rule


def test_a_machine_that_did_not_run_the_newest_commit_is_stale(tmp_path):
    write(
        tmp_path / "a.json",
        make_run(RunSpec(commit="1" * 40, when=T0, fingerprint_id="old00001"), ONE_CELL),
    )
    new = RunSpec(commit="2" * 40, when=T0 + timedelta(days=1), fingerprint_id="new00002")
    write(tmp_path / "b.json", make_run(new, ONE_CELL))
    sel = select_comparisons(load_history([tmp_path]))
    assert [c.machine_id for c in sel.comparisons] == ["new00002"]
    assert sel.stale[0][0] == "old00001"


def test_a_corrupt_file_newer_than_the_current_run_is_suspect(tmp_path):
    paths = write_history(tmp_path, 3, cells=ONE_CELL)
    bad = paths[0].parent / "0099_deadbeef_20270101.json"
    bad.write_text("{", encoding="utf-8")
    history = load_history([tmp_path])
    sel = select_comparisons(history)
    assert files_that_could_be_current(history, sel.comparisons) == [str(bad)]


def test_an_older_numbered_corrupt_file_in_the_same_folder_is_not_suspect(tmp_path):
    paths = write_history(tmp_path, 3, cells=ONE_CELL)
    old = paths[0].parent / "0000_cafecafe_20251231.json"
    old.write_text("{", encoding="utf-8")
    history = load_history([tmp_path])
    sel = select_comparisons(history)
    assert [s.path for s in history.skipped] == [str(old)]
    assert files_that_could_be_current(history, sel.comparisons) == []


def test_extra_info_without_a_schema_key_is_kept_as_foreign(tmp_path):
    doc = make_run(RunSpec(commit="a" * 40, when=T0), ONE_CELL)
    doc["benchmarks"][0]["extra_info"] = {"note": "someone else's extra_info"}
    history = load_history([write(tmp_path / "f.json", doc)])
    assert history.skipped == ()
    assert len(history.machines["ab12cd34"][0].benchmarks) == len(doc["benchmarks"])


def test_a_clean_commit_s_runs_accumulate_and_a_dirty_tree_is_pooled_only_when_asked(tmp_path):
    write_history(tmp_path, 4, cells=ONE_CELL)
    pr = current_spec(days_after=10)
    for k in range(3):
        again = RunSpec(**{**pr.__dict__, "when": pr.when + timedelta(minutes=10 * k)})
        write(tmp_path / "pr" / f"{k}.json", make_run(again, ONE_CELL, seed=k))
    history = load_history([tmp_path])
    (comp,) = select_comparisons(history).comparisons  # the default: pooled
    assert len(comp.baseline) == 4  # main's runs; the PR's earlier runs are not on main
    assert len(comp.current_repeats) == 2
    assert "2 earlier run(s) of this commit pooled with it" in comp.baseline_rule
    (plain,) = select_comparisons(history, SelectOptions(pool_reruns=False)).comparisons
    assert plain.current_repeats == ()
    for k in range(3):  # the same runs from a dirty tree: never pooled unless asked
        path = tmp_path / "pr" / f"{k}.json"
        doc = json.loads(path.read_text())
        doc["commit_info"]["dirty"] = True
        path.write_text(json.dumps(doc))
    history = load_history([tmp_path])
    (dirty,) = select_comparisons(history).comparisons
    assert dirty.current_repeats == ()
    (asked,) = select_comparisons(history, SelectOptions(pool_reruns=True)).comparisons
    assert len(asked.current_repeats) == 2
    assert "(--rerun)" in asked.baseline_rule


def test_a_commit_with_nothing_else_to_compare_with_is_judged_against_its_earlier_runs(tmp_path):
    first = current_spec(days_after=10, branch="main")
    again = RunSpec(**{**first.__dict__, "when": first.when + timedelta(minutes=10)})
    write(tmp_path / "a.json", make_run(first, ONE_CELL, seed=1))
    write(tmp_path / "b.json", make_run(again, ONE_CELL, seed=2))
    (comp,) = select_comparisons(load_history([tmp_path])).comparisons
    assert comp.current_repeats == ()
    assert len(comp.baseline) == 1


def test_a_calibration_run_with_an_injected_slowdown_is_kept_out_of_history(tmp_path):
    real = make_run(RunSpec(commit="a" * 40, when=T0), ONE_CELL)
    slowed = make_run(RunSpec(commit="b" * 40, when=T0 + timedelta(hours=1)), ONE_CELL)
    for bench in slowed["benchmarks"]:
        bench["extra_info"]["calibration_slowdown"] = 0.05
    write(tmp_path / "real.json", real)
    write(tmp_path / "slowed.json", slowed)
    history = load_history([tmp_path])
    (runs,) = history.machines.values()
    assert [run.commit_id for run in runs] == ["a" * 40]
    (skip,) = history.skipped
    assert skip.path.endswith("slowed.json")
    assert "calibration_slowdown=0.05" in skip.reason


def test_an_a_a_calibration_run_without_slowdown_is_ordinary_history(tmp_path):
    doc = make_run(RunSpec(commit="a" * 40, when=T0), ONE_CELL)
    for bench in doc["benchmarks"]:
        bench["extra_info"]["calibration_slowdown"] = 0.0
    history = load_history([write(tmp_path / "aa.json", doc)])
    assert not history.skipped
    assert len(history.machines) == 1
