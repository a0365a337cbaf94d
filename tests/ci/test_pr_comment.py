"""Spec of the sticky PR comment (.github/scripts/pr_comment.py), against recorded API payloads.

The commenter holds a token that can write PR comments, and everything in the artifact it reads
was written by the pull request's own code; these tests pin down what it believes and posts.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "github"
SHA = "4f2a9c0d1e7b3a5f6c8d9e0a1b2c3d4e5f6a7b8c"


SCRIPTS = str(ROOT / ".github" / "scripts")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)  # the scripts import their siblings (github_api, ...)


def _load():
    spec = importlib.util.spec_from_file_location(
        "pr_comment", ROOT / ".github" / "scripts" / "pr_comment.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pr_comment"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


pc = _load()


def recorded(name):
    return json.loads((DATA / name).read_text(encoding="utf-8"))


class FakeGitHub:
    """A transport that answers from recorded payloads and records every request."""

    def __init__(self, pull=None, comments=None, status=None, *, statuses=None, events=None,
                 runs=None, permissions=None):  # fmt: skip
        self.pull = recorded("pull_42.json") if pull is None else pull
        self.comments = recorded("issue_comments_42.json") if comments is None else comments
        self.status = status or {}
        self.commit_statuses = statuses or []
        self.events = events or []
        self.runs = runs or []
        self.permissions = permissions or {}
        self.calls = []

    def __call__(self, method, url, body, headers):  # noqa: PLR0911 - a return per endpoint
        path = url.split("/repos/phasebench/phasebench", 1)[1]
        self.calls.append((method, path, json.loads(body) if body else None, dict(headers)))
        bare = path.split("?")[0]
        status = self.status.get((method, bare), 200)
        if isinstance(status, list):  # answers in turn: retries
            status = status.pop(0) if len(status) > 1 else status[0]
        if method == "GET" and path.startswith("/pulls/"):
            return status, self.pull
        if method == "GET" and bare.endswith("/statuses"):
            return status, self.commit_statuses
        if method == "GET" and bare.endswith("/events"):
            return status, self.events if "page=1" in path else []
        if method == "GET" and bare == "/actions/runs":
            return status, {"total_count": len(self.runs), "workflow_runs": self.runs}
        if method == "GET" and bare.startswith("/collaborators/"):
            login = bare.split("/")[2]
            return status, {"permission": self.permissions.get(login, "read"), "user": {}}
        if method == "GET" and "/comments" in path:
            return status, self.comments if "page=1" in path else []
        if (method, path.split("?")[0]) not in self.status and method == "POST":
            status = 201
        return status, {"id": 9999}


def event_env(event="workflow_run_event.json", **overrides):
    run = recorded(event)["workflow_run"]
    env = {
        "GITHUB_TOKEN": "ghs_test",
        "GITHUB_REPOSITORY": "phasebench/phasebench",
        "GITHUB_API_URL": "https://api.github.com",
        "RUN_HEAD_SHA": run["head_sha"],
        "RUN_HEAD_REPOSITORY": run["head_repository"]["full_name"],
        "RUN_HEAD_BRANCH": run["head_branch"],
        "RUN_ATTEMPT": str(run["run_attempt"]),
        "RUN_PULL_REQUESTS": json.dumps(run["pull_requests"]),
        "RUN_URL": run["html_url"],
        "RUN_CONCLUSION": run["conclusion"],
        "DEFAULT_BRANCH": "main",
    }
    env.update(overrides)
    return env


def write_artifact(
    tmp_path, summary="| bench | verdict |\n|---|---|\n| prefill | fail |\n", **meta
):
    fields = {
        "schema": 3,
        "pr_number": 42,
        "head_sha": SHA,
        "head_repository": "phasebench/phasebench",
        "head_branch": "fuse-sync",
        "run_attempt": 1,
        "classes": ["cuda"],
    }
    fields.update(meta)
    (tmp_path / "pr.json").write_text(json.dumps(fields), encoding="utf-8")
    (tmp_path / "summary.md").write_text(summary, encoding="utf-8")
    return tmp_path


def gate_status(state="failure", description="regression found", login="github-actions[bot]"):
    """One entry of `GET /commits/{sha}/statuses`."""
    return {
        "state": state,
        "context": "phasebench/gate",
        "description": description,
        "creator": {"login": login},
    }


def test_updates_the_bots_own_sticky_comment_and_never_a_humans(tmp_path):
    gh = FakeGitHub(statuses=[gate_status()])
    result = pc.post(write_artifact(tmp_path), event_env(), gh)
    assert result == "updated comment 3102 on PR #42"
    method, path, body, headers = gh.calls[-1]
    assert (method, path) == ("PATCH", "/issues/comments/3102")
    assert body["body"].startswith(pc.MARKER)
    assert "| prefill | fail |" in body["body"]
    assert "regression found" in body["body"]
    assert headers["Authorization"] == "Bearer ghs_test"


def test_creates_the_comment_when_there_is_none_yet(tmp_path):
    gh = FakeGitHub(comments=[c for c in recorded("issue_comments_42.json") if c["id"] != 3102])
    assert pc.post(write_artifact(tmp_path), event_env(), gh).startswith("created")
    assert [(m, p) for m, p, _, _ in gh.calls if m != "GET"] == [("POST", "/issues/42/comments")]


def test_a_fork_run_without_listed_pull_requests_is_checked_against_the_prs_head(tmp_path):
    gh = FakeGitHub()
    assert pc.post(write_artifact(tmp_path), event_env(RUN_PULL_REQUESTS="[]"), gh).startswith(
        "updated"
    )


def test_an_artifact_naming_another_pr_than_the_run_lists_is_refused(tmp_path):
    gh = FakeGitHub()
    with pytest.raises(pc.CommentError, match="not among the run's PRs"):
        pc.post(write_artifact(tmp_path, pr_number=7), event_env(), gh)
    assert all(m == "GET" for m, *_ in gh.calls)


def test_an_artifact_naming_another_commit_than_the_run_tested_is_refused(tmp_path):
    with pytest.raises(pc.CommentError, match="run tested"):
        pc.post(write_artifact(tmp_path, head_sha="f" * 40), event_env(), FakeGitHub())


def test_a_pr_whose_head_moved_on_gets_no_stale_comment(tmp_path):
    pull = recorded("pull_42.json")
    pull["head"]["sha"] = "a" * 40
    gh = FakeGitHub(pull=pull)
    result = pc.post(write_artifact(tmp_path), event_env(RUN_PULL_REQUESTS="[]"), gh)
    assert result.startswith("not commenting: PR #42 has moved on")
    assert all(m == "GET" for m, *_ in gh.calls)


def test_a_closed_pr_gets_no_comment(tmp_path):
    pull = recorded("pull_42.json")
    pull["state"] = "closed"
    assert "is closed" in pc.post(write_artifact(tmp_path), event_env(), FakeGitHub(pull=pull))


def test_no_artifact_means_nothing_to_post(tmp_path):
    gh = FakeGitHub()
    assert "nothing to post" in pc.post(tmp_path, event_env(), gh)
    assert gh.calls == []


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"schema": 2}, "schema 3"),
        ({"head_repository": "a/b/c"}, "head_repository"),
        ({"head_branch": "x\nmain"}, "head_branch"),
        ({"run_attempt": 0}, "run_attempt"),
        ({"pr_number": "42"}, "pr_number"),
        ({"pr_number": True}, "pr_number"),
        ({"pr_number": -1}, "pr_number"),
        ({"head_sha": "HEAD"}, "head_sha"),
        ({"classes": ["../etc"]}, "classes"),
    ],
)
def test_a_malformed_pr_json_is_refused(tmp_path, meta, message):
    with pytest.raises(pc.CommentError, match=message):
        pc.Payload.from_dir(write_artifact(tmp_path, **meta))


def test_an_oversized_or_non_json_pr_json_is_refused(tmp_path):
    write_artifact(tmp_path)
    (tmp_path / "pr.json").write_text(" " * (pc.MAX_JSON_BYTES + 1), encoding="utf-8")
    with pytest.raises(pc.CommentError, match="over"):
        pc.Payload.from_dir(tmp_path)
    (tmp_path / "pr.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(pc.CommentError, match="not JSON"):
        pc.Payload.from_dir(tmp_path)


def test_a_symlinked_summary_is_refused(tmp_path):
    write_artifact(tmp_path)
    (tmp_path / "summary.md").unlink()
    (tmp_path / "summary.md").symlink_to("/etc/passwd")
    with pytest.raises(pc.CommentError, match=r"summary\.md"):
        pc.Payload.from_dir(tmp_path)


def test_the_summary_is_truncated_below_githubs_comment_limit(tmp_path):
    line = "| prefill | 1.0 ms | pass |\n"
    payload = pc.Payload.from_dir(write_artifact(tmp_path, summary=line * 20_000))
    body = pc.render_comment(
        payload, run_url="https://e.invalid/run", conclusion="success", gate=None, trusted=True
    )
    assert len(body) < 65_536
    assert "truncated" in body
    assert body.count(pc.MARKER) == 1


def test_mentions_control_characters_and_forged_markers_are_neutralised():
    text = f"ping @octocat and @org/team\x1b[31m red \u202e {pc.MARKER} <!-- hidden -->"
    cleaned = pc.clean_markdown(text)
    assert "@octocat" not in cleaned
    assert "@\u200boctocat" in cleaned
    assert "\x1b" not in cleaned
    assert "\u202e" not in cleaned
    assert pc.MARKER not in cleaned
    assert "<!--" not in cleaned


def test_the_gate_line_comes_from_the_commit_status_not_the_artifact():
    payload = pc.Payload(42, SHA, "phasebench/phasebench", "t", 1, ("cuda", "mps"), "s")
    line = "regression accepted by the perf-regression-accepted label"
    gate = pc.gate_status([gate_status("success", line)])
    body = pc.render_comment(payload, run_url="u", conclusion="success", gate=gate, trusted=True)
    assert f"passed: {line}" in body
    assert "cuda, mps" in body
    # A status of the same context set by someone else's token is not the gate's.
    assert pc.gate_status([gate_status("success", "ok", login="mallory")]) is None


def test_an_api_refusal_is_an_error_not_a_silent_success(tmp_path):
    gh = FakeGitHub(status={("PATCH", "/issues/comments/3102"): 403})
    with pytest.raises(pc.ApiError, match="HTTP 403"):
        pc.post(write_artifact(tmp_path), event_env(), gh)


def test_a_malformed_repository_name_is_refused(tmp_path):
    with pytest.raises(pc.ApiError, match="owner/name"):
        pc.post(write_artifact(tmp_path), event_env(GITHUB_REPOSITORY="a/b/../c"), FakeGitHub())


def test_the_real_transport_refuses_plain_http():
    with pytest.raises(pc.ApiError, match="non-https"):
        pc.urllib_transport("GET", "http://api.github.com/x", None, {})


def test_main_reports_errors_on_one_line_and_exits_1(tmp_path, monkeypatch, capsys):
    write_artifact(tmp_path, head_sha="f" * 40)
    for key, value in event_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(pc, "urllib_transport", FakeGitHub())
    assert pc.main(["--artifact", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("::error::pr comment:")
    assert err.count("\n") == 1


def test_a_fork_pr_is_bound_by_head_commit_repository_and_branch(tmp_path):
    fork = recorded("pull_57_fork.json")
    run = recorded("workflow_run_event_fork.json")["workflow_run"]
    artifact = write_artifact(
        tmp_path,
        pr_number=57,
        head_sha=run["head_sha"],
        head_repository="contributor/phasebench",
        head_branch="main",
        run_attempt=2,
    )
    gh = FakeGitHub(pull=fork, comments=[])
    env = event_env("workflow_run_event_fork.json")
    assert pc.post(artifact, env, gh).startswith("created the phasebench comment on PR #57")


@pytest.mark.parametrize(
    ("pull_change", "message"),
    [
        ({"repo": "mallory/phasebench"}, "not the run's contributor/phasebench:main"),
        ({"ref": "other"}, "not the run's contributor/phasebench:main"),
    ],
    ids=["other-repository", "other-branch"],
)
def test_a_pr_whose_head_repository_or_branch_differs_from_the_runs_is_refused(
    tmp_path, pull_change, message
):
    """Same commit, other PR: a fork can open a PR whose head is the very commit that ran."""
    fork = recorded("pull_57_fork.json")
    if "repo" in pull_change:
        fork["head"]["repo"]["full_name"] = pull_change["repo"]
    if "ref" in pull_change:
        fork["head"]["ref"] = pull_change["ref"]
    run = recorded("workflow_run_event_fork.json")["workflow_run"]
    artifact = write_artifact(
        tmp_path,
        pr_number=57,
        head_sha=run["head_sha"],
        head_repository="contributor/phasebench",
        head_branch="main",
        run_attempt=2,
    )
    gh = FakeGitHub(pull=fork)
    with pytest.raises(pc.CommentError, match=message):
        pc.post(artifact, event_env("workflow_run_event_fork.json"), gh)
    assert all(m == "GET" for m, *_ in gh.calls)


def test_an_artifact_naming_another_head_repository_than_the_run_is_refused(tmp_path):
    artifact = write_artifact(tmp_path, head_repository="contributor/phasebench")
    with pytest.raises(pc.CommentError, match="but the run tested"):
        pc.post(artifact, event_env(), FakeGitHub())


def test_an_artifact_of_an_earlier_attempt_gets_no_comment(tmp_path):
    gh = FakeGitHub()
    result = pc.post(write_artifact(tmp_path, run_attempt=1), event_env(RUN_ATTEMPT="2"), gh)
    assert result == "not commenting: the artifact is from attempt 1, this is attempt 2"
    assert all(m == "GET" for m, *_ in gh.calls)


# --- verdict.py ---------------------------------------------------------------------------------


def _load_verdict():
    scripts = str(ROOT / ".github" / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)  # verdict.py imports pr_comment as its sibling
    spec = importlib.util.spec_from_file_location("verdict", ROOT / ".github/scripts/verdict.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["verdict"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


verdict = _load_verdict()


def gate_json(path, status, verdicts=()):
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"schema": 1, "status": status, "benchmarks": [{"verdict": v} for v in verdicts]}
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("status", "exit_code", "expected"),
    [
        ("pass", 0, "pass"),
        ("no-baseline", 0, "no-baseline"),
        ("fail", 1, "fail"),
        ("inconclusive", 3, "inconclusive"),  # nothing could be decided: never a pass
        ("inconclusive", 0, "error"),
        ("error", 1, "error"),  # through nox: 2 ("cannot judge") arrives as 1
        ("error", 2, "error"),
        ("pass", 1, "error"),  # a pass that exited non-zero: something else broke
        ("fail", 0, "error"),
        ("weird", 0, "error"),
    ],
)
def test_the_status_comes_from_the_json_never_the_exit_code_alone(
    tmp_path, status, exit_code, expected
):
    path = gate_json(tmp_path / "gate.json", status)
    assert verdict.status_from_json(path, exit_code)[0] == expected


def test_an_inconclusive_gate_never_passes_and_no_label_accepts_it():
    assert not verdict.decide("inconclusive", accepted=False)
    assert not verdict.decide("inconclusive", accepted=True)
    assert "re-run" in verdict.headline("inconclusive", accepted=False)
    judgement = verdict.Judgement()
    judgement.worsen("inconclusive", "shard 1: busy")
    judgement.worsen("fail", "shard 2: a regression")
    assert judgement.status == "fail"  # a regression found elsewhere outweighs "undecided"


def test_a_missing_or_self_contradicting_json_is_an_error(tmp_path):
    assert verdict.status_from_json(tmp_path / "none.json", 1)[0] == "error"
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    assert verdict.status_from_json(tmp_path / "bad.json")[0] == "error"
    lying = gate_json(tmp_path / "lying.json", "pass", ["pass", "fail"])
    status, reason = verdict.status_from_json(lying, 0)
    assert status == "error"
    assert "1 failing verdict" in reason
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"schema": 9, "status": "pass"}), encoding="utf-8")
    assert verdict.status_from_json(schema, 0)[0] == "error"


def shard(root, cls, k, mode, *, outcome="success", ab_status=None, summary="| x | pass |\n"):
    folder = root / f"bench-{cls}-{k}"
    (folder / "data").mkdir(parents=True, exist_ok=True)
    meta = {
        "schema": 1,
        "class": cls,
        "shard": f"{k + 1}/2",
        "mode": mode,
        "outcome": outcome,
        "partial": outcome != "success",
    }
    (folder / "outcome.json").write_text(json.dumps(meta), encoding="utf-8")
    if ab_status is not None:
        gate_json(folder / "data" / "ab.json", ab_status)
        (folder / "data" / "summary.md").write_text(summary, encoding="utf-8")
    return root


def test_nothing_measured_is_an_error_whatever_the_event(tmp_path):
    needs = {"bench-mps": {"result": "skipped"}, "bench-cuda": {"result": "skipped"}}
    for mode in ("ab", "history"):
        judged, classes, _ = verdict.judge(mode, tmp_path / "absent", needs)
        assert judged.status == "error"
        assert "nothing was measured" in judged.notes[-1]
        assert classes == []
    assert not verdict.decide("error", accepted=True)


def test_ab_shards_combine_worst_first_and_a_missing_ab_json_is_an_error(tmp_path):
    shards = tmp_path / "shards"
    shard(shards, "cuda", 0, "ab", ab_status="pass")
    shard(shards, "cuda", 1, "ab", outcome="failure", ab_status="fail")  # nox exits 1
    shard(shards, "mps", 0, "ab", ab_status="no-baseline")
    judged, classes, sections = verdict.judge("ab", shards, {})
    assert (judged.status, classes, len(sections)) == ("fail", ["cuda", "mps"], 3)
    shard(shards, "mps", 1, "ab", outcome="cancelled")  # timed out before writing ab.json
    judged, _, _ = verdict.judge("ab", shards, {})
    assert judged.status == "error"
    assert any("partial" in note for note in judged.notes)


def test_a_failed_shard_job_is_an_error_even_when_the_others_passed(tmp_path):
    shards = shard(tmp_path / "shards", "cuda", 0, "history")
    path = gate_json(tmp_path / "gate.json", "pass")
    needs = {"bench-cuda": {"result": "failure"}, "bench-mps": {"result": "skipped"}}
    judged, _, _ = verdict.judge("history", shards, needs, gate_json=path, gate_exit=0)
    assert judged.status == "error"
    judged, _, _ = verdict.judge("history", shards, {}, gate_json=path, gate_exit=0)
    assert judged.status == "pass"


PR_ENV = {
    "EVENT_NAME": "pull_request",
    "PR_NUMBER": "42",
    "HEAD_SHA": SHA,
    "HEAD_REPOSITORY": "phasebench/phasebench",
    "HEAD_BRANCH": "fuse-sync",
    "RUN_ATTEMPT": "3",
    "RUN_URL": "https://github.com/phasebench/phasebench/actions/runs/1",
    "GITHUB_TOKEN": "ghs_test",
    "GITHUB_REPOSITORY": "phasebench/phasebench",
    "NEEDS": json.dumps({"bench-cuda": {"result": "success"}, "bench-mps": {"result": "skipped"}}),
}


def verdict_args(tmp_path, mode="ab"):
    return verdict.argparse.Namespace(
        mode=mode,
        shards=tmp_path / "shards",
        gate_json=tmp_path / "gate.json",
        gate_exit=None,
        summary=tmp_path / "summary.md",
        out=tmp_path / "out",
        comment_dir=tmp_path / "pr-comment",
        judge_dir=None,
        rejudged=tmp_path / "rejudged",
    )


def statuses(gh):
    return [(path, body) for method, path, body, _ in gh.calls if path.startswith("/statuses/")]


def test_a_regression_fails_the_check_sets_the_status_and_writes_the_comment_artifact(tmp_path):
    shard(tmp_path / "shards", "cuda", 0, "ab", outcome="failure", ab_status="fail")
    gh = FakeGitHub()  # the recorded PR carries only run-benchmarks
    assert verdict.run(verdict_args(tmp_path), PR_ENV, gh) == 1
    [(path, body)] = statuses(gh)
    assert path == f"/statuses/{SHA}"
    assert (body["state"], body["context"]) == ("failure", "phasebench/gate")
    assert len(body["description"]) <= 140
    meta = json.loads((tmp_path / "pr-comment" / "pr.json").read_text())
    assert meta["run_attempt"] == 3
    assert meta["classes"] == ["cuda"]
    assert "gate" not in meta  # the commenter reads the verdict from the status, not from here
    # What verdict.py writes is exactly what the commenter accepts.
    assert pc.Payload.from_dir(tmp_path / "pr-comment").head_branch == "fuse-sync"


def test_the_label_read_at_gate_time_accepts_the_regression_without_new_measurements(tmp_path):
    shard(tmp_path / "shards", "cuda", 0, "ab", outcome="failure", ab_status="fail")
    gh = accepting_github(recorded("pull_42.json"))
    assert verdict.run(verdict_args(tmp_path), PR_ENV, gh) == 0
    assert statuses(gh)[0][1]["state"] == "success"
    assert "accepted by @reviewer" in (tmp_path / "out" / "summary.md").read_text()


def accepting_github(pull, **kwargs):
    """The API of a PR that a maintainer labelled after the newest push (recorded payloads)."""
    pull["labels"].append({"id": 7002, "name": "perf-regression-accepted"})
    return FakeGitHub(
        pull=pull,
        events=recorded("issue_events_42.json"),
        runs=recorded("runs_for_head_42.json")["workflow_runs"],
        permissions={"reviewer": "write", "maintainer": "admin", "triager": "read"},
        **kwargs,
    )


def test_an_error_is_shown_as_an_error_and_no_label_accepts_it(tmp_path):
    shard(tmp_path / "shards", "cuda", 0, "ab", ab_status="error")
    gh = accepting_github(recorded("pull_42.json"))
    assert verdict.run(verdict_args(tmp_path), PR_ENV, gh) == 1
    assert statuses(gh)[0][1]["state"] == "error"
    assert "ERROR" in (tmp_path / "out" / "summary.md").read_text()


def test_a_read_only_token_cannot_set_the_status_and_the_check_still_fails(tmp_path, capsys):
    """A fork's pull_request run: nothing measured, and a 403 on the status."""
    gh = FakeGitHub(status={("POST", f"/statuses/{SHA}"): 403})
    env = {**PR_ENV, "NEEDS": json.dumps({"bench-cuda": {"result": "skipped"}})}
    assert verdict.run(verdict_args(tmp_path), env, gh) == 1
    out = capsys.readouterr().out
    assert "could not set phasebench/gate" in out
    assert "nothing was measured" in out


