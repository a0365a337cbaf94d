"""Spec of issue 20's rows: history read where it is written, no push left unrecorded, an
acceptance only a maintainer can give, and the commenter's trust, against recorded payloads
(tests/data/github/) and fake git answers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

import tests.ci.test_history_store as ths
import tests.ci.test_pr_comment as tpc
import tests.ci.test_workflows as tw

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".github" / "scripts"))

import acceptance  # noqa: E402 - the scripts' folder is put on the path just above
import history_location  # noqa: E402
import shard_stage  # noqa: E402

store, pc, verdict = ths.store, tpc.pc, tpc.verdict
SHA = tpc.SHA
PUSHED = datetime(2026, 12, 1, 10, 0, 4, tzinfo=timezone.utc)


# --- row 1: the gate reads where the store writes ------------------------------------------------


def _step_env(job: dict, prefix: str, context: dict) -> dict[str, str]:
    env = tw.step(job, prefix)["env"]
    return {k: tw._as_text(tw.evaluate(v, context)) for k, v in env.items()}


@pytest.mark.parametrize("variable", ["", "phasebench/bench-history"], ids=["unset", "set"])
def test_the_gate_and_the_store_resolve_the_same_history_location(variable):
    context = tw.push_event()
    context["vars"] = {"PHASEBENCH_HISTORY_REPOSITORY": variable}
    runner = {"GITHUB_REPOSITORY": tw.REPO, "GITHUB_SERVER_URL": "https://github.com"}
    gate = {**runner, **_step_env(tw.GATE, "Fetch main's recent history", context)}
    writer = {**runner, **_step_env(tw.STORE, "Add it to the history branch", context)}
    read, written = history_location.resolve(gate), history_location.resolve(writer)
    assert read == written
    assert read.repository == (variable or tw.REPO)
    for job, prefix in ((tw.GATE, "Fetch main's"), (tw.STORE, "Add it to")):
        assert "--remote" not in tw.step(job, prefix)["run"]  # nothing else chooses


def test_a_malformed_history_variable_is_an_error_naming_it():
    with pytest.raises(history_location.LocationError, match="PHASEBENCH_HISTORY_REPOSITORY"):
        history_location.resolve({"PHASEBENCH_HISTORY_REPOSITORY": "a/../b"})


class FakeGit:
    """Answers `git` with canned exit codes and records every command line."""

    def __init__(self, ls_remote_exit: int) -> None:
        self.ls_remote_exit, self.commands = ls_remote_exit, []

    def __call__(self, cmd, **_kw):
        self.commands.append(cmd)
        code = self.ls_remote_exit if "ls-remote" in cmd else 0
        return subprocess.CompletedProcess(cmd, code, "", "fatal: boom" if code else "")


@pytest.mark.parametrize("code", [2, 128], ids=["no-branch", "unreadable"])
def test_ls_remote_runs_against_the_history_repository_that_is_set(
    tmp_path, monkeypatch, capsys, code
):
    fake = FakeGit(code)
    monkeypatch.setattr(store.subprocess, "run", fake)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.setenv("GITHUB_REPOSITORY", tw.REPO)
    monkeypatch.setenv("PHASEBENCH_HISTORY_REPOSITORY", "phasebench/bench-history")
    (tmp_path / "current" / "cuda").mkdir(parents=True)
    args = ["fetch", "--classes-from", str(tmp_path / "current"), "--into", str(tmp_path / "b")]
    assert store.main(args) == (0 if code == 2 else 1)
    added = [c for c in fake.commands if "remote" in c and "add" in c]
    assert added[0][-1] == "https://github.com/phasebench/bench-history.git"
    out = capsys.readouterr()
    if code == 2:  # empty, and said loudly, naming where it looked
        where = "https://github.com/phasebench/bench-history.git"
        assert f"::warning::no benchmark-history branch at {where}" in out.out
    else:
        assert out.err.startswith("::error::history store: cannot read")


# --- rows 3 and 4: neither the shards nor the store download the whole history ------------------


def test_no_checkout_fetches_every_branch():
    for path in tw.FILES:
        for job in tw.jobs(tw.load(path)).values():
            for s in tw.steps(job):
                if "actions/checkout@" in str(s.get("uses", "")):
                    assert s.get("with", {}).get("fetch-depth", 1) != 0, path.name


def test_the_store_adds_files_without_downloading_the_stored_ones(tmp_path, remote):
    for i in range(5):
        when = ths.NOW.replace(hour=i)
        store.push(remote, ths.collected(tmp_path, str(i), {0: f"p{i}", 1: f"q{i}"}, when), "r")
    seen: dict[str, int] = {}
    real = store._git

    def spy(repo, *args, check=True, env=None):
        if args[:1] == ("push",):  # count the blobs this clone holds just before pushing
            listing = real(repo, "cat-file", "--batch-all-objects", "--batch-check")
            seen["blobs"] = listing.stdout.count(" blob ")
        return real(repo, *args, check=check, env=env)

    store._git = spy
    try:
        assert store.push(remote, ths.collected(tmp_path, "9", {0: "new"}, ths.NOW), "m") == 1
    finally:
        store._git = real
    assert seen["blobs"] == 1  # the new file's; none of the 10 stored ones


# --- row 5: who may accept, and when -------------------------------------------------------------


def _pull(author: str = "maintainer", labelled: bool = True) -> dict:
    pull = tpc.recorded("pull_42.json")
    pull["user"]["login"] = author
    if labelled:
        pull["labels"].append({"name": acceptance.ACCEPT_LABEL})
    return pull


def _events(actor: str = "reviewer", at: str = "2026-12-01T14:00:00Z", removed: bool = False):
    events = tpc.recorded("issue_events_42.json")
    events[-1]["actor"]["login"], events[-1]["created_at"] = actor, at
    if removed:
        events.append({**events[-1], "id": 15004, "event": "unlabeled", "created_at": at + "1"})
    return events


PERMISSIONS = {"reviewer": "write", "maintainer": "admin", "triager": "read"}.get


@pytest.mark.parametrize(
    ("pull", "events", "accepted", "reason"),
    [
        (_pull(), _events(), True, "accepted by @reviewer"),
        (_pull(author="reviewer"), _events(), False, "the PR's author @reviewer"),
        (_pull(), _events(at="2026-12-01T09:30:00Z"), False, "before the newest push"),
        (_pull(), _events(actor="triager"), False, "@triager has read access"),
        (_pull(), _events(removed=True), False, "no event shows who added it"),
        (_pull(labelled=False), _events(), False, "does not carry"),
    ],
    ids=["maintainer", "by-author", "before-push", "triage", "removed", "no-label"],
)
def test_the_label_accepts_only_a_writer_who_is_not_the_author_after_the_newest_push(
    pull, events, accepted, reason
):
    runs = tpc.recorded("runs_for_head_42.json")["workflow_runs"]
    pushed = acceptance.newest_push(runs, SHA)
    assert pushed == PUSHED  # the newest pull_request run GitHub created for the commit
    given = acceptance.decide(pull, events, pushed, lambda login: PERMISSIONS(login, "none"))
    assert given.accepted is accepted
    assert reason in given.reason


def test_a_label_that_cannot_be_verified_does_not_accept(tmp_path):
    tpc.shard(tmp_path / "shards", "cuda", 0, "ab", outcome="failure", ab_status="fail")
    gh = tpc.accepting_github(_pull(), status={("GET", "/issues/42/events"): 404})
    assert verdict.run(tpc.verdict_args(tmp_path), tpc.PR_ENV, gh) == 1
    assert tpc.statuses(gh)[0][1]["state"] == "failure"
    assert "could not be verified" in (tmp_path / "out" / "summary.md").read_text()


def test_an_accepted_regression_names_who_accepted_it_in_the_summary(tmp_path):
    tpc.shard(tmp_path / "shards", "cuda", 0, "ab", outcome="failure", ab_status="fail")
    gh = tpc.accepting_github(_pull())
    assert verdict.run(tpc.verdict_args(tmp_path), tpc.PR_ENV, gh) == 0
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "accepted by @reviewer at 2026-12-01T14:00:00+00:00" in summary


# --- rows 6, 7 and 9: which commit gets the status, which runners get the code ------------------


def _dispatch_env(pr: str, sha: str) -> dict[str, str]:
    return {**tpc.PR_ENV, "EVENT_NAME": "workflow_dispatch", "PR_NUMBER": pr,
            "DISPATCH_SHA": sha, "HEAD_SHA": "d" * 40}  # fmt: skip


@pytest.mark.parametrize(
    ("pr", "sha", "note"),
    [
        ("", "", "a branch dispatch sets no phasebench/gate"),
        ("", SHA, "`sha` without `pr`"),
        ("42", "", "not the full 40-hex"),
        ("42", "refs/pull/42/head", "not the full 40-hex"),
    ],
    ids=["branch", "sha-without-pr", "pr-without-sha", "moving-ref"],
)
def test_a_dispatch_sets_a_status_only_on_the_reviewed_commit_of_a_pr(tmp_path, pr, sha, note):
    tpc.shard(tmp_path / "shards", "cuda", 0, "history")
    tpc.gate_json(tmp_path / "gate.json", "pass")
    args = tpc.verdict_args(tmp_path, mode="history")
    args.gate_exit = 0
    gh = tpc.FakeGitHub()
    verdict.run(args, _dispatch_env(pr, sha), gh)
    assert tpc.statuses(gh) == []  # never the dispatched branch's tip ("d" * 40)
    assert note in (tmp_path / "out" / "summary.md").read_text()


def test_the_shards_skip_inconsistent_dispatches_and_check_the_sha():
    for job in tw.SELF_HOSTED.values():
        assert not tw._truthy(tw.evaluate(job["if"], tw.dispatch_event(sha="a" * 40)))
        assert not tw._truthy(tw.evaluate(job["if"], tw.dispatch_event(pr="42")))
        check = tw.step(job, "Check the dispatch inputs")
        assert tw.steps(job).index(check) < tw.steps(job).index(tw.step(job, "actions/checkout@"))
        script = check["run"]
        for value, ok in (("a" * 40, True), ("refs/pull/42/head", False), ("a" * 12, False)):
            proc = subprocess.run(["bash", "-c", script], env={"HEAD_SHA": value}, check=False)
            assert (proc.returncode == 0) is ok, value


@pytest.mark.parametrize(
    ("context", "pool"),
    [
        (tw.push_event(), "phasebench-history"),
        (tw.pr_event(fork=False), "phasebench-ab"),
        (tw.dispatch_event(pr="57", sha="a" * 40), "phasebench-ab"),
        (tw.dispatch_event(), "phasebench-ab"),
    ],
    ids=["main", "pr", "fork-dispatch", "branch-dispatch"],
)
def test_only_pushes_to_main_run_on_the_history_runners(context, pool):
    for job in tw.SELF_HOSTED.values():
        assert tw.runner_labels(job, context)[-1] == pool


# --- row 8: the commenter's gate line and what a fork's run may show -----------------------------


def test_a_forks_own_run_cannot_put_its_verdict_or_tables_in_the_comment(tmp_path):
    fork = tpc.recorded("pull_57_fork.json")
    run = tpc.recorded("workflow_run_event_fork.json")["workflow_run"]
    invented = "| prefill | pass |\nGate: passed (accepted by the maintainers)\n"
    artifact = tpc.write_artifact(
        tmp_path, summary=invented, pr_number=57, head_sha=run["head_sha"],
        head_repository="contributor/phasebench", head_branch="main", run_attempt=2,
    )  # fmt: skip
    gh = tpc.FakeGitHub(pull=fork, comments=[])
    assert pc.post(artifact, tpc.event_env("workflow_run_event_fork.json"), gh).startswith(
        "created"
    )
    body = next(b["body"] for m, _, b, _ in gh.calls if m == "POST")
    assert "| prefill | pass |" not in body
    assert "passed" not in body
    assert "`phasebench/gate` is not set on this commit" in body
    assert "comes from a fork" in body


def test_a_trusted_run_shows_its_summary_under_the_status_line(tmp_path):
    gh = tpc.FakeGitHub(comments=[], statuses=[tpc.gate_status("failure", "regression found")])
    assert pc.post(tpc.write_artifact(tmp_path), tpc.event_env(), gh).startswith("created")
    body = next(b["body"] for m, _, b, _ in gh.calls if m == "POST")
    assert "**Gate:** failed: regression found" in body
    assert "| prefill | fail |" in body


def test_two_commenters_racing_leave_one_sticky_comment(tmp_path):
    racing = tpc.recorded("issue_comments_42.json")
    stickies = [c for c in racing if c["id"] == 3102]  # the bot's own sticky
    extra = {**stickies[0], "id": 3200}  # the other commenter's, created at the same time
    gh = tpc.FakeGitHub(comments=[], statuses=[tpc.gate_status()])
    listings = iter([[], [*stickies, extra]])  # before our create, and after (theirs too)
    gh.comments = None

    def answer(method, url, body, headers):
        if method == "GET" and "/comments" in url:
            gh.calls.append((method, url, None, headers))
            return 200, next(listings) if "page=1" in url else []
        return tpc.FakeGitHub.__call__(gh, method, url, body, headers)

    pc.post(tpc.write_artifact(tmp_path), tpc.event_env(), answer)
    writes = [(m, p) for m, p, _, _ in gh.calls if m in ("DELETE", "PATCH")]
    assert writes == [("DELETE", f"/issues/comments/{extra['id']}"),
                      ("PATCH", f"/issues/comments/{stickies[0]['id']}")]  # fmt: skip


# --- row 11: API failures never leave the required status silently unset ------------------------


def test_a_404_from_the_pulls_api_still_sets_the_status(tmp_path):
    tpc.shard(tmp_path / "shards", "cuda", 0, "ab", outcome="failure", ab_status="fail")
    gh = tpc.FakeGitHub(status={("GET", "/pulls/42"): 404})
    assert verdict.run(tpc.verdict_args(tmp_path), tpc.PR_ENV, gh) == 1
    assert tpc.statuses(gh)[0][1]["state"] == "failure"
    assert (
        "could not be read (GET /pulls/42 answered HTTP 404)"
        in (tmp_path / "out" / "summary.md").read_text()
    )


def test_transient_failures_are_retried(tmp_path, monkeypatch):
    _no_sleep(monkeypatch)
    tpc.shard(tmp_path / "shards", "cuda", 0, "ab", ab_status="pass")
    gh = tpc.FakeGitHub(status={("POST", f"/statuses/{SHA}"): [502, 0, 201]})
    assert verdict.run(tpc.verdict_args(tmp_path), tpc.PR_ENV, gh) == 0
    assert len(tpc.statuses(gh)) == 3


def _no_sleep(monkeypatch):
    """The post step's API client without the real waits between retries."""
    github_api = sys.modules["github_api"]
    real = github_api.GitHub

    def make(*args, **kwargs):
        return real(*args, **kwargs, sleep=lambda _s: None)

    monkeypatch.setattr(github_api, "GitHub", make)


