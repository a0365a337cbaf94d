"""Spec of the sticky PR comment (.github/scripts/pr_comment.py), against recorded API payloads.

The commenter holds a token that can write PR comments, and everything in the artifact it reads
was written by the pull request's own code; these tests pin down what it believes and posts.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "github"
SHA = "4f2a9c0d1e7b3a5f6c8d9e0a1b2c3d4e5f6a7b8c"


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

    def __init__(self, pull=None, comments=None, status=None):
        self.pull = recorded("pull_42.json") if pull is None else pull
        self.comments = recorded("issue_comments_42.json") if comments is None else comments
        self.status = status or {}
        self.calls = []

    def __call__(self, method, url, body, headers):
        path = url.split("/repos/phasebench/phasebench", 1)[1]
        self.calls.append((method, path, json.loads(body) if body else None, dict(headers)))
        status = self.status.get((method, path.split("?")[0]), 200)
        if method == "GET" and path.startswith("/pulls/"):
            return status, self.pull
        if method == "GET" and "/comments" in path:
            return status, self.comments if "page=1" in path else []
        return (201 if method == "POST" else status), {"id": 9999}


def event_env(**overrides):
    run = recorded("workflow_run_event.json")["workflow_run"]
    env = {
        "GITHUB_TOKEN": "ghs_test",
        "GITHUB_REPOSITORY": "phasebench/phasebench",
        "GITHUB_API_URL": "https://api.github.com",
        "RUN_HEAD_SHA": run["head_sha"],
        "RUN_PULL_REQUESTS": json.dumps(run["pull_requests"]),
        "RUN_URL": run["html_url"],
        "RUN_CONCLUSION": run["conclusion"],
    }
    env.update(overrides)
    return env


def write_artifact(
    tmp_path, summary="| bench | verdict |\n|---|---|\n| prefill | fail |\n", **meta
):
    fields = {
        "schema": 1,
        "pr_number": 42,
        "head_sha": SHA,
        "gate": "fail",
        "accepted": False,
        "classes": ["cuda"],
    }
    fields.update(meta)
    (tmp_path / "pr.json").write_text(json.dumps(fields), encoding="utf-8")
    (tmp_path / "summary.md").write_text(summary, encoding="utf-8")
    return tmp_path


def test_updates_the_bots_own_sticky_comment_and_never_a_humans(tmp_path):
    gh = FakeGitHub()
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
        ({"schema": 2}, "schema 1"),
        ({"pr_number": "42"}, "pr_number"),
        ({"pr_number": True}, "pr_number"),
        ({"pr_number": -1}, "pr_number"),
        ({"head_sha": "HEAD"}, "head_sha"),
        ({"gate": "rm -rf /"}, "gate"),
        ({"accepted": "yes"}, "accepted"),
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
    body = pc.render_comment(payload, run_url="https://example.invalid/run", conclusion="success")
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


def test_an_accepted_regression_says_so():
    payload = pc.Payload(42, SHA, "fail", True, ("cuda", "mps"), "summary")
    body = pc.render_comment(payload, run_url="u", conclusion="success")
    assert "accepted" in body
    assert "cuda, mps" in body


def test_an_api_refusal_is_an_error_not_a_silent_success(tmp_path):
    gh = FakeGitHub(status={("PATCH", "/issues/comments/3102"): 403})
    with pytest.raises(pc.CommentError, match="HTTP 403"):
        pc.post(write_artifact(tmp_path), event_env(), gh)


def test_a_malformed_repository_name_is_refused(tmp_path):
    with pytest.raises(pc.CommentError, match="owner/name"):
        pc.post(write_artifact(tmp_path), event_env(GITHUB_REPOSITORY="a/b/../c"), FakeGitHub())


def test_the_real_transport_refuses_plain_http():
    with pytest.raises(pc.CommentError, match="non-https"):
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


def _load_verdict():
    scripts = str(ROOT / ".github" / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)  # verdict.py imports pr_comment as its sibling
    spec = importlib.util.spec_from_file_location("verdict", ROOT / ".github/scripts/verdict.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


verdict = _load_verdict()


def verdict_args(tmp_path, gate_exit, summary="| x | fail |\n"):
    (tmp_path / "current" / "cuda").mkdir(parents=True)
    (tmp_path / "summary.md").write_text(summary, encoding="utf-8")
    return verdict.argparse.Namespace(
        gate_exit=gate_exit,
        classes_from=tmp_path / "current",
        summary=tmp_path / "summary.md",
        comment_dir=tmp_path / "pr-comment",
    )


PR_ENV = {
    "EVENT_NAME": "pull_request",
    "PR_NUMBER": "42",
    "HEAD_SHA": SHA,
    "GITHUB_TOKEN": "ghs_test",
    "GITHUB_REPOSITORY": "phasebench/phasebench",
}


@pytest.mark.parametrize(
    ("gate_exit", "accepted", "word", "passes"),
    [
        (0, False, "pass", True),
        (1, False, "fail", False),
        (1, True, "fail", True),
        (2, True, "error", False),
        (137, False, "error", False),
    ],
)
def test_the_check_fails_on_a_regression_unless_accepted_and_never_on_an_unjudged_gate(
    gate_exit, accepted, word, passes
):
    assert verdict.decide(gate_exit, accepted) == (word, passes)


def test_a_regression_without_the_label_fails_the_check_and_writes_the_comment_artifact(tmp_path):
    args = verdict_args(tmp_path, 1)
    assert verdict.run(args, PR_ENV, FakeGitHub()) == 1  # recorded PR has only run-benchmarks
    meta = json.loads((tmp_path / "pr-comment" / "pr.json").read_text())
    assert meta == {
        "schema": 1,
        "pr_number": 42,
        "head_sha": SHA,
        "gate": "fail",
        "accepted": False,
        "classes": ["cuda"],
    }
    # What verdict.py writes is exactly what the commenter accepts.
    assert pc.Payload.from_dir(tmp_path / "pr-comment").gate == "fail"


def test_the_label_read_at_gate_time_accepts_the_regression(tmp_path):
    pull = recorded("pull_42.json")
    pull["labels"].append({"id": 7002, "name": "perf-regression-accepted"})
    args = verdict_args(tmp_path, 1)
    assert verdict.run(args, PR_ENV, FakeGitHub(pull=pull)) == 0
    assert json.loads((tmp_path / "pr-comment" / "pr.json").read_text())["accepted"] is True


def test_a_passing_gate_needs_no_api_call(tmp_path):
    gh = FakeGitHub()
    assert verdict.run(verdict_args(tmp_path, 0), PR_ENV, gh) == 0
    assert gh.calls == []


def test_on_main_a_regression_fails_and_no_comment_artifact_is_written(tmp_path):
    args = verdict_args(tmp_path, 1)
    assert verdict.run(args, {"EVENT_NAME": "push"}, FakeGitHub()) == 1
    assert not (tmp_path / "pr-comment").exists()