def test_on_main_the_history_gate_decides_and_no_comment_artifact_is_written(tmp_path):
    shard(tmp_path / "shards", "cuda", 0, "history")
    gate_json(tmp_path / "gate.json", "fail", ["fail"])
    (tmp_path / "summary.md").write_text("| decode | fail |\n", encoding="utf-8")
    args = verdict_args(tmp_path, mode="history")
    args.gate_exit = 1
    env = {
        "EVENT_NAME": "push",
        "HEAD_SHA": "d" * 40,
        "GITHUB_REPOSITORY": "phasebench/phasebench",
        "NEEDS": "{}",
    }
    gh = FakeGitHub()
    assert verdict.run(args, env, gh) == 1
    assert not (tmp_path / "pr-comment").exists()
    assert "| decode | fail |" in (tmp_path / "out" / "summary.md").read_text()
    assert [c[1] for c in gh.calls if c[0] == "POST"] == [f"/statuses/{'d' * 40}"]
    assert not any(c[1].startswith(("/pulls/", "/issues/")) for c in gh.calls)  # no label lookup


FAKE_REPORTS_AB = """
import argparse, json, pathlib
p = argparse.ArgumentParser()
p.add_argument("--base"); p.add_argument("--head"); p.add_argument("--out")
a, _ = p.parse_known_args()  # the real one takes --settings own
head = json.loads(pathlib.Path(a.head).read_text())
status = head["fake_status"]
out = pathlib.Path(a.out)
(out / "ab.json").write_text(json.dumps({"schema": 1, "status": status, "benchmarks": []}))
(out / "summary.md").write_text("judged by the base: " + status)
"""


