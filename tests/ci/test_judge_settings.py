"""Spec of issue 31's row 2: the judge's settings are the judge's.

A shard's `context.json` is written on the runner where the PR's code ran (its model files, its
dependencies, the head checkout's Stage step). The gate re-judges each shard with the judge
checkout's `python -m reports.ab --settings own`: the thresholds, alpha, process term and
interleaving come from the judge, the recorded ones are shown and named when they differ, never
used. A user re-judging their own run locally (`python -m reports.ab --out DIR`) still gets the
run's recorded settings.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

import tests.ci.test_pr_comment as tpc
from reports import ab

ROOT = Path(__file__).resolve().parents[2]
verdict = tpc.verdict

# Each loosens the base's judge until a 10 % regression of one of two timings is not a `fail`
# (threshold, alpha: it passes; the process term or a claimed process interleave: inconclusive).
LOOSENED = {
    "threshold": {"judge": {"threshold": ["50%"]}},
    "alpha": {"judge": {"alpha": 1e-12}},
    "process-cv": {"judge": {"process_cv": 0.3}},
    "interleave": {"interleave": "process", "process_shift": "every timing moved together"},
    "all": {
        "judge": {"threshold": ["900%", "generate_s=900%"], "alpha": 1e-12, "process_cv": 0.9},
        "interleave": "process",
    },
}


def _bench(name: str, rounds: list[float]) -> dict[str, Any]:
    return {
        "group": "generate",
        "name": f"test_generate[{name}]",
        "fullname": f"benchmarks/test_generate.py::test_generate[{name}]",
        "params": {"model": name},
        "param": name,
        "extra_info": {"schema": 1, "cell_id": name, "measurement": "generate"},
        "options": {},
        "stats": {"data": rounds, "median": sorted(rounds)[len(rounds) // 2]},
    }


def write_sides(data: Path, shift: float = 0.10) -> Path:
    """Two sides of 30 paired rounds: `slow` regressed by `shift`, `same` unchanged."""
    rng = random.Random(7)
    sides: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
    for name, change in (("slow", shift), ("same", 0.0)):
        shared = [0.01 * math.exp(rng.gauss(0, 0.3)) for _ in range(30)]
        base = [s * math.exp(rng.gauss(0, 0.01)) for s in shared]
        head = [s * (1 + change) * math.exp(rng.gauss(0, 0.01)) for s in shared]
        sides["base"].append(_bench(name, base))
        sides["head"].append(_bench(name, head))
    machine = {"node": "n", "system": "Linux", "release": "6", "machine": "x86_64"}
    data.mkdir(parents=True, exist_ok=True)
    for side, benches in sides.items():
        doc = {"machine_info": machine, "commit_info": {"id": "abc"}, "benchmarks": benches}
        (data / f"{side}.json").write_text(json.dumps(doc), encoding="utf-8")
    return data


def regression_shard(tmp_path: Path, context: Any) -> Path:
    """A shard whose runner's ab.json says pass, its context.json as the PR's side wrote it."""
    shards = tpc.shard(tmp_path / "shards", "cuda", 0, "ab", ab_status="pass")
    data = write_sides(shards / "bench-cuda-0" / "data")
    text = context if isinstance(context, str) else json.dumps(context)
    (data / "context.json").write_text(text, encoding="utf-8")
    return shards


def rejudged(tmp_path: Path, shards: Path) -> tuple[Any, dict[str, Any]]:
    """The gate's judgement with this tree as the judge checkout, and the judge's ab.json."""
    rejudge = verdict.rejudge_with(ROOT, tmp_path / "rejudged")
    judged, _, _ = verdict.judge("ab", shards, {}, rejudge=rejudge)
    folder = tmp_path / "rejudged" / "bench-cuda-0"
    log = (folder / "rejudge.log").read_text(encoding="utf-8")
    assert (folder / "ab.json").is_file(), log
    return judged, json.loads((folder / "ab.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("loosened", list(LOOSENED), ids=list(LOOSENED))
def test_a_pr_written_context_json_cannot_loosen_the_judge_of_a_regression(tmp_path, loosened):
    context = LOOSENED[loosened]
    shards = regression_shard(tmp_path, context)
    # What the file would do if obeyed (a user's local re-judge does obey it): no `fail`.
    local = tmp_path / "local"
    write_sides(local)
    (local / "context.json").write_text(json.dumps(context), encoding="utf-8")
    assert ab.main(["--out", str(local)]) != ab.EXIT["fail"]
    # The gate's judge: the regression fails, and the summary names what was not used.
    judged, doc = rejudged(tmp_path, shards)
    assert judged.status == "fail"
    assert (doc["threshold"], doc["alpha"], doc["process_cv"]) == (0.05, 0.01, 0.01)
    assert doc["per_metric_threshold"] == {}
    assert doc["settings"] == "own"
    assert doc["settings_notes"]
    note = next(n for n in judged.notes if "recorded other judge settings" in n)
    assert "shown and not used" in note
    for setting in doc["settings_notes"]:
        assert setting in note


def test_each_recorded_setting_that_differs_is_named_with_the_one_used(tmp_path):
    _, doc = rejudged(tmp_path, regression_shard(tmp_path, LOOSENED["all"]))
    notes = "\n".join(doc["settings_notes"])
    assert "threshold: recorded 9.0, judged with 0.05" in notes
    assert 'per-metric thresholds: recorded {"generate_s": 9.0}, judged with {}' in notes
    assert "alpha: recorded 1e-12, judged with 0.01" in notes
    assert "process term: recorded 0.9, judged with 0.01" in notes
    assert 'interleave: recorded "process", judged with "rounds"' in notes
    # Shown, never obeyed: the recorded settings sit apart from the ones used.
    assert doc["context"]["recorded"] == {
        "judge": LOOSENED["all"]["judge"],
        "interleave": "process",
    }
    assert doc["context"]["interleave"] == "rounds"
    assert doc["context"]["judge"] == {"threshold": [], "alpha": 0.01, "process_cv": 0.01}


def test_a_recorded_shift_is_not_taken_back_as_the_judges_own(tmp_path):
    """`process_shift` is what the judge computes of a process-interleaved run; a copy in the
    file would turn the status into `inconclusive` whatever the timings say."""
    shards = regression_shard(tmp_path, {"process_shift": "forged", "process_term": "forged"})
    judged, doc = rejudged(tmp_path, shards)
    assert judged.status == "fail"
    assert "process_shift" not in doc["context"]
    assert "process_term" not in doc["context"]


def test_the_runs_own_settings_add_no_note(tmp_path):
    """A run of the CI command line records no flag: the judge's defaults, the same settings."""
    shards = regression_shard(tmp_path, {"judge": {"threshold": []}, "interleave": "rounds"})
    judged, doc = rejudged(tmp_path, shards)
    assert judged.status == "fail"
    assert doc["settings_notes"] == []
    assert not any("recorded other judge settings" in n for n in judged.notes)


