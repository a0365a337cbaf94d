"""The range a bisection searches: commits of this repository, or releases of a package.

- **Commits**: the first-parent commits after the good one up to the bad, like `git bisect
  --first-parent`: a merged branch is one step (its merge commit), so every commit searched is
  one that was main at some point. Each is an A/B side by its tree.
- **Releases** (`--package NAME`): the final releases of NAME on the package index from the
  good version to the bad one (`pip index versions`, so a configured mirror is used), each an
  A/B side of one tree (HEAD) whose environment pins that release (`PHASEBENCH_PIP`).

Everything a user can get wrong is an `ABError` naming the fix (exit 2).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from benchmarks.ab.sides import ROOT, ABError, git, resolve_ref


@dataclass(frozen=True)
class Commit:
    """One point of the range: the commit whose tree is the side, its subject line, and for a
    release the pin its environment installs (`name==version`, else "")."""

    sha: str
    subject: str
    pin: str = ""

    @property
    def short(self) -> str:
        """How the point is named in lines: the pin, else the SHA's first 12 characters."""
        return self.pin or self.sha[:12]

    @property
    def ref(self) -> str:
        """The point as `bisect.json` names it: the pin, else the full SHA."""
        return self.pin or self.sha


def _git(args: list[str], repo: Path) -> str:
    done = git(args, repo)
    if done.returncode != 0:
        raise ABError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def first_parent_range(good: str, bad: str, repo: Path = ROOT) -> list[Commit]:
    """[good, c1, ..., bad]: good and every first-parent commit after it up to bad."""
    good_sha, bad_sha = resolve_ref(good, repo), resolve_ref(bad, repo)
    if good_sha == bad_sha:
        raise ABError(f"--good {good} and --bad {bad} are the same commit: nothing to search")
    line = _git(["rev-list", "--first-parent", bad_sha], repo).split()
    if good_sha not in line:
        shallow = _git(["rev-parse", "--is-shallow-repository"], repo).strip() == "true"
        hint = " (this clone is shallow: `git fetch --unshallow` first)" if shallow else ""
        raise ABError(
            f"--good {good} ({good_sha[:12]}) is not on the first-parent line of --bad {bad}"
            f"{hint}: pass a commit that main (or bad's branch) went through, e.g. a merge base"
        )
    shas = [good_sha, *reversed(line[: line.index(good_sha)])]
    return [Commit(sha, subject_of(sha, repo)) for sha in shas]


def subject_of(sha: str, repo: Path = ROOT) -> str:
    """The commit's subject line."""
    return _git(["log", "-1", "--format=%s", sha], repo).strip()


def change_of(sha: str, repo: Path = ROOT) -> tuple[str, str]:
    """(the whole commit message, `git show --stat` of it against its first parent)."""
    message = _git(["log", "-1", "--format=%B", sha], repo).strip()
    stat = _git(["show", "--first-parent", "--stat", "--format=", sha], repo).strip()
    return message, stat


def _versions(package: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    found = re.search(r"Available versions:\s*(.+)", done.stdout)
    if done.returncode != 0 or not found:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ABError(f"pip index versions {package} failed ({last}): check the name and the index")
    return [v.strip() for v in found.group(1).split(",") if v.strip()]


def _parsed(listed: list[str]) -> list[Version]:
    out = []
    for text in listed:
        try:
            out.append(Version(text))
        except InvalidVersion:
            continue  # an index may list legacy versions PEP 440 cannot order: not searched
    return out


def release_range(package: str, good: str, bad: str, tree: str, repo: Path = ROOT) -> list[Commit]:
    """[good, ..., bad]: the final releases of `package` from good to bad, each a side of the
    commit `tree` pinning that release."""
    try:
        low, high = Version(good), Version(bad)
    except InvalidVersion as error:
        raise ABError(f"--good/--bad with --package take versions, e.g. 5.20.0: {error}") from error
    if low >= high:
        raise ABError(f"--good {good} must be an older release than --bad {bad}")
    listed = _versions(package)
    for name, v in (("--good", good), ("--bad", bad)):
        if v not in listed:
            raise ABError(
                f"{name} {v}: {package} has no such release on the index "
                f"({listed[0]} is the newest)"
            )
    releases = sorted(v for v in _parsed(listed) if not v.is_prerelease and low <= v <= high)
    if len(releases) < 2:
        raise ABError(f"no releases of {package} between {good} and {bad}")
    sha = resolve_ref(tree, repo)
    subject = subject_of(sha, repo)
    return [Commit(sha, f"{package} {v} ({subject})", f"{package}=={v}") for v in releases]