def test_ab_shards_are_judged_again_by_the_base_code_from_their_raw_json(tmp_path):
    """The runner's ab.json says pass; the base's reports.ab, on the same raw data, says fail."""
    judge_dir = tmp_path / "judge"
    (judge_dir / "reports").mkdir(parents=True)
    (judge_dir / "reports" / "__init__.py").write_text("")
    (judge_dir / "reports" / "ab.py").write_text(FAKE_REPORTS_AB)
    shards = shard(tmp_path / "shards", "cuda", 0, "ab", ab_status="pass")
    data = shards / "bench-cuda-0" / "data"
    (data / "base.json").write_text(json.dumps({"benchmarks": []}))
    (data / "head.json").write_text(json.dumps({"benchmarks": [], "fake_status": "fail"}))
    rejudge = verdict.rejudge_with(judge_dir, tmp_path / "rejudged")
    judged, _, sections = verdict.judge("ab", shards, {}, rejudge=rejudge)
    assert judged.status == "fail"
    assert any("the runner's ab.json said pass" in note for note in judged.notes)
    assert "judged by the base: fail" in sections[0]
    (data / "head.json").unlink()  # no raw data: nothing to judge, whatever ab.json claims
    judged, _, _ = verdict.judge("ab", shards, {}, rejudge=rejudge)
    assert judged.status == "error"


