"""Spec of issue 31's rows 4-7 and the history's pruning: the A/B base fetch on a private
repository, downloads that spare the REST budget, a re-run gate that never compares a commit with
itself, a store that keeps every finished shard, and a branch that can shrink.

Where git's behaviour is the point, real git runs: against a local smart-HTTP server that, like
a private repository on GitHub, refuses anonymous requests (`git http-backend` behind Basic
auth), and against bare repositories in a tmp dir. The workflow's own `run:` scripts are taken
from bench.yml and run with bash, their `env:` evaluated from the event contexts. The REST rate
limits are answers with the headers GitHub documents ("Rate limits for the REST API").
"""

from __future__ import annotations

import base64
import email.message
import http.server
import io
import json
import os
import subprocess
import sys
import threading
import urllib.error
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest

import tests.ci.test_history_store as ths
import tests.ci.test_workflows as tw

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".github" / "scripts"))

import github_api  # noqa: E402 - the scripts' folder is put on the path just above
import history_prune  # noqa: E402
import shard_stage  # noqa: E402

store, NOW, git = ths.store, ths.NOW, ths.git
TOKEN = "ghs_private_read_token_0123456789abcdef"
remote = ths.remote  # the bare-remote fixture of the store's own spec


def run_step(
    job: dict[str, Any], prefix: str, context: dict[str, Any], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """Run a step's `run:` script with bash -e (GitHub's default shell), its `env:` evaluated
    for `context` on top of `env`; `python`/`python3` are this interpreter."""
    s = tw.step(job, prefix)
    bin_dir = cwd / ".bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("python", "python3"):
        if not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(sys.executable)
    step_env = {k: tw._as_text(tw.evaluate(v, context)) for k, v in s.get("env", {}).items()}
    full = {**env, **step_env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-e", "-c", s["run"]], cwd=cwd, env=full, capture_output=True, text=True,
        check=False,
    )  # fmt: skip


def isolated_git_env(tmp: Path) -> dict[str, str]:
    (tmp / "gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
    return {
        "HOME": str(tmp),
        "GIT_CONFIG_GLOBAL": str(tmp / "gitconfig"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",  # a refused fetch fails at once instead of asking
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "PATH": os.environ["PATH"],
    }


# --- row 4: the A/B base fetch on a private repository -------------------------------------------


class PrivateGitServer(http.server.BaseHTTPRequestHandler):
    """Smart HTTP (`git http-backend`) that answers 401 without the token, as GitHub does for a
    private repository; git's `AUTHORIZATION: basic base64(x-access-token:TOKEN)` is let in."""

    root = Path()
    seen_auth: ClassVar[list[bool]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        basic = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
        authorised = self.headers.get("Authorization", "").lower() == f"basic {basic}".lower()
        self.seen_auth.append(authorised)
        if not authorised:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="GitHub"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path, _, query = self.path.partition("?")
        cgi = {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "REMOTE_ADDR": "127.0.0.1",
        }
        out = subprocess.run(
            ["git", "http-backend"], input=body, env=cgi, capture_output=True, check=True
        ).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode().split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def commit(work: Path, name: str, env: dict[str, str]) -> str:
    (work / f"{name}.txt").write_text(name)
    subprocess.run(["git", "-C", str(work), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "commit", "-qm", name], check=True, env=env)
    return git("-C", str(work), "rev-parse", "HEAD").strip()


@pytest.fixture
def private_repo(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A private `owner/repo` served over HTTP: main c1-c2-c3, topic c2-h1-h2 (the PR head, so
    the merge-base is c2), and a benchmark-history branch that the shards must never fetch."""
    env = isolated_git_env(tmp_path)
    src = tmp_path / "src"
    subprocess.run(["git", "init", "-q", str(src)], check=True, env=env)
    c1, c2 = commit(src, "c1", env), commit(src, "c2", env)
    c3 = commit(src, "c3", env)
    subprocess.run(["git", "-C", str(src), "checkout", "-qb", "topic", c2], check=True, env=env)
    commit(src, "h1", env)
    h2 = commit(src, "h2", env)
    subprocess.run(["git", "-C", str(src), "checkout", "-q", "--orphan", "benchmark-history"],
                   check=True, env=env)  # fmt: skip
    history = commit(src, "stored", env)
    bare = tmp_path / "srv" / "owner" / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True, env=env)
    # GitHub serves any reachable commit by id (checkout asks for the head by its sha).
    subprocess.run(["git", "-C", str(bare), "config", "uploadpack.allowAnySHA1InWant", "true"],
                   check=True, env=env)  # fmt: skip
    PrivateGitServer.root, PrivateGitServer.seen_auth = tmp_path / "srv", []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), PrivateGitServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {
            "server": f"http://127.0.0.1:{server.server_address[1]}",
            "env": env,
            "c1": c1,
            "c2": c2,
            "c3": c3,
            "head": h2,
            "history": history,
        }
    finally:
        server.shutdown()
        server.server_close()


def checked_out(tmp: Path, repo: dict[str, Any]) -> Path:
    """What actions/checkout v6.0.3 leaves with `persist-credentials: false` and `ref: <head>`:
    a depth-1 fetch of the head made with the token, then its auth removed (here it was
    passed on the command line only, so .git/config never held it)."""
    work, env = tmp / "workspace", repo["env"]
    url = f"{repo['server']}/owner/repo.git"
    basic = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "remote", "add", "origin", url], check=True, env=env)
    header = f"http.{repo['server']}/.extraheader=AUTHORIZATION: basic {basic}"
    fetch = ["fetch", "-q", "--no-tags", "--depth=1", "origin", f"+{repo['head']}:refs/pull"]
    subprocess.run(["git", "-c", header, "-C", str(work), *fetch], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "checkout", "-q", "--detach", repo["head"]],
                   check=True, env=env)  # fmt: skip
    return work


def test_the_private_server_refuses_the_anonymous_fetch_that_bench_yml_used_to_run(
    tmp_path, private_repo
):
    """The old A/B step's `git fetch origin` after checkout: anonymous, so refused (401)."""
    work = checked_out(tmp_path, private_repo)
    old = ["git", "-C", str(work), "fetch", "--no-tags", "--unshallow", "origin"]
    proc = subprocess.run(
        [*old, f"+{private_repo['c3']}:refs/phasebench/base"],
        env=private_repo["env"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0
    assert "Authentication failed" in proc.stderr or "could not read Username" in proc.stderr


@pytest.mark.parametrize("job_name", ["bench-mps", "bench-cuda"])
@pytest.mark.parametrize("event", ["pull_request", "dispatch"])
def test_the_base_step_fetches_a_private_base_and_leaves_no_token_on_disk(
    tmp_path, private_repo, job_name, event
):
    work = checked_out(tmp_path, private_repo)
    job = tw.SELF_HOSTED[job_name]
    if event == "pull_request":
        context = tw.pr_event(fork=False)
        context["github"]["event"]["pull_request"]["base"]["sha"] = private_repo["c3"]
    else:  # a maintainer's dispatch: the base is the default branch, by name
        context = tw.dispatch_event(pr="42", sha=private_repo["head"])
    context["github"]["token"] = TOKEN
    base = tw.job_env(job, context)["BASE"]
    assert base == (private_repo["c3"] if event == "pull_request" else "refs/heads/main")
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    env = {
        **private_repo["env"],
        "BASE": base,
        "HEAD_SHA": private_repo["head"],
        "RUNNER_TEMP": str(runner_temp),
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_SERVER_URL": private_repo["server"],
    }
    proc = run_step(job, "Fetch the base", context, env, work)
    assert proc.returncode == 0, proc.stderr
    assert any(PrivateGitServer.seen_auth[-3:])  # the server was asked with the token
    assert (tmp_path / "output").read_text() == f"merge_base={private_repo['c2']}\n"
    tree = git("-C", str(runner_temp / "base-tree"), "rev-parse", "HEAD").strip()
    assert tree == private_repo["c2"]
    # Not one byte of the token, plain or encoded, is left in the repository's files.
    encoded = base64.b64encode(f"x-access-token:{TOKEN}".encode())
    for path in (work / ".git").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert TOKEN.encode() not in data, path
            assert encoded not in data, path
    config = git("-C", str(work), "config", "--local", "--list")
    assert "extraheader" not in config
    assert "credential" not in config
    # Only the base was fetched: the ever-growing history branch is not in the clone.
    missing = subprocess.run(
        ["git", "-C", str(work), "cat-file", "-e", private_repo["history"]], check=False
    )
    assert missing.returncode != 0


def test_the_token_reaches_only_the_base_fetch_never_a_step_that_runs_head_code():
    for name, job in tw.SELF_HOSTED.items():
        assert "github.token" not in json.dumps(job.get("env", {})), name
        for s in tw.steps(job):
            env = json.dumps(s.get("env", {}))
            if "uses" in s:
                continue  # actions get the token as an input of their own; checkout drops it
            holds = "github.token" in env or "secrets." in env
            assert holds is str(s.get("name", "")).startswith("Fetch the base"), (name, s["name"])
        base, ab = tw.step(job, "Fetch the base"), tw.step(job, "nox -s ab")
        assert "unset READ_TOKEN" in base["run"]
        assert base["run"].index("unset basic") < base["run"].index("git worktree add")
        assert "READ_TOKEN" not in ab["run"]
        assert "nox" not in base["run"]
        # No head code runs before the token step: only the checks of the inputs and of the
        # runner, the emptied workspace and checkout precede it (a doctor before it could put
        # its own `git` on GITHUB_PATH to catch the token).
        steps = tw.steps(job)
        before = steps[: steps.index(base)]
        ours = ("Check the dispatch inputs", "Refuse a runner", "Start from an empty workspace")
        assert all("uses" in s or s["name"].startswith(ours) for s in before), name
        assert steps.index(base) < steps.index(tw.step(job, "nox -s doctor")) < steps.index(ab)
        # Within the job's limit with the doctor: the upload still runs after a timeout.
        steps = ("nox -s doctor", "Fetch", "nox -s ab")
        limits = [tw.step(job, prefix)["timeout-minutes"] for prefix in steps]
        assert sum(limits) + 10 <= job["timeout-minutes"]


# --- row 5: downloads that spare the REST budget; 403 rate limits -------------------------------


@pytest.mark.parametrize("job", [tw.GATE, tw.STORE], ids=["gate", "store"])
def test_downloads_use_the_internal_api_first_and_rest_only_when_a_shard_is_missing(job):
    first = tw.step(job, "Download every")
    check = tw.step(job, "Check that every shard")
    rest = tw.step(job, "Download over REST")
    order = [tw.steps(job).index(s) for s in (first, check, rest)]
    assert order == sorted(order)
    assert "github-token" not in first["with"]
    assert first["continue-on-error"] is True
    assert rest["with"]["github-token"] == "${{ github.token }}"
    assert rest["with"]["run-id"] == "${{ github.run_id }}"
    assert check["continue-on-error"] is True  # a failed check means: download over REST
    for downloaded, complete, rest_runs in [
        ("success", "true", False),  # every shard came over the internal API: no REST call
        ("success", "false", True),  # a re-run: earlier attempts' artifacts are not there
        ("failure", "true", True),  # the internal API refused (404 of an earlier attempt)
        ("success", None, True),  # the check itself failed
    ]:
        outputs = {} if complete is None else {"complete": complete}
        ctx = {"steps": {"download": {"outcome": downloaded}, "shards": {"outputs": outputs}}}
        assert tw._truthy(tw.evaluate(rest["if"], ctx)) is rest_runs, (downloaded, complete)


def stage_shard(shards: Path, cls: str, index: int, attempt: int = 1, **meta: Any) -> None:
    folder = shards / f"bench-{cls}-{index}-a{attempt}"
    (folder / "data").mkdir(parents=True)
    base = {"schema": 1, "class": cls, "shard": f"{index + 1}/2", "attempt": attempt}
    outcome = {"mode": "history", "outcome": "success", "partial": False, **base, **meta}
    (folder / "outcome.json").write_text(json.dumps(outcome))


@pytest.mark.parametrize("job", [tw.GATE, tw.STORE], ids=["gate", "store"])
def test_the_check_step_says_incomplete_when_a_re_run_hides_an_earlier_attempts_shard(
    tmp_path, job
):
    """After "Re-run failed jobs" re-ran cuda leg 1 (attempt 2), leg 0's artifact is attempt 1's,
    which the internal API does not give: the check says so, and the REST step runs."""
    (tmp_path / "judge").symlink_to(ROOT)  # the gate runs the judge checkout's scripts
    (tmp_path / ".github").symlink_to(ROOT / ".github")  # the store, its sparse checkout's
    context = tw.push_event()
    context["vars"] = {"PHASEBENCH_CUDA_SHARDS": '["1/2","2/2"]'}
    context["needs"] = {"bench-mps": {"result": "skipped"}, "bench-cuda": {"result": "failure"}}
    shards = tmp_path / "runner" / "shards"
    stage_shard(shards, "cuda", 1, attempt=2)
    env = {"RUNNER_TEMP": str(tmp_path / "runner"), "GITHUB_OUTPUT": str(tmp_path / "out")}
    proc = run_step(job, "Check that every shard", context, env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "not downloaded: bench-cuda-0" in proc.stdout
    assert (tmp_path / "out").read_text() == "complete=false\n"
    stage_shard(shards, "cuda", 0)  # what the REST download adds
    (tmp_path / "out").unlink()
    assert run_step(job, "Check that every shard", context, env, tmp_path).returncode == 0
    assert (tmp_path / "out").read_text() == "complete=true\n"


def test_the_shard_check_refuses_a_malformed_matrix(tmp_path, capsys):
    assert shard_stage.main(["check", "--shards", str(tmp_path), "--expect", "cuda=[1"]) == 1
    assert capsys.readouterr().err.startswith("::error::shard check: --expect 'cuda=[1'")


NOW_S = 1_798_740_000.0  # the fake clock's "now", epoch seconds
# The answers GitHub documents for a spent budget ("Rate limits for the REST API"): a primary
# limit names its reset; a secondary limit names `retry-after`, or neither (wait a minute).
PRIMARY = (
    403,
    {"message": "API rate limit exceeded for installation ID 4242.", "documentation_url": "x"},
    {"X-RateLimit-Limit": "1000", "X-RateLimit-Remaining": "0", "X-RateLimit-Used": "1000",
     "X-RateLimit-Reset": str(int(NOW_S) + 42), "X-RateLimit-Resource": "core"},
)  # fmt: skip
SECONDARY = (
    403,
    {"message": "You have exceeded a secondary rate limit. Please wait a few minutes."},
    {"Retry-After": "30", "X-RateLimit-Remaining": "812"},
)
SECONDARY_BARE = (403, {"message": "You have exceeded a secondary rate limit."}, {})
FORBIDDEN = (403, {"message": "Resource not accessible by integration"}, {})


class Answers:
    """A transport that gives its answers in turn and records every request."""

    def __init__(self, *answers: tuple[int, Any, dict[str, str]]) -> None:
        self.answers, self.calls = list(answers), 0

    def __call__(self, method, url, body, headers):
        self.calls += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def client(transport: Any, sleeps: list[float], **kwargs: Any) -> github_api.GitHub:
    return github_api.GitHub(
        "https://api.github.com", "phasebench/phasebench", "t", transport,
        sleep=sleeps.append, clock=lambda: NOW_S, **kwargs,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("limited", "wait"),
    [(PRIMARY, 43.0), (SECONDARY, 30.0), (SECONDARY_BARE, 60.0), ((429, None, {}), 60.0)],
    ids=["primary-403", "secondary-retry-after", "secondary-no-header", "429"],
)
def test_a_spent_rate_limit_is_waited_out_like_a_429(limited, wait):
    sleeps: list[float] = []
    answers = Answers(limited, (200, {"number": 42}, {}))
    assert client(answers, sleeps).pull(42) == {"number": 42}
    assert sleeps == [wait]
    assert answers.calls == 2


def test_a_rate_limit_longer_than_the_jobs_wait_is_a_clear_error_at_once():
    sleeps: list[float] = []
    late = (403, PRIMARY[1], {**PRIMARY[2], "X-RateLimit-Reset": str(int(NOW_S) + 3000)})
    with pytest.raises(github_api.ApiError) as caught:
        client(Answers(late), sleeps).pull(42)
    assert sleeps == []
    assert caught.value.status == 403
    assert caught.value.rate_limited
    assert "rate limit is spent for 3001 s" in str(caught.value)
    assert "re-run the job after the reset" in str(caught.value)
    # The waits of one call add up: two 200 s waits do not fit a 300 s budget.
    again = Answers((403, {}, {"Retry-After": "200"}))
    with pytest.raises(github_api.ApiError, match="rate limit is spent"):
        client(again, sleeps).pull(42)
    assert sleeps == [200.0]


def test_a_403_of_missing_permissions_is_not_retried():
    sleeps: list[float] = []
    answers = Answers(FORBIDDEN)
    with pytest.raises(github_api.ApiError) as caught:
        client(answers, sleeps).set_status("a" * 40, {"state": "success"})
    assert (answers.calls, sleeps, caught.value.status) == (1, [], 403)
    assert not caught.value.rate_limited


class FakeResponse:
    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.status, self._body, self.headers = status, body, headers

    def read(self) -> bytes:
        return self._body

    def __enter__(self) -> FakeResponse:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_the_real_transport_reads_the_rate_limit_headers_of_an_http_error(monkeypatch):
    """urllib raises HTTPError for a 403; its headers and JSON body must reach the retry."""
    headers = email.message.Message()
    for key, value in PRIMARY[2].items():
        headers[key] = value
    body = json.dumps(PRIMARY[1]).encode()
    answers = [
        urllib.error.HTTPError("https://x", 403, "rate limit", headers, io.BytesIO(body)),
        FakeResponse(200, b'{"number": 42}', {"Content-Type": "application/json"}),
    ]

    def urlopen(request, timeout):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(github_api.urllib.request, "urlopen", urlopen)
    status, data, got = github_api.urllib_transport("GET", "https://api.github.com/x", None, {})
    assert (status, data["message"]) == (403, PRIMARY[1]["message"])
    assert got["x-ratelimit-remaining"] == "0"
    sleeps: list[float] = []
    answers[:0] = [urllib.error.HTTPError("https://x", 403, "", headers, io.BytesIO(body))]
    assert client(github_api.urllib_transport, sleeps).pull(42) == {"number": 42}
    assert sleeps == [43.0]


# --- row 6: a re-run gate never compares the commit with its own stored files --------------------

THIS_SHA = "d" * 40  # tw.push_event()'s github.sha


def measured(tmp_path: Path, run: str, commit_id: str, age_days: int) -> Path:
    """Run `run`'s two cuda shards of `commit_id`, collected as the store collects them."""
    uploads = {}
    for k in (0, 1):
        data = {"commit_info": {"id": commit_id}, "machine_info": {"run": run, "shard": k}}
        data["benchmarks"] = []
        uploads[f"bench-cuda-{k}"] = ths.upload(
            tmp_path / run, "cuda", k, {"0001_x.json": json.dumps(data)}
        )
    shards = ths.download(uploads, tmp_path / run / "shards", merge_multiple=True)
    into = tmp_path / run / "collected"
    store.collect(shards, into, run_id=run, now=NOW - timedelta(days=age_days))
    return into


def test_a_re_run_gate_fetches_main_history_without_this_runs_own_files(tmp_path, monkeypatch):
    """Attempt 1's store put run 778's files on the branch; "Re-run failed jobs" re-runs the
    gate, whose fetch step (run from bench.yml) must leave them out, and any other run's
    measurement of the same commit too."""
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    env = isolated_git_env(tmp_path)
    bare = tmp_path / "srv" / "phasebench" / "phasebench.git"
    git("init", "-q", "--bare", str(bare))
    git("-C", str(bare), "config", "uploadpack.allowFilter", "true")
    git("-C", str(bare), "config", "uploadpack.allowAnySHA1InWant", "true")
    for run, commit_id, age in (("770", "a" * 40, 3), ("775", "b" * 40, 2),
                                ("776", THIS_SHA, 1), ("778", THIS_SHA, 0)):  # fmt: skip
        assert store.push(f"file://{bare}", measured(tmp_path, run, commit_id, age), run) == 2
    context = tw.push_event()  # run 778 of commit dddd...
    (tmp_path / "judge").symlink_to(ROOT)
    (tmp_path / "history" / "current" / "cuda").mkdir(parents=True)
    gate_env = {
        **env,
        "GITHUB_RUN_ID": context["github"]["run_id"],
        "GITHUB_SHA": context["github"]["sha"],
        "GITHUB_REPOSITORY": tw.REPO,
        "GITHUB_SERVER_URL": f"file://{tmp_path / 'srv'}",
        "GITHUB_TOKEN": "",
    }
    proc = run_step(tw.GATE, "Fetch main's recent history", context, gate_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    fetched = sorted(p.name for p in (tmp_path / "history" / "base" / "cuda").iterdir())
    assert {name.split("-")[1] for name in fetched} == {"r770", "r775"}
    assert "left out 2 stored file(s) of the judged commit" in proc.stdout


def test_select_runs_leaves_out_the_judged_run_before_taking_the_newest():
    names = [
        "20261130T000000Z-r60-s0-0123456789abcdef.json",
        "20261129T000000Z-r59-s0-00000000000000aa.json",
        "20261201T000000Z-r61-s0-00000000000000bb.json",
    ]
    assert store.select_runs(names, max_runs=1, max_age_days=30, now=NOW, exclude_run="61") == [
        names[0]
    ]


# --- row 7: the store keeps every finished shard whatever a leg's result -------------------------


@pytest.mark.parametrize(
    ("mps", "cuda", "stores"),
    [
        ("success", "success", True),
        ("failure", "success", True),  # one lost mps leg: cuda and the other mps legs stored
        ("success", "failure", True),
        ("skipped", "failure", True),  # cuda's finished legs are stored
        ("cancelled", "success", True),  # a leg cancelled (not the run): the rest is stored
        ("failure", "failure", True),
        ("skipped", "skipped", False),  # nothing ran
    ],
)
def test_the_store_runs_whatever_each_leg_ended(mps, cuda, stores):
    context = tw.push_event()
    context["needs"] = {"bench-mps": {"result": mps}, "bench-cuda": {"result": cuda}}
    assert tw._truthy(tw.evaluate(tw.STORE["if"], context)) is stores
    cancelled = {**context, "_status": "cancelled"}
    assert not tw._truthy(tw.evaluate(tw.STORE["if"], cancelled))  # a cancelled run: never


def upload_legs(tmp_path: Path, legs: dict[tuple[str, int], str]) -> Path:
    """The downloaded artifacts: each leg's staged folder, with its step's outcome."""
    shards = tmp_path / "shards"
    for (cls, index), outcome in legs.items():
        results = tmp_path / f"results-{cls}-{index}"
        results.mkdir(parents=True)
        (results / "0001_x.json").write_text(ths.history_json(f"{cls}{index}"))
        store.stage(
            cls=cls, index=index, shard=f"{index + 1}/3", outcomes={"history": outcome},
            sources={"history": results}, into=shards,
        )  # fmt: skip
    return shards


def test_collect_and_push_keep_the_finished_shards_when_a_leg_is_missing(tmp_path, remote):
    # cuda leg 1 never uploaded (a lost runner); mps leg 0 hit its step timeout (partial).
    shards = upload_legs(tmp_path, {("cuda", 0): "success", ("cuda", 2): "success",
                                    ("mps", 0): "failure"})  # fmt: skip
    context = tw.push_event()
    context["vars"] = {"PHASEBENCH_CUDA_SHARDS": '["1/3","2/3","3/3"]'}
    context["needs"] = {"bench-mps": {"result": "success"}, "bench-cuda": {"result": "failure"}}
    collect = tw.step(tw.STORE, "Collect")
    env = {k: tw.evaluate(v, context) for k, v in collect["env"].items()}
    into = tmp_path / "collected"
    args = ["collect", "--shards", str(shards), "--into", str(into), "--run-id", "778"]
    args += ["--expect", f"mps={env['MPS_SHARDS']}", "--expect", f"cuda={env['CUDA_SHARDS']}"]
    assert store.main(args) == 0
    assert sorted(p.name for p in into.iterdir()) == ["PARTIAL", "cuda", "mps"]
    assert len(list((into / "cuda").iterdir())) == 2
    note = (into / "PARTIAL").read_text()
    assert "bench-cuda-1: no artifact" in note
    assert "bench-mps-0: partial (its benchmark step ended failure)" in note
    assert store.push(remote, into, "history: dddd (run 778.1)") == 3
    bare = remote.removeprefix("file://")
    message = git("--git-dir", bare, "log", "-1", "--format=%B", store.BRANCH)
    assert message.startswith("history: dddd (run 778.1)\n\npartial run:")
    assert "bench-cuda-1" in message
    assert all(name.startswith("history/") for name in ths.tree(remote))  # PARTIAL is not stored


def test_a_complete_run_is_not_labelled_partial(tmp_path, remote):
    shards = upload_legs(tmp_path, {("cuda", 0): "success", ("cuda", 1): "success"})
    into = tmp_path / "collected"
    assert store.collect(shards, into, run_id="9", now=NOW, expected={"cuda": 2, "mps": 0}) == [
        "cuda"
    ]
    assert not (into / "PARTIAL").exists()
    assert store.push(remote, into, "history: run 9") == 2
    bare = remote.removeprefix("file://")
    assert git("--git-dir", bare, "log", "-1", "--format=%B", store.BRANCH).strip() == (
        "history: run 9"
    )


# --- the history can shrink: history_prune.py ----------------------------------------------------


def seed_history(tmp_path: Path, remote: str) -> None:
    for run, age in (("1", 500), ("2", 200), ("3", 10)):
        store.push(remote, ths.collected(tmp_path, run, {0: run}, NOW - timedelta(age)), run)


@pytest.fixture
def identity(monkeypatch):
    for key in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{key}_NAME", "maintainer")
        monkeypatch.setenv(f"GIT_{key}_EMAIL", "maintainer@example.com")


def test_prune_replaces_the_branch_with_one_orphan_commit_of_the_recent_files(
    tmp_path, remote, identity, capsys
):
    seed_history(tmp_path, remote)
    bare = remote.removeprefix("file://")
    before = git("--git-dir", bare, "rev-parse", store.BRANCH)
    assert history_prune.prune(remote, keep_days=365, now=NOW) == 1  # a dry run
    assert git("--git-dir", bare, "rev-parse", store.BRANCH) == before
    assert "drop history/cuda/" in capsys.readouterr().out
    assert history_prune.prune(remote, keep_days=365, now=NOW, push=True) == 1
    assert len(git("--git-dir", bare, "rev-list", store.BRANCH).split()) == 1  # no parent
    assert [name.split("-")[1] for name in ths.tree(remote)] == ["r2", "r3"]
    # Readers and the store go on as before on the new tip.
    assert store.fetch(remote, ["cuda"], tmp_path / "base", max_age_days=365, now=NOW) == 2
    assert store.push(remote, ths.collected(tmp_path, "4", {0: "4"}, NOW), "run 4") == 1
    assert [name.split("-")[1] for name in ths.tree(remote)] == ["r2", "r3", "r4"]


def test_prune_fails_while_force_pushes_are_blocked_and_never_loses_a_concurrent_store(
    tmp_path, remote, identity, monkeypatch
):
    seed_history(tmp_path, remote)
    bare = remote.removeprefix("file://")
    git("--git-dir", bare, "config", "receive.denyNonFastForwards", "true")  # the ruleset
    with pytest.raises(store.StoreError, match="blocks force pushes"):
        history_prune.prune(remote, keep_days=365, now=NOW, push=True)
    assert len(ths.tree(remote)) == 3
    git("--git-dir", bare, "config", "receive.denyNonFastForwards", "false")  # lifted
    real = history_prune._git

    def store_meanwhile(repo, *args, check=True, env=None):
        if args[:1] == ("push",):
            store.push(remote, ths.collected(tmp_path, "5", {0: "5"}, NOW), "run 5")
        return real(repo, *args, check=check, env=env)

    monkeypatch.setattr(history_prune, "_git", store_meanwhile)
    with pytest.raises(store.StoreError, match="a store job pushed"):
        history_prune.prune(remote, keep_days=365, now=NOW, push=True)
    assert "r5" in {name.split("-")[1] for name in ths.tree(remote)}  # the lease kept it


def test_prune_refuses_a_window_shorter_than_the_gates_and_a_missing_branch(tmp_path, remote):
    with pytest.raises(store.StoreError, match="under the 120 days"):
        history_prune.prune(remote, keep_days=30, now=NOW)
    with pytest.raises(store.StoreError, match="nothing to prune"):
        history_prune.prune(remote, keep_days=365, now=NOW)
    assert history_prune.main(["--keep-days", "365", "--remote", remote]) == 1
