"""Spec of issue 43's items 8 and 9: the token never meets unpinned code, and nothing a shard
wrote reaches the runner's command channel.

8. Class and shard names, a re-judge's notes and file names come from files a runner wrote after
   a PR's code ran there; printed as they are they would be workflow commands (`::set-output`,
   `::stop-commands::`, `##[add-mask]` anywhere in a line: actions/runner `ActionCommand.cs`).
9. The gate installs only hash-pinned wheels, into a venv of its own; the trusted scripts run
   under `python -I` (the token's step under `-I -S`, the standard library only); the token
   goes only to the steps that post; a re-judge gets no token whatever its caller holds.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib

import tests.ci.test_pr_comment as tpc
import tests.ci.test_workflows as tw

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / ".github" / "scripts"
sys.path.insert(0, str(SCRIPTS))


class _Lazy:
    """The scripts, imported when a test first needs one: each test fails on its own where
    one is missing (as before issue 43), not the whole module."""

    def __getattr__(self, name: str) -> Any:
        return importlib.import_module(name)


lazy = _Lazy()

verdict = tpc.verdict
REQUIREMENTS = ROOT / ".github" / "requirements"


# --- 8. the runner's command channel -----------------------------------------------------------

FORGED = [
    "::set-output name=exit::0",
    "x\n::add-mask::secret",
    "##[set-output name=exit]0",
    "  ::stop-commands::abc",
    "a\r::error::forged",
]


def assert_no_forged_command(text: str) -> None:
    """Every line: either one of our commands with plain data, or no command at all."""
    for line in text.splitlines():
        assert "##[" not in line, line
        if line.startswith("::"):
            found = re.fullmatch(r"::(error|warning|notice)::(.*)", line)
            assert found is not None, line
            assert "::" not in found.group(2), line
        else:
            assert not line.lstrip().startswith("::"), line


@pytest.mark.parametrize("forged", FORGED)
def test_a_shards_names_and_notes_never_become_workflow_commands(tmp_path, capsys, forged):
    shards = tmp_path / "shards"
    tpc.shard(shards, "cuda", 0, "ab", outcome="failure", ab_status="fail")
    meta = json.loads((shards / "bench-cuda-0" / "outcome.json").read_text())
    meta.update(shard=forged, outcome=forged, **{"class": forged})
    (shards / "bench-cuda-0" / "outcome.json").write_text(json.dumps(meta))
    ab = json.loads((shards / "bench-cuda-0" / "data" / "ab.json").read_text())
    ab.update(status_reason=forged, settings_notes=[forged])
    (shards / "bench-cuda-0" / "data" / "ab.json").write_text(json.dumps(ab))
    assert verdict.run(tpc.verdict_args(tmp_path), tpc.PR_ENV, tpc.FakeGitHub()) == 1
    captured = capsys.readouterr()
    marker = re.search(r"[a-z]+-[a-z]+|forged", forged)
    assert marker is not None
    assert marker.group() in captured.out  # shown, as words
    assert_no_forged_command(captured.out + captured.err)


def test_a_collected_files_name_never_becomes_a_workflow_command(tmp_path, capsys):
    shards = tmp_path / "shards"
    tpc.shard(shards, "cuda", 0, "history", outcome="failure")
    (shards / "bench-cuda-0" / "data" / "x##[add-mask]y.json").write_text("{}")
    lazy.history_collect.collect(shards, tmp_path / "into", run_id="1", expected={"cuda": 1})
    captured = capsys.readouterr()
    assert "skipping" in captured.out
    assert_no_forged_command(captured.out)


def test_plain_text_keeps_its_words_and_loses_the_command_channel():
    assert lazy.workflow_log.plain("a\n::add-mask::b") == "a\\n: :add-mask: :b"
    assert lazy.workflow_log.plain("x ##[error]y") == "x # #[error]y"
    assert lazy.workflow_log.plain(":::") == ": : :"
    assert lazy.workflow_log.command("error", "50% done\n::x") == "::error::50%25 done\\n: :x"
    with pytest.raises(ValueError, match="set-output"):
        lazy.workflow_log.command("set-output", "x")


def test_the_gates_steps_that_print_the_shards_files_turn_the_command_channel_off():
    for prefix in ("Report (python -m reports render)", "Gate (python -m reports gate)"):
        script = tw.step(tw.GATE, prefix)["run"]
        stop, resume = script.index('"::stop-commands::$token"'), script.index('"::$token::"')
        assert stop < script.index("judge_module.py") < resume
        assert "secrets.token_hex" in script  # a token nobody can guess from the output


# --- 9. hash-pinned, isolated, the token only where it posts ------------------------------------


def requirements() -> dict[str, list[str]]:
    """gate.txt: name -> its sha256 hashes (`name==version \\ --hash=sha256:...`)."""
    text = (REQUIREMENTS / "gate.txt").read_text(encoding="utf-8")
    found: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=[a-z0-9])", text):
        head = re.match(r"([a-z0-9_.-]+)==(\S+) \\", block)
        if head:
            found[head.group(1)] = re.findall(r"--hash=sha256:([0-9a-f]{64})", block)
    return found


def test_the_gate_installs_hash_pinned_wheels_only_into_a_venv_of_its_own():
    install = tw.step(tw.GATE, "Install the judge's dependencies")["run"]
    assert 'python -I -m venv "$RUNNER_TEMP/judge-venv"' in install
    for flag in ("--require-hashes", "--only-binary :all:", "--no-deps"):
        assert flag in install, flag
    assert "-r judge/.github/requirements/gate.txt" in install
    for s in tw.steps(tw.GATE):
        script = str(s.get("run", ""))
        assert "nox" not in script  # nox would install the report group unpinned
        assert script.count("pip install") == (1 if s is tw.step(tw.GATE, "Install") else 0)
    pinned = requirements()
    assert all(len(hashes) >= 1 for hashes in pinned.values()), pinned
    # What the judge imports: the `report` group, and what it depends on (no-deps: all listed).
    group = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["report"]
    wanted = {re.split(r"[<>=!~ ;\[]", spec)[0].lower() for spec in group}
    assert wanted | {"markupsafe"} == set(pinned)
    lines = (REQUIREMENTS / "gate.in").read_text().splitlines()
    assert {ln for ln in lines if ln and not ln.startswith("#")} == wanted
    updates = tw.load(ROOT / ".github" / "dependabot.yml")["updates"]
    assert {"package-ecosystem": "pip", "directory": "/.github/requirements"}.items() <= next(
        u for u in updates if u["package-ecosystem"] == "pip"
    ).items()


def _python_calls(script: str) -> list[str]:
    return re.findall(r"(?:^|[\s\"])((?:\"\$RUNNER_TEMP/judge-venv/bin/)?python3?\"?(?: -\S+)*)",
                      script, re.MULTILINE)  # fmt: skip


HOSTED = [
    ("bench.yml", "announce"),
    ("bench.yml", "gate"),
    ("bench.yml", "store"),
    ("bench-comment.yml", "comment"),
    ("bench-watchdog.yml", "watchdog"),
]


@pytest.mark.parametrize(("name", "job_id"), HOSTED, ids=[j for _, j in HOSTED])
def test_the_trusted_scripts_run_isolated_and_the_token_only_where_it_posts(name, job_id):
    job = tw.jobs(tw.workflow(name))[job_id]
    for s in tw.steps(job):
        script = str(s.get("run", ""))
        calls = _python_calls(script)
        holds = any(
            "github.token" in str(v) or "secrets." in str(v) for v in s.get("env", {}).values()
        )
        for call in calls:
            if "-c" in call.split() and "secrets" in script:
                continue  # the stop-commands token: `python -I -S -c ...`
            assert " -I" in call, (name, s.get("name"), call)
            if holds:  # the token's step: the standard library and our folder only
                assert " -I -S" in call, (name, s.get("name"), call)
                assert "judge-venv" not in call, (name, s.get("name"))
        if holds and "uses" not in s:
            assert calls, (name, s.get("name"))  # nothing but our stdlib scripts gets it


def test_in_the_gate_the_token_reaches_only_the_history_fetch_and_the_post():
    holders = {
        s.get("name")
        for s in tw.steps(tw.GATE)
        if "uses" not in s and "github.token" in json.dumps(s.get("env", {}))
    }
    assert holders == {
        "Fetch main's recent history of the same runner classes",
        "Verdict (sets the phasebench/gate status; the only step with the token)",
    }
    assert "GITHUB_TOKEN" not in tw.step(tw.GATE, "Judge")["env"]


def test_a_rejudge_gets_no_token_and_no_python_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secret")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "evil"))
    monkeypatch.setenv("PIP_INDEX_URL", "https://evil.example")
    seen: dict[str, Any] = {}

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        seen.update(command=command, env=kwargs["env"])
        tpc.gate_json(Path(command[command.index("--out") + 1]) / "ab.json", "pass")
        return subprocess.CompletedProcess(command, 0, "", "")

    shards = tpc.shard(tmp_path / "shards", "cuda", 0, "ab", ab_status="pass")
    for side in ("base", "head"):
        (shards / "bench-cuda-0" / "data" / f"{side}.json").write_text("{}")
    lazy.rejudge.rejudge_with(ROOT, tmp_path / "out", run=run)(shards / "bench-cuda-0")
    assert seen["command"][1:4] == ["-I", str(SCRIPTS / "judge_module.py"), str(ROOT)]
    assert set(seen["env"]) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE"}


def test_judge_module_runs_the_judges_module_never_one_from_the_current_directory(tmp_path):
    judge, here = tmp_path / "judge", tmp_path / "here"
    for root, word in ((judge, "judge"), (here, "shadow")):
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "__init__.py").write_text("")
        (root / "pkg" / "tool.py").write_text(f"import sys\nprint('{word}', sys.argv[1:])\n")
    (here / "json.py").write_text("raise SystemExit('a shadowed stdlib module ran')\n")
    proc = subprocess.run(
        [sys.executable, "-I", str(SCRIPTS / "judge_module.py"), str(judge), "pkg.tool", "--x"],
        cwd=here, capture_output=True, text=True, check=False,
        env={"PYTHONPATH": str(here), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert (proc.returncode, proc.stdout.strip()) == (0, "judge ['--x']"), proc.stderr


@pytest.mark.parametrize(
    "script", ["verdict.py", "announce.py", "watchdog.py", "pr_comment.py", "history_store.py",
               "shard_stage.py"],
)  # fmt: skip
def test_each_script_the_workflows_run_starts_under_isolated_mode(tmp_path, script):
    """`python -I -S` leaves the script's folder off sys.path: each puts it back itself."""
    probe = "--help" if script not in ("announce.py", "watchdog.py") else ""
    env = {"PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(tmp_path / "out")}
    env |= {"GITHUB_REPOSITORY": "not a repository"}  # the API calls stop at once
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(SCRIPTS / script), *filter(None, [probe])],
        cwd=tmp_path, capture_output=True, text=True, check=False, env=env, timeout=60,
    )  # fmt: skip
    assert "ModuleNotFoundError" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1, 2), proc.stderr