def _side(path, rounds):
    bench = {
        "group": "generate",
        "name": "test_generate[a]",
        "fullname": "benchmarks/test_generate.py::test_generate[a]",
        "params": {"model": "a"},
        "param": "a",
        "extra_info": {"schema": 1, "cell_id": "a", "measurement": "generate"},
        "options": {},
        "stats": {"data": rounds, "median": sorted(rounds)[len(rounds) // 2]},
    }
    machine = {"node": "n", "system": "Linux", "release": "6", "machine": "x86_64"}
    doc = {"machine_info": machine, "commit_info": {"id": "abc"}, "benchmarks": [bench]}
    path.write_text(json.dumps(doc), encoding="utf-8")


@pytest.mark.parametrize(("shift", "expected"), [(0.0, "pass"), (0.2, "fail")])
def test_the_real_reports_ab_rejudges_a_shard_from_the_judge_checkout(tmp_path, shift, expected):
    """The command line verdict.py runs in the gate job, against this tree's reports.ab."""
    shards = shard(tmp_path / "shards", "cuda", 0, "ab", ab_status="error")
    data = shards / "bench-cuda-0" / "data"
    rng = random.Random(7)
    shared = [0.01 * math.exp(rng.gauss(0, 0.3)) for _ in range(30)]
    _side(data / "base.json", [s * math.exp(rng.gauss(0, 0.01)) for s in shared])
    _side(data / "head.json", [s * (1 + shift) * math.exp(rng.gauss(0, 0.01)) for s in shared])
    rejudge = verdict.rejudge_with(ROOT, tmp_path / "rejudged")
    judged, _, _ = verdict.judge("ab", shards, {}, rejudge=rejudge)
    log = (tmp_path / "rejudged" / "bench-cuda-0" / "rejudge.log").read_text()
    assert judged.status == expected, log


def dispatch_env(**overrides):
    """The workflow_run event of a maintainer's dispatch: its own head is main, in this repo."""
    return event_env(
        RUN_EVENT="workflow_dispatch",
        RUN_HEAD_SHA="0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
        RUN_HEAD_REPOSITORY="phasebench/phasebench",
        RUN_HEAD_BRANCH="main",
        RUN_PULL_REQUESTS="[]",
        RUN_ATTEMPT="1",
        **overrides,
    )


def fork_artifact(tmp_path, **meta):
    fields = {
        "pr_number": 57,
        "head_sha": recorded("pull_57_fork.json")["head"]["sha"],
        "head_repository": "contributor/phasebench",
        "head_branch": "main",
    }
    fields.update(meta)
    return write_artifact(tmp_path, **fields)


def test_a_maintainers_dispatch_comments_on_the_fork_pr_whose_head_it_benchmarked(tmp_path):
    gh = FakeGitHub(pull=recorded("pull_57_fork.json"), comments=[])
    assert pc.post(fork_artifact(tmp_path), dispatch_env(), gh).startswith("created")


def test_a_dispatch_artifact_is_still_bound_to_the_prs_head_repository_and_branch(tmp_path):
    gh = FakeGitHub(pull=recorded("pull_57_fork.json"))
    with pytest.raises(pc.CommentError, match="not the run's"):
        pc.post(fork_artifact(tmp_path, head_repository="mallory/phasebench"), dispatch_env(), gh)
    moved = recorded("pull_57_fork.json")
    moved["head"]["sha"] = "b" * 40
    result = pc.post(fork_artifact(tmp_path), dispatch_env(), FakeGitHub(pull=moved))
    assert result.startswith("not commenting: PR #57 has moved on")


def test_runs_of_other_events_never_comment(tmp_path):
    with pytest.raises(pc.CommentError, match="'push' run does not comment"):
        pc.post(write_artifact(tmp_path), event_env(RUN_EVENT="push"), FakeGitHub())


def test_a_dispatch_for_a_fork_pr_takes_the_head_repository_and_branch_from_the_api(tmp_path):
    shard(tmp_path / "shards", "cuda", 0, "ab", ab_status="pass")
    fork = recorded("pull_57_fork.json")
    env = {
        **PR_ENV,
        "EVENT_NAME": "workflow_dispatch",
        "PR_NUMBER": "57",
        "DISPATCH_SHA": fork["head"]["sha"],
        "HEAD_SHA": "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",  # the dispatched branch's tip
        "HEAD_REPOSITORY": "phasebench/phasebench",  # the dispatch's own: not the PR's
        "HEAD_BRANCH": "main",
    }
    gh = FakeGitHub(pull=fork)
    assert verdict.run(verdict_args(tmp_path), env, gh) == 0
    payload = pc.Payload.from_dir(tmp_path / "pr-comment")
    assert (payload.head_repository, payload.head_branch) == ("contributor/phasebench", "main")
    assert statuses(gh)[0][0] == f"/statuses/{fork['head']['sha']}"
    env["DISPATCH_SHA"] = "f" * 40  # the maintainer reviewed an older commit
    assert verdict.run(verdict_args(tmp_path), env, FakeGitHub(pull=fork)) == 0
    assert "has moved on" in (tmp_path / "out" / "summary.md").read_text()


def test_the_real_gates_json_and_exit_code_read_back_as_its_own_status(tmp_path):
    """verdict.py and `python -m reports gate` agree on the JSON contract (status, exit)."""
    from reports.cli import main as reports_main  # noqa: PLC0415 - only this test needs it
    from reports.history.scale import write_synthetic_history  # noqa: PLC0415

    history = tmp_path / "history"
    write_synthetic_history(history, runs=6, benchmarks=3)
    code = reports_main(["gate", "--history", str(history), "--json", str(tmp_path / "g.json")])
    written = json.loads((tmp_path / "g.json").read_text())["status"]
    assert verdict.status_from_json(tmp_path / "g.json", code)[0] == written
    # what `nox -s gate` turns it into (`_run_verdict`: 1, 2 and 3 kept, anything else 2)
    nox_code = code if code in (0, 1, 2, 3) else 2
    assert verdict.status_from_json(tmp_path / "g.json", nox_code)[0] == written
