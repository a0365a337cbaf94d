"""Spec of issue 43's items 4 and 5: a runner that survives its first job, and keeps nothing
of one job for the next.

4. `svc.sh` with `config.sh --ephemeral` serves one job and stops. .github/runner/
   phasebench-runner.sh registers a just-in-time runner per job and cleans between jobs; it runs
   here against a fake `run.sh` and a local API server, as another user when the tests run as
   root (so that file permissions mean what they mean on a runner machine).
5. The shard jobs refuse a runner whose Python user site, PATH, site-packages, runner folder or
   git configuration a job could change, and start from an empty workspace with caches of their
   own; the steps run here with bash.
"""

from __future__ import annotations

import http.server
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import tests.ci.test_workflows as tw

ROOT = Path(__file__).resolve().parents[2]
LOOP = ROOT / ".github" / "runner" / "phasebench-runner.sh"
DOCS = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
TOKEN = "github_pat_supervisor_only_0123456789"
IS_ROOT = os.geteuid() == 0
NOBODY = 65534


def as_runner_user() -> list[str]:
    """How the tests run a command as 'the runner user': nobody when we are root."""
    if not IS_ROOT:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root needs setpriv (util-linux) to act as another user")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


# The supervisor and the runner user must be two users for the fences to mean anything.
needs_two_users = pytest.mark.skipif(
    not IS_ROOT, reason="the runner loop needs a second user: run these tests as root"
)


def runner_user() -> str:
    return pwd.getpwuid(NOBODY if IS_ROOT else os.geteuid()).pw_name


@pytest.fixture
def world() -> Iterator[Path]:
    """A folder the runner user can traverse (pytest's own tmp is private to us)."""
    path = Path(tempfile.mkdtemp(prefix="phasebench-runner-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- 4. the supervisor loop ------------------------------------------------------------------


class Registrations(http.server.BaseHTTPRequestHandler):
    """POST .../actions/runners/generate-jitconfig, as GitHub answers it (201, the config)."""

    seen: ClassVar[list[dict[str, Any]]] = []
    failures: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Registrations.seen.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), **body}
        )
        code = Registrations.failures.pop(0) if Registrations.failures else 201
        n = len(Registrations.seen)
        answer = {"runner": {"id": n}, "encoded_jit_config": f"JIT-{n}"}
        data = json.dumps(answer if code == 201 else {"message": "boom"}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    Registrations.seen, Registrations.failures = [], []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registrations)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


FAKE_RUN_SH = """#!/bin/sh
# The runner: takes one job, then exits. Records what it was given and leaves a mess behind.
log={log}
{{
  echo "turn uid=$(id -u) args=$# jit=$ACTIONS_RUNNER_INPUT_JITCONFIG"
  echo "leftover=$(ls -A "$(dirname "$0")/_work")"
  echo "home=$(ls -A "$HOME" | tr '\\n' ' ')"
  echo "jitfile=$(cat "$(dirname "$0")/.jitconfig")"
  echo "temp=$(ls -A {temp} | tr '\\n' ' ')"
  env | grep -c {token} || true
}} >> "$log"
echo job > "$(dirname "$0")/_work/leftover"
mkdir -p "$HOME/.cache/pip" && echo wheel > "$HOME/.cache/pip/poisoned"
echo tmp > {temp}/mine.$$
"""


def make_runner(world: Path) -> dict[str, Path]:
    """A runner folder as root would lay it out (root's, not writable by the runner user)."""
    dirs = {name: world / name for name in ("runner", "home", "temp", "logs", "etc")}
    for path in dirs.values():
        path.mkdir()
    for path in ("home", "temp", "logs"):  # the runner user's own
        dirs[path].chmod(0o777)
    runner = dirs["runner"]
    (runner / "bin").mkdir()
    for name in ("bin/Runner.Listener", "bin/Runner.Worker", "run-helper.sh.template"):
        (runner / name).write_text("#!/bin/sh\n")
    (runner / ".path").write_text("/usr/bin:/bin\n")
    (runner / "run.sh").write_text(
        FAKE_RUN_SH.format(log=dirs["logs"] / "turns", token=TOKEN, temp=dirs["temp"])
    )
    (runner / "run.sh").chmod(0o755)
    token = dirs["etc"] / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    (dirs["home"] / ".cache").mkdir()
    (dirs["home"] / ".gitconfig").write_text("[core]\n\thooksPath = /tmp/evil\n")
    (dirs["home"] / "keep.txt").write_text("not state a job reads")
    (dirs["temp"] / "old").write_text("a file the runner user left before we started")
    (dirs["temp"] / "others").write_text("another user's: it stays")
    if IS_ROOT:
        os.chown(dirs["temp"] / "old", NOBODY, NOBODY)
        os.chown(dirs["home"] / ".cache", NOBODY, NOBODY)
    return {**dirs, "token": token}


