"""Re-judging the A/B shards with the judge checkout's code, inside the gate job's time (stdlib).

Each A/B shard uploads its two sides' raw pytest-benchmark JSON (`data/base.json`,
`data/head.json`); the gate runs the judge checkout's `python -m reports.ab --settings own` on
them, so the statistics, thresholds and alpha that judge a PR are the base's. `--settings own`
because the shard's `context.json` (shown in the report, copied beside the verdicts) was written
on the runner where the PR's code ran: its recorded settings are listed when they differ
(`settings_notes` in the judge's `ab.json`), never used.

Time: the gate job has `timeout-minutes: 30` (bench.yml) for its setup, the downloads, the
re-judges and the status. A job that hits its timeout is cancelled mid-step and sets no status,
so the required check would stay "Expected". The re-judges therefore share one deadline
(`REJUDGE_BUDGET_S` from the first, and never later than `POST_RESERVE_S` before the job's API
deadline, `PHASEBENCH_DEADLINE`), each at most `SHARD_TIMEOUT_S`; a shard that runs past its
time, or that the deadline leaves no time for, raises `RejudgeError` with the reason, which the
verdict turns into `error` for that shard while the post step goes on to set the status.

Isolation: `reports.ab` runs as `python -I judge_module.py JUDGE reports.ab ...` (no PYTHON*
variables, no user site, no current directory on sys.path: only the judge checkout and the
hash-pinned venv's packages) with an environment of PATH, HOME, TMPDIR and the locale only: no
token of any kind reaches it, even where the caller holds one.

Deliberately not here: reading the verdicts (verdict.py), the statistics (reports.ab).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# Ten minutes of the gate's 30: setup and downloads take a few, and the status calls (retried
# up to 3 times each) need the rest. A re-judge takes seconds; 80 shards fit comfortably.
REJUDGE_BUDGET_S = 600.0
SHARD_TIMEOUT_S = 300.0
# What the post step keeps of the job's API deadline (label, statuses, a rate limit's wait).
POST_RESERVE_S = 240.0
_KEPT_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "SYSTEMROOT")


def isolated_env(env: Mapping[str, str]) -> dict[str, str]:
    """The re-judge's environment: no token, no PYTHON* or PIP_* variable, nothing else."""
    return {key: env[key] for key in _KEPT_ENV if key in env}


def budget_before(api_deadline: str, budget_s: float, now: float) -> float:
    """The re-judges' budget: `budget_s`, cut to end `POST_RESERVE_S` before the job's API
    deadline (`PHASEBENCH_DEADLINE`, epoch seconds; empty: none)."""
    if not api_deadline.strip().isdigit():
        return budget_s
    return min(budget_s, float(api_deadline) - POST_RESERVE_S - now)


Runner = Callable[..., "subprocess.CompletedProcess[str]"]
LAUNCHER = Path(__file__).resolve().with_name("judge_module.py")


class RejudgeError(Exception):
    """A shard could not be re-judged; the message says why (the shard is then `error`)."""


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else ""


def rejudge_with(
    judge_dir: Path,
    into: Path,
    *,
    budget_s: float = REJUDGE_BUDGET_S,
    shard_timeout_s: float = SHARD_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
    run: Runner | None = None,
) -> Callable[[Path], Path]:
    """A `rejudge(shard folder) -> folder with ab.json and summary.md` that runs the judge
    checkout's `python -m reports.ab --settings own` on the shard's raw `base.json` and
    `head.json` (data only) into `into/<shard>/`; `RejudgeError` when it cannot. `run`
    (default `subprocess.run`) and `clock` are for tests."""
    deadline = clock() + budget_s

    def run_one(folder: Path) -> Path:
        data, out = (folder / "data").resolve(), (into / folder.name).resolve()
        shutil.rmtree(out, ignore_errors=True)  # never read a verdict this call did not write
        out.mkdir(parents=True)
        sides = [data / "base.json", data / "head.json"]
        if any(path.is_symlink() or not path.is_file() for path in sides):
            raise RejudgeError("its raw base.json or head.json is missing: nothing to judge")
        left = deadline - clock()
        if left <= 0:
            raise RejudgeError(
                f"not re-judged: the {max(budget_s, 0):.0f} s the gate gives all re-judges were "
                "spent, so that the status is still set within the job's timeout; re-run the "
                "gate job"
            )
        timeout = min(shard_timeout_s, left)
        context = data / "context.json"
        if context.is_file() and not context.is_symlink():
            shutil.copyfile(context, out / "context.json")  # shown in the report, never obeyed
        command = [sys.executable, "-I", str(LAUNCHER), str(judge_dir), "reports.ab"]
        command += ["--settings", "own", "--base", str(sides[0]), "--head", str(sides[1])]
        command += ["--out", str(out)]
        log = out / "rejudge.log"
        try:
            proc = (run or subprocess.run)(
                command,
                cwd=judge_dir,
                env=isolated_env(os.environ),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:  # run() has killed it
            log.write_text(_text(exc.stdout) + _text(exc.stderr), encoding="utf-8")
            raise RejudgeError(f"re-judging it took over {timeout:.0f} s and was stopped") from None
        except OSError as exc:
            raise RejudgeError(f"reports.ab could not start in {judge_dir}: {exc}") from None
        log.write_text(_text(proc.stdout) + _text(proc.stderr), encoding="utf-8")
        return out

    return run_one


def settings_notes(ab_json: Path) -> list[str]:
    """The recorded settings the judge did not use (its `ab.json` `settings_notes`), if any."""
    try:
        raw = json.loads(ab_json.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return []
    notes = raw.get("settings_notes") if isinstance(raw, dict) else None
    return [str(n)[:200] for n in notes[:10]] if isinstance(notes, list) else []
