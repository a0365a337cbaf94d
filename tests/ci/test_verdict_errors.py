"""Spec of issue 31's rows 8 and 9: the gate always says something, and never overwrites a
measured verdict with an unmeasured one.

Row 8: an exception the verdict step did not expect ends the job with no status and no summary,
so the required check stays "Expected" and a re-run repeats it. Every malformed input and a
re-judge that runs past its time are now `error` with the reason; anything else still writes the
summary and sets `error` (`last_resort`). The re-judges share one deadline inside the gate job's
timeout.

Row 9: GitHub applies Dependabot's restrictions only to runs Dependabot initiated; a maintainer
reopening a Dependabot PR starts a pull_request run with a write token that measures nothing
(bench.yml's fork guard). It must not replace the `success` a maintainer's dispatch set on that
commit. Recorded payloads (tests/data/github/) behind a fake API, as in test_gate_trust.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tests.ci.test_pr_comment as tpc
import tests.ci.test_workflows as tw

verdict = tpc.verdict
rejudge = sys.modules["rejudge"]  # verdict.py's own import of it
SHA = tpc.SHA
DISPATCHED = tpc.gate_status("success", "no regression beyond noise")  # a dispatch's verdict


def statuses(gh: tpc.FakeGitHub) -> list[dict[str, Any]]:
    return [body for method, path, body, _ in gh.calls if method == "POST" and "/statuses/" in path]


def summary(tmp_path: Path) -> str:
    return (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")


def ab_shard(root: Path, k: int = 0) -> Path:
    """An A/B shard with raw sides to re-judge (their content does not matter to a fake judge)."""
    tpc.shard(root, "cuda", k, "ab", ab_status="pass")
    data = root / f"bench-cuda-{k}" / "data"
    for side in ("base", "head"):
        (data / f"{side}.json").write_text('{"benchmarks": []}', encoding="utf-8")
    return root


# --- row 8: a re-judge that runs past its time ----------------------------------------------------


def timing_out(*args: Any, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    raise subprocess.TimeoutExpired(args[0], timeout, output="half a log", stderr=b"\xff")


def test_a_rejudge_that_times_out_is_an_error_naming_it_not_a_crash(tmp_path):
    shards = ab_shard(tmp_path / "shards")
    judge = verdict.rejudge_with(tmp_path, tmp_path / "rejudged", run=timing_out)
    judged, _, sections = verdict.judge("ab", shards, {}, rejudge=judge)
    assert judged.status == "error"
    assert any("took over 300 s and was stopped" in note for note in judged.notes)
    assert sections == []
    log = tmp_path / "rejudged" / "bench-cuda-0" / "rejudge.log"
    assert log.read_text(encoding="utf-8").startswith("half a log")


def test_a_real_rejudge_past_the_budget_is_stopped_and_the_status_still_set(tmp_path):
    """The whole step, with a judge checkout whose reports.ab never finishes."""
    judge_dir = tmp_path / "judge"
    (judge_dir / "reports").mkdir(parents=True)
    (judge_dir / "reports" / "__init__.py").write_text("")
    (judge_dir / "reports" / "ab.py").write_text("import time\ntime.sleep(60)\n")
    ab_shard(tmp_path / "shards")
    args = tpc.verdict_args(tmp_path)
    args.judge_dir, args.rejudge_budget_s = judge_dir, 1.0
    gh = tpc.FakeGitHub()
    started = time.monotonic()
    assert verdict.run(args, tpc.PR_ENV, gh) == 1
    assert time.monotonic() - started < 30
    assert [s["state"] for s in statuses(gh)] == ["error"]
    assert "cuda shard 1/2: A/B error (re-judging it took over 1 s and was stopped)" in summary(
        tmp_path
    )


def test_shards_the_budget_leaves_no_time_for_are_errors_and_the_rest_are_judged(tmp_path):
    shards = tmp_path / "shards"
    for k in range(3):
        ab_shard(shards, k)
    now = [0.0]

    def slow_judge(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        now[0] += 400.0  # each re-judge takes 400 s of the 600 s budget
        out = Path(command[command.index("--out") + 1])
        tpc.gate_json(out / "ab.json", "pass")
        return subprocess.CompletedProcess(command, 0, "", "")

    judge = verdict.rejudge_with(
        tmp_path, tmp_path / "rejudged", budget_s=600, clock=lambda: now[0], run=slow_judge
    )
    judged, _, sections = verdict.judge("ab", shards, {}, rejudge=judge)
    assert judged.status == "error"
    assert len(sections) == 2  # shard 3 started with no time left
    spent = [n for n in judged.notes if "were spent" in n]
    assert [n.split(":")[0] for n in spent] == ["cuda shard 3/2"]
    assert "re-run the gate job" in spent[0]


def test_the_rejudge_budget_leaves_the_gate_job_time_to_set_the_status():
    """Setup, downloads and the status calls must fit beside the re-judges in `timeout-minutes`;
    a job that hits its timeout is cancelled mid-step and sets no status at all."""
    minutes = tw.GATE["timeout-minutes"]
    assert minutes * 60 >= rejudge.REJUDGE_BUDGET_S + 15 * 60
    assert rejudge.SHARD_TIMEOUT_S <= rejudge.REJUDGE_BUDGET_S
    verdict_step = tw.step(tw.GATE, "Verdict")
    assert "--rejudge-budget-s" not in verdict_step["run"]  # the default is the one checked here


# --- row 8: malformed inputs are errors with their reason ----------------------------------------


@pytest.mark.parametrize("benchmarks", [5, "fail", None, {"a": {"verdict": "fail"}}])
def test_benchmarks_that_is_not_a_list_is_an_error_not_a_type_error(tmp_path, benchmarks):
    path = tmp_path / "ab.json"
    body = {"schema": 1, "status": "pass", "benchmarks": benchmarks}
    path.write_text(json.dumps(body), encoding="utf-8")
    status, reason = verdict.status_from_json(path, 0)
    assert status == "error"
    assert "not a list" in reason


def test_a_malformed_shard_json_reaches_the_status_and_the_summary(tmp_path):
    tpc.shard(tmp_path / "shards", "cuda", 0, "ab")
    body = {"schema": 1, "status": "pass", "benchmarks": 5}
    (tmp_path / "shards" / "bench-cuda-0" / "data" / "ab.json").write_text(json.dumps(body))
    gh = tpc.FakeGitHub()
    assert verdict.run(tpc.verdict_args(tmp_path), tpc.PR_ENV, gh) == 1
    assert [s["state"] for s in statuses(gh)] == ["error"]
    assert "`benchmarks` is int, not a list" in summary(tmp_path)


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("NEEDS", "{", "NEEDS is not JSON"),
        ("NEEDS", "[]", "NEEDS is not an object"),
        ("PR_NUMBER", "42abc", "PR_NUMBER '42abc' is not a whole number"),
        ("RUN_ATTEMPT", "3rd", "RUN_ATTEMPT '3rd' is not a whole number"),
    ],
    ids=["needs-not-json", "needs-not-object", "pr-number", "run-attempt"],
)
def test_a_malformed_environment_is_an_error_with_its_reason(tmp_path, name, value, reason):
    tpc.shard(tmp_path / "shards", "cuda", 0, "ab", ab_status="pass")
    gh = tpc.FakeGitHub()
    assert verdict.run(tpc.verdict_args(tmp_path), {**tpc.PR_ENV, name: value}, gh) == 1
    assert [s["state"] for s in statuses(gh)] == ["error"]
    assert reason in summary(tmp_path)


def test_a_malformed_gate_exit_is_an_error_not_an_argparse_exit(tmp_path):
    tpc.shard(tmp_path / "shards", "cuda", 0, "history")
    tpc.gate_json(tmp_path / "gate.json", "pass")
    env = {**tpc.PR_ENV, "EVENT_NAME": "push", "PR_NUMBER": "", "NEEDS": "{}"}
    argv = ["--mode", "history", "--shards", str(tmp_path / "shards"), "--gate-exit", "two"]
    argv += ["--gate-json", str(tmp_path / "gate.json"), "--out", str(tmp_path / "out")]
    argv += ["--comment-dir", str(tmp_path / "pr-comment")]
    gh = tpc.FakeGitHub()
    assert verdict.main(argv, env, gh) == 1
    assert [s["state"] for s in statuses(gh)] == ["error"]
    assert "--gate-exit 'two' is not a whole number" in summary(tmp_path)


def test_a_malformed_repository_still_writes_the_summary(tmp_path):
    tpc.shard(tmp_path / "shards", "cuda", 0, "ab", ab_status="pass")
    env = {**tpc.PR_ENV, "GITHUB_REPOSITORY": "not a repository"}
    assert verdict.run(tpc.verdict_args(tmp_path), env, tpc.FakeGitHub()) == 1
    assert "no GitHub API: GITHUB_REPOSITORY 'not a repository'" in summary(tmp_path)


def test_a_pull_that_is_not_an_object_is_a_note_not_a_crash(tmp_path):
    tpc.shard(tmp_path / "shards", "cuda", 0, "ab", ab_status="fail")
    gh = tpc.FakeGitHub(pull=["not", "a", "pull"])
    assert verdict.run(tpc.verdict_args(tmp_path), tpc.PR_ENV, gh) == 1
    assert [s["state"] for s in statuses(gh)] == ["failure"]
    assert "the API answered no object" in summary(tmp_path)


# --- row 8: the last resort -----------------------------------------------------------------------


def _argv(tmp_path: Path) -> list[str]:
    return ["--mode", "ab", "--shards", str(tmp_path / "shards"), "--out", str(tmp_path / "out"),
            "--comment-dir", str(tmp_path / "pr-comment")]  # fmt: skip


def test_an_unforeseen_exception_still_sets_error_and_writes_the_summary(
    tmp_path, monkeypatch, capsys
):
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("something nobody foresaw")

    monkeypatch.setattr(verdict, "judge", broken)
    gh = tpc.FakeGitHub()
    assert verdict.main(_argv(tmp_path), tpc.PR_ENV, gh) == 1
    [body] = statuses(gh)
    assert (body["state"], body["context"]) == ("error", "phasebench/gate")
    assert "verdict.py stopped" in body["description"]
    text = summary(tmp_path)
    assert text.startswith("### phasebench gate: ERROR")
    assert "verdict.py stopped on RuntimeError: something nobody foresaw" in text
    assert "re-run the gate job" in text
    assert "::error::verdict.py stopped on RuntimeError" in capsys.readouterr().err


def test_the_last_resort_survives_an_api_that_fails_too(tmp_path, monkeypatch):
    monkeypatch.setattr(verdict, "judge", lambda *a, **k: 1 / 0)

    def down(method: str, url: str, body: Any, headers: Any) -> tuple[int, Any]:
        raise OSError("the network is gone")

    assert verdict.main(_argv(tmp_path), tpc.PR_ENV, down) == 1
    assert "ZeroDivisionError" in summary(tmp_path)


# --- row 9: an unmeasured run never overwrites a measured verdict --------------------------------


def dependabot_env(**overrides: str) -> dict[str, str]:
    """A maintainer reopened Dependabot's PR #42: a write token, and no shard ran."""
    env = {**tpc.PR_ENV, "PR_AUTHOR": "dependabot[bot]", "HEAD_BRANCH": "dependabot/pip/torch"}
    env["NEEDS"] = json.dumps({"bench-cuda": {"result": "skipped"}})
    return {**env, **overrides}