def loop(paths: dict[str, Path], api: str, *extra: str) -> subprocess.CompletedProcess[str]:
    sudo = " ".join(as_runner_user()) or "env"
    env = {
        "PATH": os.environ["PATH"],
        "PHASEBENCH_RUNNER_SUDO": sudo,
        "PHASEBENCH_RUNNER_KILL": f"touch {paths['logs']}/killed",  # never a real pkill here
    }
    command = ["bash", str(LOOP), "--url", "https://github.com/phasebench/phasebench",
               "--dir", str(paths["runner"]), "--user", runner_user(), "--name", "gpu-0",
               "--labels", "gpu,phasebench-ab", "--token-file", str(paths["token"]),
               "--api-url", api, "--home", str(paths["home"]), "--temp-dirs",
               str(paths["temp"]), "--retry-wait", "0", *extra]  # fmt: skip
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def turns(paths: dict[str, Path]) -> list[str]:
    return (paths["logs"] / "turns").read_text().splitlines()


@needs_two_users
def test_the_runner_is_registered_again_for_every_job(world, api):
    paths = make_runner(world)
    proc = loop(paths, api, "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    assert [s["path"] for s in Registrations.seen] == [
        "/repos/phasebench/phasebench/actions/runners/generate-jitconfig"
    ] * 2
    first, second = Registrations.seen
    assert first["auth"] == f"Bearer {TOKEN}"
    assert (first["labels"], first["runner_group_id"], first["work_folder"]) == (
        ["gpu", "phasebench-ab"],
        1,
        "_work",
    )
    assert first["name"] != second["name"]  # a new runner each turn
    lines = turns(paths)
    uid = NOBODY if IS_ROOT else os.geteuid()
    assert lines[0] == f"turn uid={uid} args=0 jit=JIT-1"  # the config by environment only
    assert lines[6] == f"turn uid={uid} args=0 jit=JIT-2"


@needs_two_users
def test_no_job_inherits_the_last_ones_files_caches_or_the_token(world, api):
    paths = make_runner(world)
    assert loop(paths, api, "--jobs", "2").returncode == 0
    first, second = turns(paths)[:6], turns(paths)[6:]
    assert first[1] == second[1] == "leftover="  # _work emptied before each job
    # The user's caches and git config are gone before the first job; other files stay.
    assert first[2].split() == ["home=keep.txt"]
    assert second[2].split() == ["home=keep.txt"]  # the poisoned pip cache did not survive
    assert first[3] == second[3] == "jitfile="  # read once, then emptied
    # The user's temporary files are removed before each job; other users' stay.
    assert first[4].split() == second[4].split() == ["temp=others"]
    assert first[5] == second[5] == "0"  # the supervisor's token is nowhere in the job's env
    assert (paths["logs"] / "killed").exists()  # its processes were ended between jobs


