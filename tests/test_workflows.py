"""Spec of the GitHub Actions workflows' security and fleet invariants (.github/), and of the
history store script they call (.github/scripts/history_store.py).

The workflow tests read the YAML (PyYAML parses the `on:` key as the boolean True) and check
what a reviewer would: permissions, pinned actions, credentials, fork guards. The guards are
not matched as text: `if:` conditions are evaluated with a small evaluator of the GitHub
expression language against the event contexts that matter (fork PR, labelled PR, push, ...).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted([*WORKFLOWS.glob("*.yml"), *WORKFLOWS.glob("*.yaml")])
REPO = "phasebench/phasebench"


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    if True in data:  # YAML 1.1: the key `on` is the boolean True
        data["on"] = data.pop(True)
    return data


def workflow(name: str) -> dict[str, Any]:
    return load(WORKFLOWS / name)


def jobs(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return data["jobs"]


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return job.get("steps", [])


def triggers(data: dict[str, Any]) -> set[str]:
    on = data["on"]
    if isinstance(on, str):
        return {on}
    if isinstance(on, list):
        return set(on)
    return set(on)


def is_self_hosted(job: dict[str, Any]) -> bool:
    runs_on = job.get("runs-on", [])
    labels = [runs_on] if isinstance(runs_on, str) else runs_on
    return any("self-hosted" in str(label) for label in labels)


# --- a small evaluator of GitHub Actions expressions --------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||<=|>=|[!()<>,])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_.\-*]*))"
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ValueError(f"cannot tokenize {text[pos:]!r}")
        pos = match.end()
        kind = match.lastgroup
        assert kind is not None
        out.append((kind, match.group(kind)))
    return out


def _lookup(context: dict[str, Any], name: str) -> Any:
    value: Any = context
    for part in name.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    return value


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "")


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    return a == b


class Expr:
    """Recursive-descent evaluation of `||`, `&&`, `==`/`!=`, `!`, calls and property paths."""

    def __init__(self, text: str, context: dict[str, Any]) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.ctx = context

    def value(self) -> Any:
        result = self.or_()
        assert self.i == len(self.toks), f"trailing tokens {self.toks[self.i :]}"
        return result

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def or_(self) -> Any:
        left = self.and_()
        while self.peek() == "||":
            self.take()
            right = self.and_()
            left = left if _truthy(left) else right
        return left

    def and_(self) -> Any:
        left = self.cmp()
        while self.peek() == "&&":
            self.take()
            right = self.cmp()
            left = right if _truthy(left) else left
        return left

    def cmp(self) -> Any:
        left = self.unary()
        while self.peek() in ("==", "!="):
            op = self.take()[1]
            right = self.unary()
            left = _equal(left, right) if op == "==" else not _equal(left, right)
        return left

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not _truthy(self.unary())
        return self.atom()

    def atom(self) -> Any:
        kind, text = self.take()
        if text == "(":
            value = self.or_()
            assert self.take()[1] == ")"
            return value
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text) if "." in text else int(text)
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if self.peek() == "(":
            self.take()
            args = []
            while self.peek() != ")":
                args.append(self.or_())
                if self.peek() == ",":
                    self.take()
            self.take()
            return self.call(text, args)
        return _lookup(self.ctx, text)

    def call(self, name: str, args: list[Any]) -> Any:
        status = self.ctx.get("_status", "success")
        funcs = {
            "format": lambda: re.sub(
                r"\{(\d+)\}", lambda m: str(args[int(m.group(1)) + 1]), args[0]
            ),
            "cancelled": lambda: status == "cancelled",
            "always": lambda: True,
            "success": lambda: status == "success",
            "failure": lambda: status == "failure",
            "fromJSON": lambda: json.loads(args[0]),
            "toJSON": lambda: json.dumps(args[0]),
            "contains": lambda: str(args[1]).lower() in str(args[0]).lower(),
        }
        return funcs[name]()


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def evaluate(text: str, context: dict[str, Any]) -> Any:
    """An `if:` (bare or in `${{ }}`) gives its value; text with `${{ }}` inside, the string."""
    parts = re.split(r"\$\{\{(.*?)\}\}", str(text).strip(), flags=re.DOTALL)
    if len(parts) == 1:
        return Expr(parts[0], context).value()
    if len(parts) == 3 and parts[0] == parts[2] == "":
        return Expr(parts[1], context).value()
    return "".join(
        part if i % 2 == 0 else _as_text(Expr(part, context).value())
        for i, part in enumerate(parts)
    )


def pr_event(*, fork: bool, action: str = "opened", label: str | None = None) -> dict[str, Any]:
    head_repo = "contributor/phasebench" if fork else REPO
    event: dict[str, Any] = {
        "action": action,
        "pull_request": {"number": 42, "head": {"sha": "a" * 40, "repo": {"full_name": head_repo}}},
    }
    if label is not None:
        event["label"] = {"name": label}
    return {
        "github": {
            "event_name": "pull_request",
            "event": event,
            "repository": REPO,
            "ref": "refs/pull/42/merge",
            "run_id": "777",
            "sha": "b" * 40,
        },
        "vars": {},
        "inputs": {},
        "needs": {},
    }


def push_event(ref: str = "refs/heads/main") -> dict[str, Any]:
    return {
        "github": {
            "event_name": "push",
            "event": {},
            "repository": REPO,
            "ref": ref,
            "run_id": "778",
        },
        "vars": {},
        "inputs": {},
        "needs": {},
    }


def dispatch_event(runner_class: str = "all") -> dict[str, Any]:
    ctx = push_event("refs/heads/topic")
    ctx["github"]["event_name"] = "workflow_dispatch"
    ctx["inputs"] = {"runner_class": runner_class}
    return ctx


def test_the_expression_evaluator_follows_githubs_rules():
    ctx = {"github": {"event_name": "push", "x": None}}
    assert evaluate("github.event_name == 'PUSH'", ctx) is True  # case-insensitive strings
    assert evaluate("github.x || 'fallback'", ctx) == "fallback"
    assert evaluate("github.missing.deep == null", ctx) is True
    assert evaluate("!cancelled() && format('pr-{0}', 7)", ctx) == "pr-7"
    assert evaluate("${{ fromJSON('[\"1/1\"]') }}", ctx) == ["1/1"]


# --- every workflow -----------------------------------------------------------------------------


def test_the_expected_workflows_exist():
    assert {p.name for p in FILES} >= {"ci.yml", "bench.yml", "bench-comment.yml"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_top_level_permissions_are_empty_and_every_job_declares_its_own(path):
    data = load(path)
    assert data.get("permissions") == {}
    for name, job in jobs(data).items():
        assert isinstance(job.get("permissions"), dict), f"{path.name}:{name} has no permissions"
        assert "timeout-minutes" in job, f"{path.name}:{name} has no timeout"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_full_sha_with_its_version_in_a_comment(path):
    uses_lines = [line for line in path.read_text(encoding="utf-8").splitlines() if "uses:" in line]
    assert uses_lines
    for line in uses_lines:
        assert re.search(r"uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$", line), line


def test_one_action_is_pinned_to_one_sha_everywhere():
    pins: dict[str, set[str]] = {}
    for path in FILES:
        for match in re.finditer(
            r"uses: ([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # (v[\d.]+)", path.read_text()
        ):
            pins.setdefault(match.group(1), set()).add(f"{match.group(2)} {match.group(3)}")
    assert pins
    assert all(len(shas) == 1 for shas in pins.values()), pins


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_workflow_uses_pull_request_target(path):
    assert "pull_request_target" not in triggers(load(path))
    assert "pull_request_target" not in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_checkout_drops_its_credentials(path):
    checkouts = [
        step
        for job in jobs(load(path)).values()
        for step in steps(job)
        if str(step.get("uses", "")).startswith("actions/checkout@")
    ]
    assert checkouts
    for step in checkouts:
        assert step.get("with", {}).get("persist-credentials") is False


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_run_script_expands_an_expression(path):
    """Untrusted input reaches scripts only through `env:`, never spliced into the shell text."""
    for name, job in jobs(load(path)).items():
        for step in steps(job):
            script = str(step.get("run", ""))
            assert "${{" not in script, f"{path.name}:{name}: {script!r}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_the_workflows_run_only_nox_sessions_that_exist_and_our_scripts(path):
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    sessions = set(re.findall(r'@nox\.session\(name="([\w-]+)"', noxfile))
    sessions |= set(re.findall(r"@nox\.session[^\n]*\n(?:@[^\n]*\n)*def (\w+)\(", noxfile))
    for job in jobs(load(path)).values():
        for step in steps(job):
            script = str(step.get("run", ""))
            for session in re.findall(r"nox -s ([\w-]+)", script):
                assert session in sessions, f"{path.name} calls unknown session {session}"
            for script_path in re.findall(r"\.github/scripts/[\w.]+", script):
                assert (ROOT / script_path).is_file(), script_path


def test_custom_runner_labels_are_declared_for_actionlint():
    config = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text(encoding="utf-8"))
    declared = {label.lower() for label in config["self-hosted-runner"]["labels"]}
    builtin = {"self-hosted", "linux", "macos", "windows", "x64", "arm64", "arm"}
    for path in FILES:
        for job in jobs(load(path)).values():
            if is_self_hosted(job):
                labels = {str(label).lower() for label in job["runs-on"]}
                assert labels - builtin <= declared, labels


# --- ci.yml -------------------------------------------------------------------------------------


def test_hosted_ci_runs_lint_and_tests_on_pull_requests_and_pushes_to_main():
    data = workflow("ci.yml")
    assert triggers(data) == {"pull_request", "push"}
    assert data["on"]["push"]["branches"] == ["main"]
    scripts = {
        name: " ".join(str(s.get("run", "")) for s in steps(job))
        for name, job in jobs(data).items()
    }
    assert "nox -s lint" in scripts["lint"]
    assert "nox -s tests" in scripts["tests"]
    for job in jobs(data).values():
        assert job["runs-on"] == "ubuntu-latest"
        assert job["permissions"] == {"contents": "read"}


# --- bench.yml ----------------------------------------------------------------------------------

BENCH = workflow("bench.yml")
SELF_HOSTED = {name: job for name, job in jobs(BENCH).items() if is_self_hosted(job)}


def test_bench_has_one_self_hosted_job_per_runner_class_calling_its_nox_session():
    assert set(SELF_HOSTED) == {"bench-mps", "bench-cuda"}
    assert SELF_HOSTED["bench-mps"]["runs-on"] == ["self-hosted", "macOS", "ARM64"]
    assert SELF_HOSTED["bench-cuda"]["runs-on"] == ["self-hosted", "Linux", "X64", "gpu"]
    for name, job in SELF_HOSTED.items():
        runs = [str(s.get("run", "")) for s in steps(job) if "run" in s]
        assert runs == [f'python3 -m nox -s {name} -- --shard "$SHARD"']


def test_self_hosted_jobs_hold_no_write_token():
    for job in SELF_HOSTED.values():
        assert job["permissions"] == {"contents": "read"}


@pytest.mark.parametrize(
    ("context", "runs"),
    [
        (pr_event(fork=False), True),
        (pr_event(fork=False, action="synchronize"), True),
        (pr_event(fork=True), False),
        (pr_event(fork=True, action="synchronize"), False),
        (pr_event(fork=True, action="reopened"), False),
        (pr_event(fork=True, action="labeled", label="run-benchmarks"), True),
        (pr_event(fork=True, action="labeled", label="perf-regression-accepted"), False),
        (pr_event(fork=False, action="labeled", label="perf-regression-accepted"), False),
        (push_event(), True),
        (dispatch_event(), True),
    ],
    ids=[
        "same-repo-opened",
        "same-repo-push",
        "fork-opened",
        "fork-push",
        "fork-reopened",
        "fork-labelled-run-benchmarks",
        "fork-other-label",
        "same-repo-other-label",
        "main",
        "dispatch",
    ],
)
def test_the_fork_guard_of_every_self_hosted_job(context, runs):
    for name, job in SELF_HOSTED.items():
        assert "if" in job, f"{name} has no fork guard"
        assert _truthy(evaluate(job["if"], context)) is runs, name


def test_a_runner_class_can_be_switched_off_or_chosen_on_dispatch():
    off = push_event()
    off["vars"] = {"PHASEBENCH_MPS": "off"}
    assert not _truthy(evaluate(SELF_HOSTED["bench-mps"]["if"], off))
    assert _truthy(evaluate(SELF_HOSTED["bench-cuda"]["if"], off))
    only_cuda = dispatch_event("cuda")
    assert not _truthy(evaluate(SELF_HOSTED["bench-mps"]["if"], only_cuda))
    assert _truthy(evaluate(SELF_HOSTED["bench-cuda"]["if"], only_cuda))


def test_shards_come_from_a_repository_variable_and_default_to_one():
    for name, job in SELF_HOSTED.items():
        cls = name.removeprefix("bench-").upper()
        shard_expr = job["strategy"]["matrix"]["shard"]
        assert evaluate(shard_expr, {"vars": {}}) == ["1/1"]
        many = {"vars": {f"PHASEBENCH_{cls}_SHARDS": '["1/2","2/2"]'}}
        assert evaluate(shard_expr, many) == ["1/2", "2/2"]
        assert job["strategy"]["fail-fast"] is False


def test_each_shard_uploads_its_history_even_when_a_cell_failed():
    for name, job in SELF_HOSTED.items():
        upload = next(s for s in steps(job) if "upload-artifact" in str(s.get("uses")))
        assert upload["if"] == "${{ !cancelled() }}"
        assert upload["with"]["name"].startswith(f"history-{name.removeprefix('bench-')}-")
        assert upload["with"]["include-hidden-files"] is True  # .benchmarks/ is a dot folder


def test_the_benchmarks_run_the_pr_head_that_the_comment_names():
    for job in SELF_HOSTED.values():
        checkout = steps(job)[0]
        assert evaluate(checkout["with"]["ref"], pr_event(fork=True)) == "a" * 40


def test_the_report_judges_whatever_ran_and_fails_only_through_the_verdict_step():
    report = jobs(BENCH)["report"]
    assert report["runs-on"] == "ubuntu-latest"
    assert report["permissions"] == {"contents": "read", "pull-requests": "read"}
    ctx = push_event()
    ctx["needs"] = {"bench-mps": {"result": "failure"}, "bench-cuda": {"result": "skipped"}}
    assert _truthy(evaluate(report["if"], ctx))
    ctx["needs"]["bench-mps"]["result"] = "skipped"
    assert not _truthy(evaluate(report["if"], ctx))
    runs = " ".join(str(s.get("run", "")) for s in steps(report))
    assert "nox -s report -- --history history --out out/report" in runs
    assert "nox -s gate -- --history history --json out/report/gate.json" in runs
    assert "GITHUB_STEP_SUMMARY" in runs
    names = [s.get("name", "") for s in steps(report)]
    assert names.index("Verdict") < names.index("Upload the report")
    for step in steps(report)[names.index("Verdict") + 1 :]:
        assert step["if"].startswith("${{ !cancelled()")


def test_only_the_store_job_can_write_and_only_after_a_push_to_main():
    writers = {
        name
        for name, job in jobs(BENCH).items()
        if any(level == "write" for level in job["permissions"].values())
    }
    assert writers == {"store"}
    store = jobs(BENCH)["store"]
    assert store["runs-on"] == "ubuntu-latest"
    assert store["permissions"] == {"contents": "write"}
    assert set(store["needs"]) == {"bench-mps", "bench-cuda", "report"}
    ran = {"bench-mps": {"result": "failure"}, "bench-cuda": {"result": "success"}}
    main = push_event()
    main["needs"] = ran
    assert _truthy(evaluate(store["if"], main))  # a failed cell still stores the others
    for other in (push_event("refs/heads/topic"), pr_event(fork=False), dispatch_event()):
        other["needs"] = ran
        assert not _truthy(evaluate(store["if"], other))


def test_runs_on_main_queue_and_pr_runs_supersede_each_other_without_label_noise():
    concurrency = BENCH["concurrency"]
    group = concurrency["group"]
    cancel = concurrency["cancel-in-progress"]
    assert evaluate(group, push_event()) == "bench-refs/heads/main"
    assert evaluate(cancel, push_event()) is False
    same_pr = {
        evaluate(group, pr_event(fork=False)),
        evaluate(group, pr_event(fork=False, action="synchronize")),
        evaluate(group, pr_event(fork=True, action="labeled", label="run-benchmarks")),
    }
    assert same_pr == {"bench-pr-42"}
    assert evaluate(cancel, pr_event(fork=False)) is True
    # Adding the accept label must not cancel a benchmark run in progress.
    noise = pr_event(fork=False, action="labeled", label="perf-regression-accepted")
    assert evaluate(group, noise) == "bench-777"


# --- bench-comment.yml --------------------------------------------------------------------------


def test_the_commenter_is_triggered_only_by_completed_bench_runs():
    data = workflow("bench-comment.yml")
    assert triggers(data) == {"workflow_run"}
    assert data["on"]["workflow_run"] == {"workflows": ["bench"], "types": ["completed"]}
    assert BENCH["name"] == "bench"


def test_the_commenter_holds_only_pull_requests_write_and_actions_read():
    for job in jobs(workflow("bench-comment.yml")).values():
        assert job["permissions"] == {"pull-requests": "write", "actions": "read"}
        assert job["runs-on"] == "ubuntu-latest"


def test_the_commenter_runs_only_default_branch_code_and_treats_the_artifact_as_data():
    job = jobs(workflow("bench-comment.yml"))["comment"]
    checkout = steps(job)[0]
    assert checkout["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    download = next(s for s in steps(job) if "download-artifact" in str(s.get("uses")))
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    runs = [str(s["run"]) for s in steps(job) if "run" in s]
    assert runs == ['python3 .github/scripts/pr_comment.py --artifact "$RUNNER_TEMP/pr-comment"']
    env = next(s for s in steps(job) if "run" in s)["env"]
    assert env["RUN_HEAD_SHA"] == "${{ github.event.workflow_run.head_sha }}"


# --- .github/scripts/history_store.py -----------------------------------------------------------


def _load_store():
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


def shard_artifacts(tmp: Path, cls: str, shard: int, files: dict[str, str]) -> Path:
    folder = tmp / "shards" / f"history-{cls}-{shard}" / "Linux-CPython-3.11-64bit"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return tmp / "shards"


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def remote(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    (tmp_path / "gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
    bare = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(bare))
    return str(bare)


def test_collect_keeps_valid_files_under_unique_names_per_class(tmp_path):
    # Two shards of one class both write 0001_*.json: the names must not collide.
    shard_artifacts(tmp_path, "cuda", 0, {"0001_abc.json": history_json("a")})
    shard_artifacts(tmp_path, "cuda", 1, {"0001_abc.json": history_json("b")})
    shards = shard_artifacts(
        tmp_path, "mps", 0, {"0001_abc.json": history_json(), "0002_bad.json": "{trunc"}
    )
    (tmp_path / "shards" / "not-history").mkdir()
    classes = store.collect(shards, tmp_path / "out", run_id="55", attempt="2")
    assert classes == ["cuda", "mps"]
    cuda = sorted(p.name for p in (tmp_path / "out" / "cuda").iterdir())
    assert cuda == ["55.2-s0-0001_abc.json", "55.2-s1-0001_abc.json"]
    assert [p.name for p in (tmp_path / "out" / "mps").iterdir()] == ["55.2-s0-0001_abc.json"]


def test_is_history_file_refuses_what_pytest_benchmark_does_not_write(tmp_path):
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "ok.json").write_text(history_json())
    (tmp_path / "link.json").symlink_to(tmp_path / "ok.json")
    assert store.is_history_file(tmp_path / "ok.json") is None
    assert "benchmarks" in store.is_history_file(tmp_path / "list.json")
    assert store.is_history_file(tmp_path / "link.json") == "not a regular file"


def test_push_creates_the_orphan_branch_then_fetch_reads_it_back(tmp_path, remote):
    shards = shard_artifacts(tmp_path, "cuda", 0, {"0001_a.json": history_json()})
    store.collect(shards, tmp_path / "run1", run_id="1", attempt="1")
    assert store.push(remote, tmp_path / "run1", "history: run 1") == 1
    tree = git("--git-dir", remote, "ls-tree", "-r", "--name-only", store.BRANCH).split()
    assert tree == ["history/cuda/1.1-s0-0001_a.json"]
    parents = git("--git-dir", remote, "rev-list", "--parents", store.BRANCH).split()
    assert len(parents) == 1  # an orphan root commit: no source code on the branch
    assert store.fetch(remote, ["cuda", "mps"], tmp_path / "base") == 1
    assert (tmp_path / "base" / "cuda" / "1.1-s0-0001_a.json").read_text() == history_json()
    assert store.push(remote, tmp_path / "run1", "again") == 0  # idempotent: nothing new


def test_fetch_of_a_missing_branch_is_an_empty_history(tmp_path, remote):
    assert store.fetch(remote, ["cuda"], tmp_path / "base") == 0
    assert not (tmp_path / "base").exists()


def test_concurrent_pushes_both_land_by_rebasing(tmp_path, remote, monkeypatch):
    monkeypatch.setattr(store.time, "sleep", lambda _s: None)
    for run in ("1", "2", "3"):
        shards = shard_artifacts(tmp_path / run, "mps", 0, {f"000{run}_x.json": history_json(run)})
        store.collect(shards, tmp_path / f"run{run}", run_id=run, attempt="1")
    store.push(remote, tmp_path / "run1", "run 1")
    # Run 3 pushes between run 2's fetch and run 2's push: run 2 is rejected once, then rebases.
    real_git = store._git
    raced = threading.Event()

    def racing_git(repo, *args, check=True):
        if args[:1] == ("push",) and not raced.is_set():
            raced.set()
            store.push(remote, tmp_path / "run3", "run 3")
        return real_git(repo, *args, check=check)

    monkeypatch.setattr(store, "_git", racing_git)
    assert store.push(remote, tmp_path / "run2", "run 2") == 1
    tree = git("--git-dir", remote, "ls-tree", "-r", "--name-only", store.BRANCH).split()
    assert tree == [
        "history/mps/1.1-s0-0001_x.json",
        "history/mps/2.1-s0-0002_x.json",
        "history/mps/3.1-s0-0003_x.json",
    ]


def test_push_never_overwrites_a_stored_file_with_other_content(tmp_path, remote):
    (tmp_path / "a" / "cuda").mkdir(parents=True)
    (tmp_path / "a" / "cuda" / "f.json").write_text(history_json("one"))
    store.push(remote, tmp_path / "a", "first")
    (tmp_path / "a" / "cuda" / "f.json").write_text(history_json("two"))
    with pytest.raises(store.StoreError, match="other content"):
        store.push(remote, tmp_path / "a", "second")


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


def test_the_store_cli_reports_failures_on_one_line(tmp_path, capsys):
    bad = tmp_path / "collected" / "Bad Class"
    bad.mkdir(parents=True)
    assert (
        store.main(
            [
                "fetch",
                "--remote",
                str(tmp_path / "none.git"),
                "--classes-from",
                str(tmp_path / "collected"),
                "--into",
                str(tmp_path / "o"),
            ]
        )
        == 1
    )
    assert capsys.readouterr().err.startswith("::error::history store:")


def test_the_scripts_are_stdlib_only():
    stdlib = set(sys.stdlib_module_names) | {"pr_comment", "__future__"}
    for path in (ROOT / ".github" / "scripts").glob("*.py"):
        tree_imports = re.findall(r"^(?:from|import) ([\w]+)", path.read_text(), re.MULTILINE)
        assert set(tree_imports) <= stdlib, (path.name, set(tree_imports) - stdlib)


def test_an_unreachable_store_is_an_error_not_an_empty_history(tmp_path, remote):
    with pytest.raises(store.StoreError, match="cannot read"):
        store.fetch(str(tmp_path / "no-such-remote.git"), ["cuda"], tmp_path / "base")