FORK_ENV = dependabot_env(PR_AUTHOR="contributor", HEAD_REPOSITORY="contributor/phasebench")


@pytest.mark.parametrize("env", [dependabot_env(), FORK_ENV], ids=["dependabot", "fork"])
@pytest.mark.parametrize("state", ["success", "failure", "error"])
def test_a_run_that_measured_nothing_keeps_the_dispatchs_verdict(tmp_path, env, state):
    measured = tpc.gate_status(state, "set by a maintainer's dispatch")
    gh = tpc.FakeGitHub(statuses=[measured])
    assert verdict.run(tpc.verdict_args(tmp_path), env, gh) == 1  # this run judged nothing
    assert statuses(gh) == []
    text = summary(tmp_path)
    assert f"phasebench/gate left as it is on {SHA[:12]} ({state}:" in text
    assert "only a maintainer's dispatch benchmarks" in text


@pytest.mark.parametrize(
    ("env", "why"),
    [(dependabot_env(), "Dependabot's head"), (FORK_ENV, "a fork's head")],
    ids=["dependabot", "fork"],
)
def test_without_a_status_it_sets_error_needs_a_maintainers_dispatch(tmp_path, env, why):
    gh = tpc.FakeGitHub(statuses=[])
    verdict.run(tpc.verdict_args(tmp_path), env, gh)
    [body] = statuses(gh)
    assert body["state"] == "error"
    assert body["description"] == verdict.unmeasured_description(why)
    assert "needs a maintainer's dispatch" in body["description"]
    assert len(body["description"]) <= 140
    assert summary(tmp_path).startswith(f"### phasebench gate: ERROR: not measured ({why})")


