"""Spec of issue 43's items 1, 2, 3, 6, 7 and 10: a required check only our gate can satisfy.

1. The required status exists on a PR's head before any code of the PR runs (bench-claim.yml,
   `pull_request_target`, `statuses: write` only, run here with a fake `gh`), and only the gate
   sets a verdict; a CODEOWNERS and a ruleset to copy.
2. Merge queues: bench.yml runs on `merge_group`; the queue's commit gets its PR's verdict when
   the trees are equal (the base did not move), else it is measured.
3. A pending status names the runner label it waits for; the watchdog marks it `error` long
   before GitHub drops a job queued for 24-48 hours.
6. A verdict replaces only one that judged no more runner classes, unless it blocks a merge.
7. A dispatch whose `sha` is no longer the PR's head runs nothing.
10. One deadline for a job's API calls; statuses read from every page.
The API is tests/ci/github_fake.py; the workflows are evaluated as test_workflows.py does.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import tests.ci.github_fake as fake
import tests.ci.test_pr_comment as tpc
import tests.ci.test_workflows as tw

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".github" / "scripts"))


class _Lazy:
    """The scripts and workflows, loaded when a test first needs them: each test fails on
    its own where one is missing (as on the workflows before issue 43), not the module."""

    def __getattr__(self, name: str) -> Any:
        if name == "CLAIM":
            return tw.workflow("bench-claim.yml")
        if name == "CLAIM_JOB":
            return tw.jobs(self.CLAIM)["claim"]
        if name == "ANNOUNCE":
            return tw.jobs(tw.BENCH)["announce"]
        return importlib.import_module(name)


lazy = _Lazy()
verdict = tpc.verdict
HEAD, QUEUE, BASE = "a" * 40, "9" * 40, tw.BASE_SHA
DOCS = " ".join((ROOT / "docs" / "ci.md").read_text(encoding="utf-8").split())  # one line


def step_env(job: dict[str, Any], prefix: str, context: dict[str, Any]) -> dict[str, str]:
    s = tw.step(job, prefix)
    return {k: tw._as_text(tw.evaluate(v, context)) for k, v in s.get("env", {}).items()}


# --- 1. the claim: the required status before any code of the PR runs ---------------------------


def test_the_claim_runs_nothing_of_the_pr_and_writes_nothing_but_statuses():
    assert tw.triggers(lazy.CLAIM) == {"pull_request_target"}
    assert lazy.CLAIM["on"]["pull_request_target"]["types"] == ["opened", "synchronize", "reopened"]
    assert lazy.CLAIM["permissions"] == {}
    assert tw.jobs(lazy.CLAIM) == {"claim": lazy.CLAIM_JOB}
    assert lazy.CLAIM_JOB["permissions"] == {"statuses": "write"}
    assert lazy.CLAIM_JOB["runs-on"] == "ubuntu-latest"
    [only] = tw.steps(lazy.CLAIM_JOB)
    assert "uses" not in only  # no checkout, no action: nothing of the PR is on the machine
    script = only["run"]
    assert "${{" not in script
    # It calls the API and jq; it fetches, installs and executes nothing.
    for word in ("git ", "curl", "wget", "pip", "python", "npm", "make", "bash -c", "eval"):
        assert word not in script, word
    # Of the event, only the head commit, its repository and the author reach the script.
    read = set(re.findall(r"github\.event\.[\w.]+", json.dumps(only["env"])))
    assert read == {
        "github.event.pull_request.head.sha",
        "github.event.pull_request.head.repo.full_name",
        "github.event.pull_request.user.login",
    }
    text = (ROOT / ".github/workflows/bench-claim.yml").read_text(encoding="utf-8")
    reason = re.search(r"# zizmor: ignore\[dangerous-triggers\] -- (.+)", text)
    assert reason is not None
    assert len(reason.group(1)) > 40  # the reason is written out


FAKE_GH = """#!{python}
import json, os, subprocess, sys
board = os.environ["BOARD"]
state = json.load(open(board))
args = sys.argv[1:]
with open(board + ".log", "a") as log:
    log.write(json.dumps(args) + "\\n")