@pytest.mark.parametrize(
    "case",
    [("phasebench/phasebench", 403, 1), ("phasebench/phasebench", 500, 1),
     ("contributor/phasebench", 403, 0), ("contributor/phasebench", 500, 1)],
    ids=["trusted-403", "trusted-500", "fork-403", "fork-500"],
)  # fmt: skip
def test_a_status_that_cannot_be_set_fails_the_job_unless_the_token_is_read_only(
    tmp_path, monkeypatch, capsys, case
):
    head_repository, code, exit_code = case
    _no_sleep(monkeypatch)
    tpc.shard(tmp_path / "shards", "cuda", 0, "ab", ab_status="pass")
    gh = tpc.FakeGitHub(status={("POST", f"/statuses/{SHA}"): code})
    env = {**tpc.PR_ENV, "HEAD_REPOSITORY": head_repository}
    assert verdict.run(tpc.verdict_args(tmp_path), env, gh) == exit_code
    out = capsys.readouterr().out
    assert ("::error::could not set" in out) is (exit_code == 1)


# --- row 12 and 13: branch names, summary size ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "ok"),
    [("fix@home", True), ("issue#12", True), ("a,b", True), ("día/ñu", True), ("x\nmain", False),
     ("a..b", False), ("a b", False), ("a@{1}", False), ("-x", False), ("x.lock", False)],
)  # fmt: skip
def test_branch_names_follow_git_not_ascii(name, ok):
    assert pc.is_branch_name(name) is ok