def test_a_status_of_that_name_from_someone_else_is_not_a_measured_verdict(tmp_path):
    gh = tpc.FakeGitHub(statuses=[tpc.gate_status("success", "trust me", login="mallory")])
    verdict.run(tpc.verdict_args(tmp_path), dependabot_env(), gh)
    assert [s["state"] for s in statuses(gh)] == ["error"]


def test_statuses_that_cannot_be_read_are_left_alone(tmp_path):
    gh = tpc.FakeGitHub(status={("GET", f"/commits/{SHA}/statuses"): 404})
    assert verdict.run(tpc.verdict_args(tmp_path), dependabot_env(), gh) == 1
    assert statuses(gh) == []
    assert "its statuses could not be read" in summary(tmp_path)


def test_the_last_resort_on_such_a_head_keeps_the_verdict_too(tmp_path, monkeypatch):
    monkeypatch.setattr(verdict, "judge", lambda *a, **k: 1 / 0)
    gh = tpc.FakeGitHub(statuses=[DISPATCHED])
    assert verdict.main(_argv(tmp_path), dependabot_env(), gh) == 1
    assert statuses(gh) == []


@pytest.mark.parametrize(
    ("env", "measured", "state"),
    [
        ({**tpc.PR_ENV, "NEEDS": json.dumps({"bench-cuda": {"result": "skipped"}})}, None, "error"),
        ({**tpc.PR_ENV, "PR_AUTHOR": "dependabot[bot]"}, "fail", "failure"),
    ],
    ids=["own-branch-unmeasured", "dependabot-measured"],
)
def test_other_runs_set_their_verdict_whatever_stands(tmp_path, env, measured, state):
    """A branch of this repository measures itself; a run that did measure sets its verdict."""
    if measured is not None:
        tpc.shard(tmp_path / "shards", "cuda", 0, "ab", ab_status=measured)
    gh = tpc.FakeGitHub(statuses=[DISPATCHED])
    verdict.run(tpc.verdict_args(tmp_path), env, gh)
    assert [s["state"] for s in statuses(gh)] == [state]


def test_a_dispatch_that_measured_nothing_for_a_fork_keeps_an_earlier_dispatchs_verdict(tmp_path):
    fork = tpc.recorded("pull_57_fork.json")
    env = {**tpc.PR_ENV, "EVENT_NAME": "workflow_dispatch", "PR_NUMBER": "57",
           "DISPATCH_SHA": fork["head"]["sha"], "HEAD_SHA": "0" * 40,
           "NEEDS": json.dumps({"bench-cuda": {"result": "skipped"}})}  # fmt: skip
    gh = tpc.FakeGitHub(pull=fork, statuses=[DISPATCHED])
    assert verdict.run(tpc.verdict_args(tmp_path), env, gh) == 1
    assert statuses(gh) == []