@needs_two_users
def test_a_failed_registration_is_retried_not_fatal(world, api):
    paths = make_runner(world)
    Registrations.failures = [500, 502]
    proc = loop(paths, api, "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    assert len(Registrations.seen) == 3
    assert proc.stderr.count("no runner configuration") == 2


@needs_two_users
@pytest.mark.parametrize("writable", ["bin", "run.sh", "runner", "token"])
def test_a_runner_the_job_could_change_or_a_token_it_could_read_is_refused(world, api, writable):
    paths = make_runner(world)
    target = {"runner": paths["runner"], "token": paths["token"]}.get(
        writable, paths["runner"] / writable
    )
    target.chmod(0o777 if target.is_dir() else (0o644 if writable == "token" else 0o666))
    proc = loop(paths, api, "--jobs", "1")
    assert proc.returncode == 2
    assert str(target) in proc.stderr
    assert Registrations.seen == []  # refused before anything is registered or run


def test_the_loop_will_not_run_as_the_runner_user(world, api):
    paths = make_runner(world)
    env = {"PATH": os.environ["PATH"]}
    me = pwd.getpwuid(os.geteuid()).pw_name
    proc = subprocess.run(
        ["bash", str(LOOP), "--url", "https://github.com/o/r", "--dir", str(paths["runner"]),
         "--user", me, "--name", "n", "--labels", "l", "--token-file", str(paths["token"])],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "not as the runner user" in proc.stderr


def test_the_docs_run_the_loop_never_svc_sh_with_ephemeral():
    assert ".github/runner/phasebench-runner.sh" in DOCS
    for paragraph in DOCS.split("\n\n"):  # no service around a runner that serves one job
        assert not ("svc.sh install" in paragraph and "--ephemeral" in paragraph), paragraph
    assert "--user-free-check" not in DOCS
    # Every PATH a runner's .env example sets is root's, never the runner user's home.
    for path in (line.split("=", 1)[1] for line in DOCS.splitlines() if "PATH=/" in line):
        assert not any(bad in path for bad in ("/Users/", "/home/", "~", "shims")), path


# --- 5. the shard jobs refuse a runner that keeps state, and start clean ----------------------


def state_check(
    world: Path, writable: tuple[Path, ...] = (), **overrides: str
) -> subprocess.CompletedProcess[str]:
    """The shard's "Refuse a runner that keeps state" step, as the runner user; `writable`:
    the paths that user can write."""
    script = tw.step(tw.SELF_HOSTED["bench-cuda"], "Refuse a runner")["run"]
    bin_dir, site, home = world / "bin", world / "site", world / "home"
    work = world / "runner" / "_work" / "repo"
    for path in (bin_dir, site, home, work):
        path.mkdir(parents=True, exist_ok=True)
    (bin_dir / "python3").write_text(f"#!/bin/sh\necho {site}\n")
    (bin_dir / "python3").chmod(0o755)
    for path in (bin_dir, site, world / "runner"):
        path.chmod(0o755 if IS_ROOT else 0o555)  # root's; the runner user cannot write it
    home.chmod(0o777)
    for path in writable:
        path.chmod(0o777)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(home),
        "PYTHONNOUSERSITE": "1",
        "RUNNER_WORKSPACE": str(work),
        **overrides,
    }
    try:
        return subprocess.run(
            [*as_runner_user(), "bash", "-e", "-c", script],
            env=env, capture_output=True, text=True, check=False, cwd=world,
        )  # fmt: skip
    finally:
        for path in (bin_dir, site, world / "runner"):
            path.chmod(0o755)  # so that the fixture can remove it


def test_a_clean_runner_passes_the_state_check(world):
    proc = state_check(world)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("mess", "finding"),
    [
        ("usersite", "PYTHONNOUSERSITE is not 1"),
        ("path", "PATH entry"),
        ("site", "python3's site-packages"),
        ("runner", "the runner's"),
        ("git", "git's global core.hooksPath is set"),
    ],
)
def test_a_runner_that_keeps_state_between_jobs_is_refused(world, mess, finding):
    overrides: dict[str, str] = {}
    writable: tuple[Path, ...] = ()
    if mess == "usersite":
        overrides["PYTHONNOUSERSITE"] = ""
    elif mess == "path":
        (world / "shims").mkdir()
        writable = (world / "shims",)
        overrides["PATH"] = f"{world / 'shims'}:{world / 'bin'}:/usr/bin:/bin"
    elif mess == "site":
        (world / "site").mkdir()
        writable = (world / "site",)
    elif mess == "runner":
        (world / "runner").mkdir()
        (world / "runner" / "run.sh").write_text("#!/bin/sh\n")
        writable = (world / "runner" / "run.sh",)
    else:
        (world / "home").mkdir()
        (world / "home" / ".gitconfig").write_text("[core]\n\thooksPath = /tmp/x\n")
    proc = state_check(world, writable, **overrides)
    assert proc.returncode != 0
    assert f"::error title=runner keeps state::{finding}" in proc.stdout


def test_every_job_runs_without_the_python_user_site():
    assert tw.BENCH["env"]["PYTHONNOUSERSITE"] == "1"  # every job, nox's venvs included


def test_each_shard_starts_from_an_empty_workspace_with_caches_of_its_own(tmp_path):
    for job in tw.SELF_HOSTED.values():
        names = [s.get("name", s.get("uses", "")) for s in tw.steps(job)]
        checkout = next(i for i, n in enumerate(names) if str(n).startswith("actions/checkout"))
        for prefix in ("Refuse a runner", "Start from an empty workspace"):
            assert names.index(tw.step(job, prefix)["name"]) < checkout  # before any head code
    workspace, temp = tmp_path / "ws", tmp_path / "temp"
    hooks = workspace / ".git" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "post-checkout").write_text("#!/bin/sh\necho pwned\n")
    (workspace / ".nox").mkdir()
    (workspace / "locked").mkdir()
    (workspace / "locked" / "f").write_text("x")
    (workspace / "locked").chmod(0o500)
    temp.mkdir()
    env_file = tmp_path / "github_env"
    script = tw.step(tw.SELF_HOSTED["bench-mps"], "Start from an empty workspace")["run"]
    env = {"PATH": os.environ["PATH"], "GITHUB_WORKSPACE": str(workspace),
           "RUNNER_TEMP": str(temp), "GITHUB_ENV": str(env_file)}  # fmt: skip
    proc = subprocess.run(["bash", "-e", "-c", script], env=env, cwd=workspace, check=False)
    assert proc.returncode == 0
    assert list(workspace.iterdir()) == []
    written = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    for key in ("XDG_CACHE_HOME", "PIP_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR"):
        assert written[key].startswith(str(temp)), key


def test_the_runner_folder_is_never_told_to_be_the_runner_users():
    """The docs and the loop agree on the files the runner must write, and only those."""
    loop_text = LOOP.read_text(encoding="utf-8")
    for name in (".runner", ".credentials", ".credentials_rsaparams", "run-helper.sh"):
        assert name in loop_text
    assert "ACTIONS_RUNNER_INPUT_JITCONFIG" in loop_text  # never `run.sh --jitconfig X`
    assert "--jitconfig" not in loop_text.replace("generate-jitconfig", "")