jq = args[args.index("--jq") + 1] if "--jq" in args else "."
path = next(a for a in args[1:] if a.startswith("repos/"))
sha = path.split("?")[0].rsplit("/", 2)[-1] if "/statuses/" in path else path.split("/")[-2]
if "-X" in args:  # POST repos/R/statuses/SHA -f key=value ...
    fields = dict(a.split("=", 1) for a in args[args.index("-X") + 3 :] if "=" in a)
    if state.get("meanwhile"):
        state["statuses"].insert(0, state.pop("meanwhile"))
    state["next"] += 1
    entry = {{"id": state["next"], "context": fields["context"], "state": fields["state"],
             "description": fields["description"], "target_url": fields.get("target_url"),
             "creator": {{"login": "github-actions[bot]"}}}}
    state["statuses"].insert(0, entry)
    json.dump(state, open(board, "w"))
    answer = entry
else:
    answer = state["statuses"]
out = subprocess.run(["jq", "-r", jq], input=json.dumps(answer), capture_output=True, text=True)
sys.stdout.write(out.stdout)
sys.exit(out.returncode)
"""


def run_claim(tmp_path: Path, context: dict[str, Any], statuses=(), meanwhile=None):
    """Run the claim's script with bash and a fake `gh` over a board of statuses."""
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed (GitHub's runners have it): apt-get install jq")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "gh").write_text(FAKE_GH.format(python=sys.executable), encoding="utf-8")
    (bin_dir / "gh").chmod(0o755)
    board = tmp_path / "board.json"
    state = {"statuses": list(statuses), "next": 100, "meanwhile": meanwhile}
    board.write_text(json.dumps(state), encoding="utf-8")
    env = {
        **step_env(lazy.CLAIM_JOB, "Set phasebench/gate", context),
        "GITHUB_REPOSITORY": tw.REPO,
        "BOARD": str(board),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    proc = subprocess.run(
        ["bash", "-e", "-c", tw.steps(lazy.CLAIM_JOB)[0]["run"]],  # GitHub's default shell
        env=env, capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    after = json.loads(board.read_text(encoding="utf-8"))["statuses"]
    log = board.with_suffix(".json.log")
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return after, [c for c in calls if "-X" in c]


@pytest.mark.parametrize(
    ("context", "state", "description"),
    [
        (
            tw.pr_event(fork=False),
            "pending",
            ("pending_description", "phasebench-ab", ["cuda", "mps"]),
        ),
        (tw.pr_event(fork=True), "error", ("unmeasured_description", "a fork's head")),
        (
            tw.pr_event(fork=False, author="dependabot[bot]"),
            "error",
            ("unmeasured_description", "Dependabot's head"),
        ),
    ],
    ids=["own-branch", "fork", "dependabot"],
)
def test_the_claim_sets_the_required_status_on_the_head_when_the_pr_opens(
    tmp_path, context, state, description
):
    context["github"]["event_name"] = "pull_request_target"
    function, *args = description  # gate_status's, as announce.py and the post step say it
    description = getattr(lazy.gate_status, function)(*args)
    after, posts = run_claim(tmp_path, context)
    assert len(posts) == 1
    [top] = after
    assert (top["state"], top["context"], top["description"]) == (
        state,
        "phasebench/gate",
        description,
    )
    assert lazy.gate_status.is_claim(top)  # a placeholder: never mistaken for a verdict
    assert top["target_url"].endswith("/docs/ci.md#the-required-check-phasebenchgate")
    # The pool it names is the one bench.yml's shards ask for on a PR.
    for job in tw.SELF_HOSTED.values():
        assert tw.runner_labels(job, tw.pr_event(fork=False))[-1] == "phasebench-ab"


def test_the_claim_names_only_the_runner_classes_that_run(tmp_path):
    context = tw.pr_event(fork=False)
    context["vars"] = {"PHASEBENCH_MPS": "off"}
    after, _ = run_claim(tmp_path, context)
    assert after[0]["description"] == lazy.gate_status.pending_description(
        "phasebench-ab", ["cuda"]
    )


def test_the_claim_leaves_a_status_of_ours_and_not_a_strangers(tmp_path):
    verdict_of_ours = {**fake.status("failure", "regression found [cuda]"), "id": 5}
    after, posts = run_claim(tmp_path, tw.pr_event(fork=True), [verdict_of_ours])
    assert posts == []
    assert after == [verdict_of_ours]
    stranger = {**fake.status("success", "trust me [cuda]", login="mallory"), "id": 6}
    after, posts = run_claim(tmp_path / "2", tw.pr_event(fork=True), [stranger])
    assert [p[p.index("-X") + 1] for p in posts] == ["POST"]
    assert after[0]["state"] == "error"


def test_a_verdict_landing_while_the_claim_writes_goes_back_on_top(tmp_path):
    landed = {**fake.status("success", "no regression beyond noise [cuda]"), "id": 50}
    landed["target_url"] = "https://github.com/phasebench/phasebench/actions/runs/5"
    after, posts = run_claim(tmp_path, tw.pr_event(fork=True), meanwhile=landed)
    assert len(posts) == 2
    assert (after[0]["state"], after[0]["description"]) == ("success", landed["description"])
    assert after[0]["target_url"] == landed["target_url"]


def _codeowners() -> list[tuple[str, list[str]]]:
    lines = (ROOT / ".github" / "CODEOWNERS").read_text(encoding="utf-8").splitlines()
    return [(ln.split()[0], ln.split()[1:]) for ln in lines if ln.strip() and ln[0] != "#"]


def _owners_of(path: str) -> list[str]:
    """GitHub's rule: the last matching pattern wins (these anchored forms only)."""
    owners: list[str] = []
    for pattern, who in _codeowners():
        assert pattern.startswith("/"), pattern
        anchored = pattern.lstrip("/")
        if path == anchored or (anchored.endswith("/") and path.startswith(anchored)):
            owners = who
    return owners


@pytest.mark.parametrize(
    "path",
    [".github/workflows/bench.yml", ".github/CODEOWNERS", ".github/requirements/gate.txt",
     ".github/runner/phasebench-runner.sh", "noxfile.py", "matrix/models/llama.yaml",
     "matrix/cuda.yaml", "pyproject.toml", "conftest.py", "reports/ab.py"],
)  # fmt: skip
def test_codeowners_owns_what_decides_runs_or_judges_the_benchmarks(path):
    owners = _owners_of(path)
    assert owners, path
    assert all(re.fullmatch(r"@[\w.-]+(/[\w.-]+)?", owner) for owner in owners)


def test_the_ruleset_to_copy_requires_the_gate_from_github_actions_and_fresh_approvals():
    ruleset = json.loads((ROOT / ".github/rulesets/default-branch.json").read_text("utf-8"))
    assert ruleset["target"] == "branch"
    assert ruleset["conditions"]["ref_name"]["include"] == ["~DEFAULT_BRANCH"]
    rules = {rule["type"]: rule.get("parameters", {}) for rule in ruleset["rules"]}
    # The GitHub Actions app (integration 15368): a status of that name from anyone else,
    # a person's token or another app, does not count.
    assert rules["required_status_checks"]["required_status_checks"] == [
        {"context": "phasebench/gate", "integration_id": 15368}
    ]
    review = rules["pull_request"]
    assert review["required_approving_review_count"] >= 1
    assert review["dismiss_stale_reviews_on_push"] is True
    assert review["require_last_push_approval"] is True
    assert review["require_code_owner_review"] is True
    assert {"non_fast_forward", "deletion"} <= set(rules)
    for setting in (
        "Dismiss stale pull request approvals when new commits are pushed",
        "Require approval of the most recent reviewable push",
        "Require review from Code Owners",
        ".github/rulesets/default-branch.json",
        ".github/CODEOWNERS",
    ):
        assert setting in DOCS, setting


# --- 2. merge queues ---------------------------------------------------------------------------


def queue_event() -> dict[str, Any]:
    ctx = tw.push_event(f"refs/heads/gh-readonly-queue/main/pr-42-{BASE}")
    ctx["github"]["event_name"] = "merge_group"
    ctx["github"]["sha"] = QUEUE
    ctx["github"]["event"]["merge_group"] = {
        "head_sha": QUEUE,
        "head_ref": f"refs/heads/gh-readonly-queue/main/pr-42-{BASE}",
        "base_sha": BASE,
        "base_ref": "refs/heads/main",
    }
    return ctx


def test_bench_judges_a_merge_queues_commit_against_the_queues_base():
    assert tw.BENCH["on"]["merge_group"] == {"types": ["checks_requested"]}
    ctx = queue_event()
    assert tw.evaluate(tw.GATE["env"]["MODE"], ctx) == "ab"
    for job in tw.SELF_HOSTED.values():
        assert tw._truthy(tw.evaluate(job["if"], ctx))
        assert tw.runner_labels(job, ctx)[-1] == "phasebench-ab"  # never the history pool
        env = tw.job_env(job, ctx)
        assert (env["HEAD_SHA"], env["BASE"]) == (QUEUE, BASE)
    checkout = tw.step(tw.GATE, "Check out the judge")["with"]
    assert tw.evaluate(checkout["ref"], ctx) == BASE  # the queue's base judges
    assert step_env(tw.GATE, "Verdict", ctx)["HEAD_SHA"] == QUEUE
    assert step_env(lazy.ANNOUNCE, "Announce", ctx)["HEAD_SHA"] == QUEUE


def queue_api(*, same_tree: bool, pr_verdict: str = "success") -> fake.Api:
    api = fake.Api()
    api.pulls[42] = fake.pull(42, HEAD)
    api.trees[HEAD] = "e" * 40
    api.trees[QUEUE] = "e" * 40 if same_tree else "f" * 40
    api.add_status(HEAD, fake.status(pr_verdict, "no regression beyond noise [cuda+mps]"))
    return api


def announce_env(ctx: dict[str, Any]) -> dict[str, str]:
    return {**step_env(lazy.ANNOUNCE, "Announce", ctx), "GITHUB_REPOSITORY": tw.REPO}


def test_a_queue_commit_with_its_prs_tree_carries_the_prs_verdict_and_measures_nothing():
    api = queue_api(same_tree=True)
    outputs = lazy.announce.announce(announce_env(queue_event()), api)
    assert outputs == {"measure": "false", "refused": ""}
    [(sha, body)] = api.posted()
    assert (sha, body["state"]) == (QUEUE, "success")
    assert body["description"].endswith("same tree: base did not move [cuda+mps]")
    assert f"PR #42's verdict on {HEAD[:12]}" in body["description"]
    measured = queue_event()
    measured["needs"] = {"announce": {"result": "success", "outputs": outputs}}
    for job in (*tw.SELF_HOSTED.values(), tw.GATE):  # nothing runs, nothing overwrites it
        assert not tw._truthy(tw.evaluate(job["if"], measured))


@pytest.mark.parametrize(
    ("same_tree", "pr_verdict"), [(False, "success"), (True, "failure")], ids=["moved", "failed"]
)
def test_a_queue_commit_whose_base_moved_or_whose_pr_failed_is_measured(same_tree, pr_verdict):
    api = queue_api(same_tree=same_tree, pr_verdict=pr_verdict)
    assert lazy.announce.announce(announce_env(queue_event()), api)["measure"] == "true"
    [(sha, body)] = api.posted()
    assert (sha, body["state"]) == (QUEUE, "pending")


def test_a_queue_commits_regression_is_accepted_by_its_prs_label(tmp_path):
    tpc.shard(tmp_path / "shards", "cuda", 0, "ab", outcome="failure", ab_status="fail")
    gh = tpc.accepting_github(tpc.recorded("pull_42.json"))
    env = {**tpc.PR_ENV, "EVENT_NAME": "merge_group", "PR_NUMBER": "", "HEAD_SHA": QUEUE,
           "HEAD_BRANCH": f"gh-readonly-queue/main/pr-42-{BASE}"}  # fmt: skip
    assert verdict.run(tpc.verdict_args(tmp_path), env, gh) == 0
    [(path, body)] = tpc.statuses(gh)
    assert (path, body["state"]) == (f"/statuses/{QUEUE}", "success")
    assert not (tmp_path / "pr-comment").exists()  # the queue's commit gets no comment


# --- 3. a pending status names its runners; the watchdog ---------------------------------------


@pytest.mark.parametrize(
    "context",
    [tw.pr_event(fork=False), tw.push_event(), tw.dispatch_event(pr="42", sha=HEAD), queue_event()],
    ids=["pr", "main", "dispatch", "merge-queue"],
)
def test_every_measured_run_announces_pending_naming_the_runner_label_it_waits_for(context):
    api = fake.Api()
    api.pulls[42] = fake.pull(42, HEAD)
    api.trees[QUEUE], api.trees[HEAD] = "f" * 40, "e" * 40
    context["github"]["ref"] = context["github"]["ref"].replace("topic", "main")  # dispatch
    env = {**announce_env(context), "GITHUB_WORKFLOW_REF": f"{tw.REPO}/.github/workflows/x@y"}
    assert lazy.announce.announce(env, api) == {"measure": "true", "refused": ""}
    [(sha, body)] = api.posted()
    target = {"push": "d" * 40, "merge_group": QUEUE}.get(context["github"]["event_name"], HEAD)
    assert (sha, body["state"]) == (target, "pending")
    pools = {tw.runner_labels(job, context)[-1] for job in tw.SELF_HOSTED.values()}
    assert body["description"] == lazy.gate_status.pending_description(pools.pop(), ["cuda", "mps"])
    assert (
        body["target_url"]
        == f"https://github.com/{tw.REPO}/actions/runs/{tw.evaluate('github.run_id', context)}"
    )  # the watchdog finds the run that waits from here


def test_a_pending_status_never_replaces_a_verdict():
    api = fake.Api()
    api.add_status(HEAD, fake.status("failure", "regression found [cuda]"))
    lazy.announce.announce(announce_env(tw.pr_event(fork=False)), api)
    assert api.posted() == []


HOUR = 3600.0


def stuck_board(*, queued_h: float, pending_h: float) -> fake.Api:
    """PR #42's head: pending for `pending_h`, its bench-cuda job queued for `queued_h`."""
    api = fake.Api()
    api.pulls[42] = fake.pull(42, HEAD)
    url = "https://github.com/phasebench/phasebench/actions/runs/31"
    desc = lazy.gate_status.pending_description("phasebench-ab", ["cuda"])
    api.add_status(HEAD, fake.status("pending", desc, at=fake.NOW_S - pending_h * HOUR, url=url))
    api.runs.append({"id": 31, "status": "in_progress", "event": "pull_request",
                     "head_sha": HEAD, "path": ".github/workflows/bench.yml"})  # fmt: skip
    labels = ["self-hosted", "Linux", "X64", "gpu", "phasebench-ab"]
    api.jobs[31] = [
        {"name": "announce", "status": "completed", "created_at": fake.stamp(fake.NOW_S - 9e4),
         "labels": ["ubuntu-latest"]},
        {"name": "bench-cuda 1/1", "status": "queued", "labels": labels,
         "created_at": fake.stamp(fake.NOW_S - queued_h * HOUR)},
    ]  # fmt: skip
    return api


def sweep(api: fake.Api, hours: str = "6") -> int:
    env = {"GITHUB_REPOSITORY": tw.REPO, "GITHUB_TOKEN": "t", "WAIT_HOURS": hours}
    return lazy.watchdog.sweep(env, api, clock=lambda: fake.NOW_S)


def test_the_watchdog_names_the_labels_nobody_serves_long_before_github_drops_the_job():
    api = stuck_board(queued_h=6.5, pending_h=6.5)
    assert sweep(api) == 0
    [(sha, body)] = api.posted()
    assert (sha, body["state"]) == (HEAD, "error")
    assert body["description"] == (
        "no runner with labels self-hosted,Linux,X64,gpu,phasebench-ab took bench-cuda 1/1 in "
        "6 h (GitHub cancels it at 24-48 h)"
    )
    assert lazy.gate_status.is_claim(body)  # a placeholder: the gate's verdict replaces it later
    # Every 30 minutes, and its default wait is well inside GitHub's 24 hours.
    data = tw.workflow("bench-watchdog.yml")
    [cron] = [entry["cron"] for entry in data["on"]["schedule"]]
    assert len(cron.split()[0].split(",")) == 2  # two minutes of each hour
    job = tw.jobs(data)["watchdog"]
    wait = tw.evaluate(tw.step(job, "Mark pending")["env"]["WAIT_HOURS"], {"vars": {}})
    assert float(wait) <= 12
    assert job["permissions"] == {
        "actions": "read", "contents": "read", "pull-requests": "read", "statuses": "write",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("queued_h", "pending_h", "verdict_on_top"),
    [(2, 2, False), (6.5, 6.5, True), (2, 7, False)],
    ids=["fresh", "verdict-stands", "running"],
)
def test_the_watchdog_leaves_fresh_judged_and_running_heads_alone(
    queued_h, pending_h, verdict_on_top
):
    api = stuck_board(queued_h=queued_h, pending_h=pending_h)
    if verdict_on_top:
        api.add_status(HEAD, fake.status("success", "no regression beyond noise [cuda]"))
    if queued_h < pending_h:  # its job started: the run measures
        api.jobs[31][1]["status"] = "in_progress"
    assert sweep(api) == 0
    assert api.posted() == []


def test_the_watchdog_marks_a_pending_head_that_no_run_measures():
    api = stuck_board(queued_h=8, pending_h=8)
    api.runs.clear()  # e.g. a bench.yml that failed to parse: no run at all
    sweep(api)
    [(_, body)] = api.posted()
    assert body["description"].startswith("no bench run measures this commit (pending 8 h)")


def test_the_docs_say_what_happens_to_a_job_no_runner_takes():
    assert "GitHub fails a job that waits more than 24 hours" not in DOCS
    assert "bench-watchdog.yml" in DOCS
    assert "PHASEBENCH_RUNNER_WAIT_HOURS" in DOCS


# --- 6. a verdict covers runner classes -------------------------------------------------------


def dispatch_env(sha: str = HEAD) -> dict[str, str]:
    return {**tpc.PR_ENV, "EVENT_NAME": "workflow_dispatch", "DISPATCH_SHA": sha,
            "HEAD_SHA": "d" * 40, "NEEDS": "{}"}  # fmt: skip


def verdict_board(standing: dict[str, Any]) -> tuple[fake.Api, str]:
    api = fake.Api()
    api.pulls[42] = {**fake.pull(42, HEAD), "number": 42}
    api.add_status(HEAD, standing)
    return api, HEAD


def test_a_dispatch_of_fewer_classes_never_overwrites_a_failure_of_more(tmp_path):
    api, sha = verdict_board(fake.status("failure", "regression found [cuda+mps]"))
    tpc.shard(tmp_path / "shards", "mps", 0, "ab", ab_status="pass")
    assert verdict.run(tpc.verdict_args(tmp_path), dispatch_env(sha), api) == 0
    assert api.posted() == []
    assert api.statuses[sha][0]["state"] == "failure"
    summary = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "judged cuda+mps and this run only mps: it stays" in summary


@pytest.mark.parametrize(
    ("standing", "classes", "status", "state"),
    [
        ("failure", ["cuda", "mps"], "pass", "success"),  # the same classes: replaced
        ("success", ["mps"], "fail", "failure"),  # fewer classes, but it blocks: replaced
        ("failure", ["mps"], "error", None),  # fewer classes, both block: the older stays
    ],
    ids=["same-classes", "new-failure", "fewer-both-block"],
)
def test_a_verdict_replaces_one_of_no_more_classes_or_one_it_overrules(
    tmp_path, standing, classes, status, state
):
    api, sha = verdict_board(fake.status(standing, "older verdict [cuda+mps]"))
    for k, cls in enumerate(classes):
        tpc.shard(tmp_path / "shards", cls, k, "ab", ab_status=status)
    verdict.run(tpc.verdict_args(tmp_path), dispatch_env(sha), api)
    assert [body["state"] for _, body in api.posted()] == ([state] if state else [])
    if state:
        assert api.posted()[0][1]["description"].endswith(f" [{'+'.join(classes)}]")


def test_the_replace_rule_reads_the_verdict_beneath_a_placeholder():
    old = fake.status("failure", "regression found [cuda+mps]")
    pending = fake.status("pending", lazy.gate_status.pending_description("phasebench-ab", ["mps"]))
    statuses = [pending, old]
    assert lazy.gate_status.newest_verdict(statuses) is old
    assert lazy.gate_status.replaces("success", ["mps"], old)[0] is False
    assert lazy.gate_status.replaces("success", ["cuda", "mps"], old)[0] is True


# --- 7. a dispatch runs only the PR's current head ---------------------------------------------


@pytest.mark.parametrize(
    ("head_now", "ref", "refused"),
    [
        (HEAD, "refs/heads/main", ""),
        ("b" * 40, "refs/heads/main", "PR #42's head is now bbbbbbbbbbbb"),
        (HEAD, "refs/heads/topic", "dispatched on refs/heads/topic"),
    ],
    ids=["still-the-head", "moved-on", "other-branch"],
)
def test_a_dispatch_runs_only_the_prs_current_head_from_the_default_branchs_workflow(
    head_now, ref, refused
):
    api = fake.Api()
    api.pulls[42] = fake.pull(42, head_now, fork=True)
    ctx = tw.dispatch_event(pr="42", sha=HEAD)
    ctx["github"]["ref"] = ref
    outputs = lazy.announce.announce(announce_env(ctx), api)
    assert outputs["measure"] == ("false" if refused else "true")
    assert outputs["refused"].startswith(refused)
    assert (api.posted() == []) is bool(refused)  # no status on a commit nobody reviewed
    ctx["needs"] = {"announce": {"result": "success", "outputs": outputs}}
    for job in (*tw.SELF_HOSTED.values(), tw.GATE):
        assert tw._truthy(tw.evaluate(job["if"], ctx)) is not refused
    fail = tw.step(lazy.ANNOUNCE, "Refuse a dispatch")
    assert tw._truthy(tw.evaluate(fail["if"], {"steps": {"announce": {"outputs": outputs}}})) is (
        bool(refused)
    )


def test_an_unverifiable_dispatch_is_refused():
    api = fake.Api()  # PR #42 answers 404
    ctx = tw.dispatch_event(pr="42", sha=HEAD)
    ctx["github"]["ref"] = "refs/heads/main"
    outputs = lazy.announce.announce(announce_env(ctx), api)
    assert outputs["measure"] == "false"
    assert "could not be checked" in outputs["refused"]


def test_the_commenter_trusts_a_dispatchs_artifact_only_from_the_default_branch(tmp_path):
    fork = tpc.recorded("pull_57_fork.json")
    env = {**tpc.dispatch_env(), "RUN_HEAD_BRANCH": "topic"}  # a branch's own bench.yml ran
    with pytest.raises(tpc.pc.CommentError, match="not main's"):
        tpc.pc.post(tpc.fork_artifact(tmp_path), env, tpc.FakeGitHub(pull=fork))


# --- 10. one deadline; every page -------------------------------------------------------------


def test_rate_limit_waits_never_outlast_the_jobs_deadline(tmp_path, monkeypatch, capsys):
    """Every call answers "rate limited, retry after 290 s": without one deadline, three calls
    of four attempts each would wait over 30 minutes, past the gate's timeout."""
    now = [fake.NOW_S]
    real = lazy.github_api.GitHub

    def client(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **kwargs, sleep=lambda s: now.__setitem__(0, now[0] + s),
                    clock=lambda: now[0])  # fmt: skip

    monkeypatch.setattr(lazy.github_api, "GitHub", client)

    def limited(method: str, url: str, body: Any, headers: Any) -> tuple[int, Any, Any]:
        now[0] += 1.0
        return 403, {"message": "API rate limit exceeded"}, {"retry-after": "290"}

    tpc.shard(tmp_path / "shards", "cuda", 0, "ab", ab_status="fail")
    env = {**tpc.PR_ENV, "PHASEBENCH_DEADLINE": str(int(fake.NOW_S + 400))}
    assert verdict.run(tpc.verdict_args(tmp_path), env, limited) == 1
    assert now[0] <= fake.NOW_S + 400  # it stopped at the deadline, by itself
    out = capsys.readouterr().out
    assert "::error::not posted: phasebench/gate=failure on" in out
    # The gate's deadline is set first, inside its timeout, with time left after it.
    first = tw.steps(tw.GATE)[0]
    assert "PHASEBENCH_DEADLINE=$(( $(date +%s) + 1200 ))" in first["run"]
    assert tw.GATE["timeout-minutes"] * 60 >= 1200 + 5 * 60


def _api_steps() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    found = []
    for path in tw.FILES:
        for job in tw.jobs(tw.load(path)).values():
            for s in tw.steps(job):
                if "GITHUB_TOKEN" in s.get("env", {}) and "python" in str(s.get("run", "")):
                    found.append((path.name, job, s))
    return found


def test_every_job_that_calls_the_api_from_our_scripts_has_a_deadline_inside_its_timeout():
    assert _api_steps()
    for name, job, s in _api_steps():
        if "history_store.py" in s["run"]:
            continue  # git, not the REST API
        budget = s["env"].get("PHASEBENCH_BUDGET_S")
        if budget is None:  # the gate: a first step sets the deadline for all of them
            assert "PHASEBENCH_DEADLINE" in tw.steps(job)[0]["run"], (name, s["name"])
            continue
        assert int(budget) + 60 <= job["timeout-minutes"] * 60, (name, s["name"])


def test_statuses_are_read_from_every_page():
    api = fake.Api()
    api.add_status(HEAD, fake.status("failure", "regression found [cuda]"))
    for k in range(150):  # another tool's statuses, newer than ours
        api.add_status(HEAD, {**fake.status("success", f"lint {k}"), "context": "other/ci"})
    client = lazy.github_api.GitHub("https://api.github.com", tw.REPO, "t", api)
    assert lazy.commit_status.ours(client, HEAD)["description"] == "regression found [cuda]"
    pages = [p for m, p, _ in api.calls if p.endswith("/statuses")]
    assert len(pages) == 2


def test_the_runners_queue_limit_and_the_docs_agree():
    """GitHub cancels a self-hosted job queued 24 hours (up to 48): the watchdog acts first."""
    data = yaml.safe_load((ROOT / ".github/workflows/bench-watchdog.yml").read_text("utf-8"))
    assert "24-48 h" in lazy.watchdog.reason([{"labels": ["x"], "name": "j"}], 6, 0)
    assert data["jobs"]["watchdog"]["timeout-minutes"] * 60 > 420


def test_a_prs_superseded_runs_are_cancelled_by_our_code_not_by_a_group_name():
    """No concurrency group (a fork could name it): `announce` cancels this PR's older runs of
    another head, and nothing else."""
    bench = ".github/workflows/bench.yml"

    def run(run_id: int, number: int, **fields: Any) -> dict[str, Any]:
        return {"id": run_id, "run_number": number, "status": "in_progress", "path": bench,
                "event": "pull_request", "head_branch": "topic", "head_sha": "b" * 40,
                "pull_requests": [{"number": 42}], **fields}  # fmt: skip

    api = fake.Api()
    api.runs = [
        run(1, 5),  # older, another head of this PR: cancelled
        run(2, 6, status="queued"),  # older and queued: cancelled
        run(3, 9),  # newer than this run: left
        run(4, 4, head_sha=HEAD),  # this very head (an earlier attempt): left
        run(5, 3, pull_requests=[{"number": 7}]),  # another PR's: left
        run(6, 2, path=".github/workflows/ci.yml"),  # another workflow's: left
        run(7, 1, status="completed"),  # done: left
    ]
    ctx = tw.pr_event(fork=False)
    ctx["github"]["run_number"] = 8
    env = {**announce_env(ctx), "GITHUB_WORKFLOW_REF": f"{tw.REPO}/{bench}@refs/pull/42/merge"}
    lazy.announce.announce(env, api)
    cancelled = [path for method, path, _ in api.calls if path.endswith("/cancel")]
    assert cancelled == ["/actions/runs/1/cancel", "/actions/runs/2/cancel"]
    assert lazy.ANNOUNCE["permissions"]["actions"] == "write"


def test_a_dispatch_that_announce_cannot_check_for_any_reason_runs_nothing(tmp_path, monkeypatch):
    def broken(*args: Any) -> str:
        raise KeyError("something nobody foresaw")

    monkeypatch.setattr(lazy.announce, "check_dispatch", broken)
    out = tmp_path / "github_output"
    env = {"EVENT_NAME": "workflow_dispatch", "DISPATCH_PR": "42", "GITHUB_OUTPUT": str(out),
           "GITHUB_REPOSITORY": tw.REPO}  # fmt: skip
    assert lazy.announce.main(env, fake.Api()) == 0
    written = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert written["measure"] == "false"
    assert "announce.py stopped on KeyError" in written["refused"]
