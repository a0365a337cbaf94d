"""What an A/B side is, and how it is made: a tree, a Python environment, model files, env vars.

* A **tree** is a git ref checked out in a temporary worktree (`git worktree add --detach`,
  removed afterwards) or the working tree itself.
* Its **environment** is built from the tree's dependency spec: the `bench` dependency group of
  its `pyproject.toml` (includes resolved) and `PHASEBENCH_TORCH` (from the side's `--*-env`,
  else the caller's environment). Environments are cached under `.phasebench/ab/envs/<hash>`
  (or `$PHASEBENCH_AB_ENVS`) by the hash of that spec, so identical specs share one; the spec
  the running interpreter was built from (the working tree's, in `nox -s ab`) is the running
  interpreter itself. A new environment reuses the running interpreter's packages (torch above
  all: hundreds of MB, and on a GPU or Mac box the build matched to the machine), as the
  noxfile's `--system-site-packages` does for a system torch: a `.pth` file puts the running
  interpreter's site-packages behind the environment's own, so pip installs only what the spec
  needs differently. A side that sets `PHASEBENCH_TORCH` gets that torch in its own environment.
* Its **model files** are the tree's `matrix/models/`, and its **variables** the `K=V` pairs.

It deliberately does not run benchmarks (`run`) or compare results (`reports/analysis/paired.py`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness.errors import PhasebenchError

ROOT = Path(__file__).resolve().parents[2]
ENV_CACHE_VAR = "PHASEBENCH_AB_ENVS"  # where side environments are cached (tests point it away)
TORCH_VAR = "PHASEBENCH_TORCH"
PIP_VAR = "PHASEBENCH_PIP"
BENCH_GROUP = "bench"
TURNSTILE = Path("benchmarks/ab/turnstile.py")
# Where each tree keeps the A/B plugin, newest first: an apparatus (the merge-base's tree) from
# before the package re-layout has it under benchmarks/harness/ab/.
TURNSTILE_MODULE = "benchmarks.ab.turnstile"
TURNSTILES = (
    (TURNSTILE, TURNSTILE_MODULE),
    (Path("benchmarks/harness/ab/turnstile.py"), "benchmarks.harness.ab.turnstile"),
)
_DONE = "phasebench-spec.json"  # written last: an environment without it is rebuilt


class ABError(PhasebenchError):
    """A/B input or setup is invalid: an unknown ref, a side that cannot be built, ...; `side`
    names the side it is about ("base"/"head"; None: the run as a whole)."""

    def __init__(self, message: str, side: str | None = None) -> None:
        super().__init__(message)
        self.side = side


def parse_assignments(items: Sequence[str], option: str) -> dict[str, str]:
    """`["K=V", ...]` from `--base-env`/`--head-env` -> {K: V}; ABError naming a bad item."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or any(c.isspace() for c in name):
            raise ABError(
                f"{option} {item!r} is not NAME=VALUE: write e.g. {option} OMP_NUM_THREADS=1"
            )
        out[name] = value
    return out