def test_the_step_summary_fits_githubs_limit_with_many_shards():
    head = "### phasebench gate: FAIL\n\n- note\n"
    sections = [f"#### cuda shard {k}\n" + "| row | 1.0 ms |\n" * 12_000 for k in range(8)]
    step_summary = sys.modules["step_summary"]  # verdict.py's own import of it
    summary = step_summary.fit(head, sections)
    assert len(summary.encode("utf-8")) <= step_summary.MAX_SUMMARY_BYTES < 1024 * 1024
    assert summary.startswith(head)
    assert summary.count("cut to fit") == 8
    assert all(f"cuda shard {k}" in summary for k in range(8))  # every shard keeps its head


# --- re-runs: artifacts of every attempt, the newest of each shard -------------------------------


def test_downloads_use_the_rest_path_and_the_commenter_reads_the_completed_attempt():
    for job in (tw.GATE, tw.STORE):  # the REST fallback (test_downloads_and_store.py: when)
        download = tw.step(job, "Download over REST")["with"]
        assert download["github-token"] == "${{ github.token }}"
        assert download["run-id"] == "${{ github.run_id }}"
        assert job["permissions"]["actions"] == "read"
    commenter = tw.jobs(tw.workflow("bench-comment.yml"))["comment"]
    name = tw.step(commenter, "Download")["with"]["name"]
    ctx = {"github": {"event": {"workflow_run": {"run_attempt": 2}}, "run_attempt": 2}}
    assert tw.evaluate(name, ctx) == tw.evaluate(
        tw.step(tw.GATE, "Upload the PR")["with"]["name"], ctx
    )


def test_the_newest_attempt_of_each_shard_is_the_one_judged_and_stored(tmp_path):
    for attempt, status in ((1, "fail"), (2, "pass")):
        folder = tmp_path / f"bench-cuda-0-a{attempt}"
        (folder / "data").mkdir(parents=True)
        meta = {"schema": 1, "class": "cuda", "shard": "1/1", "attempt": attempt, "mode": "ab"}
        (folder / "outcome.json").write_text(json.dumps({**meta, "outcome": "success"}))
        tpc.gate_json(folder / "data" / "ab.json", status)
    [(folder, _meta)] = shard_stage.latest_shards(tmp_path)
    assert folder.name == "bench-cuda-0-a2"
    assert verdict.judge("ab", tmp_path, {})[0].status == "pass"


remote = ths.remote  # the bare-remote fixture of the store's own spec