@pytest.mark.parametrize("text", ["[", "[1, 2]", '"a"'], ids=["not-json", "list", "string"])
def test_an_unreadable_context_json_does_not_stop_the_judge(tmp_path, text):
    judged, doc = rejudged(tmp_path, regression_shard(tmp_path, text))
    assert judged.status == "fail"
    assert any("context.json not shown" in n for n in doc["settings_notes"])
    # Where the settings come from the file, it must be readable: one line, exit 2.
    local = write_sides(tmp_path / "local")
    (local / "context.json").write_text(text, encoding="utf-8")
    assert ab.main(["--out", str(local)]) == ab.EXIT["error"]


def test_local_rejudging_keeps_the_runs_recorded_settings_and_flags_override(tmp_path):
    """`nox -s ab` records its flags and a user's `python -m reports.ab --out DIR` reuses them."""
    local = write_sides(tmp_path / "run")
    (local / "context.json").write_text(
        json.dumps({"judge": {"threshold": ["50%"]}, "interleave": "rounds"}), encoding="utf-8"
    )
    assert ab.main(["--out", str(local)]) == ab.EXIT["pass"]
    doc = json.loads((local / "ab.json").read_text(encoding="utf-8"))
    assert (doc["threshold"], doc["settings"], doc["settings_notes"]) == (0.5, "recorded", [])
    assert ab.main(["--out", str(local), "--threshold", "5%"]) == ab.EXIT["fail"]
    # `--settings own` takes flags too: a maintainer can re-judge with the judge's settings.
    assert ab.main(["--out", str(local), "--settings", "own"]) == ab.EXIT["fail"]
    assert ab.main(["--out", str(local), "--settings", "own", "--threshold", "50%"]) == 0