def git(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`git ARGS` in `cwd`, output captured, never raising on its exit code."""
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)


def resolve_ref(ref: str, repo: Path = ROOT) -> str:
    """The commit `ref` names in `repo`; ABError (one line) when git does not know it."""
    done = git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], repo)
    if done.returncode != 0 or not done.stdout.strip():
        raise ABError(
            f"--base/--head {ref!r} is not a commit of {repo}: pass a branch, tag or SHA that "
            "`git rev-parse` knows (fetch it first if it is remote)"
        )
    return done.stdout.strip()


@dataclass
class Worktrees:
    """Temporary git worktrees of this repository, removed by `close` (use it as a context)."""

    repo: Path = ROOT
    made: list[Path] = field(default_factory=list)

    def add(self, commit: str) -> Path:
        """Check `commit` out (detached) into a new temporary directory; return it."""
        where = Path(tempfile.mkdtemp(prefix=f"phasebench-ab-{commit[:10]}-"))
        done = git(["worktree", "add", "--detach", str(where), commit], self.repo)
        if done.returncode != 0:
            shutil.rmtree(where, ignore_errors=True)
            raise ABError(f"git worktree add {commit[:12]} failed: {done.stderr.strip()}")
        self.made.append(where)
        return where

    def close(self) -> None:
        """Remove every worktree this object made."""
        for where in self.made:
            git(["worktree", "remove", "--force", str(where)], self.repo)
            shutil.rmtree(where, ignore_errors=True)
        self.made.clear()
        git(["worktree", "prune"], self.repo)

    def __enter__(self) -> Worktrees:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib  # noqa: PLC0415 - Python >= 3.11
    except ImportError as missing:  # pragma: no cover - 3.10
        raise ABError(
            "A/B mode reads pyproject.toml with tomllib: run it on Python >= 3.11"
        ) from missing
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ABError(f"{path}: unreadable pyproject.toml ({error}); fix the file") from None
    return data


def dependency_group(pyproject: Path, name: str = BENCH_GROUP) -> list[str]:
    """The requirements of dependency group `name` in `pyproject`, includes resolved (PEP 735)."""
    groups = _load_toml(pyproject).get("dependency-groups")
    if not isinstance(groups, dict) or name not in groups:
        raise ABError(f"{pyproject}: no [dependency-groups] {name}; a side needs its bench group")

    def expand(group: str, seen: tuple[str, ...]) -> list[str]:
        if group in seen:
            raise ABError(f"{pyproject}: dependency group {group!r} includes itself")
        out: list[str] = []
        for item in groups.get(group, ()):
            if isinstance(item, dict) and "include-group" in item:
                out += expand(str(item["include-group"]), (*seen, group))
            elif isinstance(item, str):
                out.append(item)
        return out

    return expand(name, ())


@dataclass(frozen=True)
class EnvSpec:
    """What decides a side's Python environment: its requirements and its torch request."""

    requirements: tuple[str, ...]
    torch: str | None  # PHASEBENCH_TORCH, or None: reuse the running interpreter's torch
    # PHASEBENCH_PIP: requirement specs installed with the tree's (e.g. `transformers==5.22.0`):
    # a side that differs from the other by one package's release (`nox -s bisect --package`)
    pins: tuple[str, ...] = ()

    @classmethod
    def of(cls, tree: Path, env: Mapping[str, str]) -> EnvSpec:
        """The spec of `tree` with the side's variables `env` over the caller's environment."""
        torch = env.get(TORCH_VAR, os.environ.get(TORCH_VAR)) or None
        pins = tuple((env.get(PIP_VAR, os.environ.get(PIP_VAR)) or "").split())
        return cls(tuple(sorted(dependency_group(tree / "pyproject.toml"))), torch, pins)

    @property
    def digest(self) -> str:
        """12 hex digits of sha256 over the spec: the cache key (a spec without pins keeps
        the key it had before pins existed, so its cached environment is reused)."""
        data: dict[str, Any] = {"requirements": self.requirements, "torch": self.torch}
        if self.pins:
            data["pins"] = self.pins
        text = json.dumps(data, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def _python_in(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _site_packages(python: Path) -> str:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def env_cache() -> Path:
    """Where side environments live: `$PHASEBENCH_AB_ENVS`, else `.phasebench/ab/envs`."""
    return Path(os.environ.get(ENV_CACHE_VAR) or ROOT / ".phasebench" / "ab" / "envs")


def environment(spec: EnvSpec, running: EnvSpec, log: Path, cache: Path | None = None) -> Path:
    """The Python interpreter of `spec`: the running one when the specs agree, else a cached env.

    Building writes pip's output to `log`; a failure is an ABError naming the log.
    """
    if spec == running:
        return Path(sys.executable)
    env_dir = (cache or env_cache()) / spec.digest
    python = _python_in(env_dir)
    if (env_dir / _DONE).is_file() and python.exists():
        return python
    shutil.rmtree(env_dir, ignore_errors=True)
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as sink:
        # --without-pip: the running interpreter's pip installs into it (`pip --python`).
        base = getattr(sys, "_base_executable", sys.executable)
        steps = [[base, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)]]
        pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
        if spec.torch:
            steps.append([*pip, spec.torch])
        # one resolve for both: a pin must agree with the tree's own requirements
        steps.append([*pip, *spec.requirements, *spec.pins])
        for index, command in enumerate(steps):
            sink.write("$ " + " ".join(command) + "\n")
            sink.flush()
            code = subprocess.call(command, stdout=sink, stderr=subprocess.STDOUT)
            if code != 0:
                raise ABError(
                    f"the environment for {spec.torch or 'the running torch'} + "
                    f"{len(spec.requirements)} bench requirements"
                    f"{''.join(' + ' + p for p in spec.pins)} could not be built (exit "
                    f"{code}); read {log}"
                )
            if index == 0 and not spec.torch:
                # Behind the env's own site-packages: what pip installs there wins.
                pth = Path(_site_packages(python)) / "_phasebench_ab_inherit.pth"
                pth.write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    (env_dir / _DONE).write_text(json.dumps(spec.__dict__, default=list), encoding="utf-8")
    return python


@functools.lru_cache(maxsize=8)  # both sides usually share one interpreter: import torch once
@functools.cache  # both sides usually share one interpreter: import torch once, not twice
def probe_stack(python: Path) -> dict[str, str]:
    """torch, transformers and pytest-benchmark versions `python` imports; ABError if it cannot.

    Cached per interpreter (an error is not cached); callers copy the dict they keep.
    """
    code = (
        "import json, torch, transformers, pytest_benchmark;"
        "print(json.dumps({'torch': torch.__version__, 'transformers': transformers.__version__,"
        "'pytest_benchmark': pytest_benchmark.__version__}))"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ABError(f"{python} cannot import the suite's stack ({last}); rebuild the side")
    stack: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return stack


@dataclass(frozen=True)
class Side:
    """One side of an A/B run, ready to run."""

    name: str  # "base" or "head"
    label: str  # the ref, or "working tree"
    commit: str | None
    tree: Path
    python: Path
    env: Mapping[str, str]
    stack: Mapping[str, str]

    @property
    def models_dir(self) -> Path:
        """The tree's model files."""
        return self.tree / "matrix" / "models"


def turnstile_of(tree: Path) -> tuple[Path, str] | None:
    """`tree`'s A/B plugin as (file, module to load with `-p`); None before A/B mode."""
    return next(((path, module) for path, module in TURNSTILES if (tree / path).is_file()), None)


def has_turnstile(tree: Path) -> bool:
    """Whether `tree` has the A/B plugin (a tree from before A/B mode does not)."""
    return turnstile_of(tree) is not None


def turnstile_protocol(tree: Path) -> int:
    """The turn protocol `tree`'s plugin speaks: its `PROTOCOL` constant, 1 when it has none.

    1 (the first A/B release): "go" only, the processes pinned whole by the command. 2: also
    "stop" (the pair budget) and pinning of the timed rounds by the plugin itself. Read from
    the source, not imported: the apparatus may belong to another environment.
    """
    path = (turnstile_of(tree) or (TURNSTILE, ""))[0]
    found = re.search(r"^PROTOCOL = (\d+)", (tree / path).read_text(encoding="utf-8"), re.M)
    return int(found.group(1)) if found else 1
