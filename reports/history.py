"""Load pytest-benchmark JSON history into runs, group them by machine, pick current and baseline.

What it does:
- reads every `*.json` under the given paths (recursively: pytest-benchmark stores
  `.benchmarks/<machine-folder>/0001_<commit>_<date>.json`);
- turns each readable file into a `RunFile` of `BenchmarkResult`s, checking the schema versions
  phasebench writes (`machine_info.phasebench.schema`, `extra_info.schema`); files from plain
  pytest-benchmark (no `phasebench` key) are accepted as foreign;
- names every file it cannot use (not JSON, truncated, wrong shape, unknown schema) as a
  `SkippedFile` with the reason, and never raises for one;
- groups files by machine (phasebench's `fingerprint_id`, else a hash of pytest-benchmark's own
  `machine_info` fields) and merges shards: files of one machine and commit whose benchmarks do
  not overlap form one `Run`;
- `select_comparisons` chooses, per machine, the current run and its baseline runs.

What it deliberately does not do: statistics (see `analysis`), formatting (templates), or any
import of torch. The raw JSON stays in this module; everything it returns is frozen.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from reports.errors import ReportError

#: The schema versions of phasebench's additions that this package reads.
SUPPORTED_MACHINE_SCHEMAS = frozenset({1})
SUPPORTED_EXTRA_SCHEMAS = frozenset({1})

# machine_info fields pytest-benchmark always writes; they identify a machine for foreign files.
_FOREIGN_MACHINE_KEYS = ("node", "system", "release", "machine", "python_implementation")

Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class SkippedFile:
    """A history file (or one benchmark in it) that was not used, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class BenchmarkResult:
    """One benchmark of one file: its identity, raw rounds and phasebench's `extra_info`."""

    fullname: str
    name: str
    group: str
    params: Mapping[str, Scalar]
    rounds_s: tuple[float, ...]
    extra: Mapping[str, Any]

    @cached_property
    def median_s(self) -> float:
        """Median of the rounds (computed once; trends read it for every run)."""
        return statistics.median(self.rounds_s)

    @property
    def cell_id(self) -> str:
        """The matrix cell id (phasebench files), else pytest's parametrization id."""
        cell = self.extra.get("cell_id")
        if isinstance(cell, str) and cell:
            return cell
        start = self.name.find("[")
        return self.name[start + 1 : -1] if start >= 0 and self.name.endswith("]") else self.name

    @classmethod
    def from_json(cls, raw: Any) -> BenchmarkResult:
        """Build from one entry of a file's `benchmarks` list; ValueError names the bad field."""
        if not isinstance(raw, dict):
            raise ValueError("a `benchmarks` entry is not an object")
        fullname = raw.get("fullname")
        name = raw.get("name", fullname)
        if not isinstance(fullname, str) or not isinstance(name, str):
            raise ValueError("a benchmark has no string `fullname`")
        stats = raw.get("stats")
        if not isinstance(stats, dict):
            raise ValueError(f"benchmark {fullname} has no `stats` object")
        rounds = _rounds(stats, fullname)
        params_raw = raw.get("params") or {}
        params: dict[str, Scalar] = {}
        if isinstance(params_raw, dict):
            for key, value in params_raw.items():
                ok = value is None or isinstance(value, str | int | float | bool)
                params[str(key)] = value if ok else str(value)
        extra = raw.get("extra_info") or {}
        if not isinstance(extra, dict):
            raise ValueError(f"benchmark {fullname} has a non-object `extra_info`")
        group = raw.get("group")
        return cls(
            fullname=fullname,
            name=name,
            group=group if isinstance(group, str) else "",
            params=params,
            rounds_s=rounds,
            extra=extra,
        )


def _rounds(stats: Mapping[str, Any], fullname: str) -> tuple[float, ...]:
    """Per-round seconds: `stats.data` when saved, else the median as a single observation."""
    data = stats.get("data")
    if isinstance(data, list) and data:
        try:
            values = tuple(map(float, data))
        except (TypeError, ValueError):
            raise ValueError(f"benchmark {fullname} has non-numeric `stats.data`") from None
    else:
        median = stats.get("median")
        if not isinstance(median, int | float) or isinstance(median, bool):
            raise ValueError(f"benchmark {fullname} has neither `stats.data` nor `stats.median`")
        values = (float(median),)
    if min(values) <= 0 or not math.isfinite(sum(values)):
        raise ValueError(f"benchmark {fullname} has a non-positive or non-finite round time")
    return values


@dataclass(frozen=True)
class RunFile:
    """One readable history file."""

    path: str
    machine_id: str
    machine_label: str
    commit_id: str
    branch: str
    dirty: bool
    datetime: str
    env: Mapping[str, str]
    pytest_benchmark_version: str
    benchmarks: tuple[BenchmarkResult, ...]
    mtime_s: float

    @classmethod
    def from_json(cls, path: Path, raw: Any, mtime_s: float = 0.0) -> RunFile:
        """Build from a parsed file; ValueError (shape) or `_SchemaError` (version) on bad input."""
        if not isinstance(raw, dict) or not isinstance(raw.get("benchmarks"), list):
            raise ValueError("not a pytest-benchmark file (no top-level `benchmarks` list)")
        machine = raw.get("machine_info")
        if not isinstance(machine, dict):
            raise ValueError("no `machine_info` object")
        commit = raw.get("commit_info") if isinstance(raw.get("commit_info"), dict) else {}
        assert isinstance(commit, dict)  # for mypy; checked just above
        machine_id, label, env = _machine_identity(machine)
        stamp = raw.get("datetime")
        benchmarks = tuple(BenchmarkResult.from_json(b) for b in raw["benchmarks"])
        return cls(
            path=str(path),
            machine_id=machine_id,
            machine_label=label,
            commit_id=str(commit.get("id") or "unknown"),
            branch=str(commit.get("branch") or "unknown"),
            dirty=bool(commit.get("dirty")),
            datetime=stamp if isinstance(stamp, str) else "",
            env=env,
            pytest_benchmark_version=str(raw.get("version") or "unknown"),
            benchmarks=benchmarks,
            mtime_s=mtime_s,
        )


class _SchemaError(ValueError):
    """A phasebench schema version this package does not read."""


def _machine_identity(machine: Mapping[str, Any]) -> tuple[str, str, dict[str, str]]:
    """(machine id, human label, environment fields) from `machine_info`."""
    env: dict[str, str] = {}
    for key in ("system", "release", "machine", "python_version", "node"):
        if isinstance(machine.get(key), str):
            env[key] = machine[key]
    cpu = machine.get("cpu")
    if isinstance(cpu, dict) and isinstance(cpu.get("brand_raw"), str):
        env["cpu"] = cpu["brand_raw"]
    pb = machine.get("phasebench")
    if pb is None:
        digest = hashlib.sha256(
            json.dumps(
                [str(machine.get(k)) for k in _FOREIGN_MACHINE_KEYS] + [env.get("cpu")]
            ).encode()
        ).hexdigest()[:8]
        label = " / ".join(v for v in (env.get("node"), env.get("cpu")) if v) or "unknown"
        return f"mi-{digest}", label, env
    if not isinstance(pb, dict):
        raise ValueError("`machine_info.phasebench` is not an object")
    schema = pb.get("schema")
    if schema not in SUPPORTED_MACHINE_SCHEMAS:
        raise _SchemaError(
            f"machine_info.phasebench.schema is {schema!r}; this reports package reads "
            f"{sorted(SUPPORTED_MACHINE_SCHEMAS)}: render it with the phasebench that wrote it"
        )
    fingerprint = pb.get("fingerprint")
    if isinstance(fingerprint, dict):
        env.update({str(k): str(v) for k, v in fingerprint.items()})
    fid = pb.get("fingerprint_id")
    if not isinstance(fid, str) or not fid:
        raise ValueError("machine_info.phasebench has no `fingerprint_id`")
    parts = [env.get(k) for k in ("accelerator", "cpu", "os")]
    label = " / ".join(p for p in parts if p and p not in {"none", "n/a"}) or fid
    return fid, label, env


@dataclass(frozen=True)
class Run:
    """One run of the suite on one machine: one file, or the shards of one commit merged."""

    machine_id: str
    machine_label: str
    commit_id: str
    branch: str
    dirty: bool
    datetime: str
    env: Mapping[str, str]
    paths: tuple[str, ...]
    benchmarks: Mapping[str, BenchmarkResult]
    mtime_s: float

    @property
    def short_commit(self) -> str:
        """The first 10 characters of the commit id."""
        return self.commit_id[:10]

    @classmethod
    def from_files(cls, files: Sequence[RunFile]) -> Run:
        """Merge the files of one machine and commit (shards); the last file's metadata wins."""
        last = files[-1]
        merged: dict[str, BenchmarkResult] = {}
        for f in files:
            merged.update({b.fullname: b for b in f.benchmarks})
        return cls(
            machine_id=last.machine_id,
            machine_label=last.machine_label,
            commit_id=last.commit_id,
            branch=last.branch,
            dirty=any(f.dirty for f in files),
            datetime=last.datetime,
            env=last.env,
            paths=tuple(f.path for f in files),
            benchmarks=merged,
            mtime_s=max(f.mtime_s for f in files),
        )


@dataclass(frozen=True)
class History:
    """Every readable run grouped by machine (oldest first), and every file that was skipped."""

    machines: Mapping[str, tuple[Run, ...]]
    skipped: tuple[SkippedFile, ...]
    skipped_newest_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def run_count(self) -> int:
        """Number of runs over all machines."""
        return sum(len(runs) for runs in self.machines.values())


def iter_json_files(paths: Iterable[Path]) -> list[Path]:
    """Every `*.json` file under `paths` (files as given, directories recursively), sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(p for p in path.rglob("*.json") if p.is_file())
        elif path.exists():
            found.append(path)
        else:
            raise ReportError(f"history path {path} does not exist: pass a .benchmarks directory")
    return sorted(set(found))


def read_run_file(path: Path) -> RunFile | SkippedFile:
    """Parse one file; a file that cannot be used comes back as a `SkippedFile` with the reason."""
    try:
        text = path.read_text(encoding="utf-8")
        mtime = path.stat().st_mtime
    except (OSError, UnicodeDecodeError) as exc:
        return SkippedFile(str(path), f"unreadable: {exc.__class__.__name__}: {exc}")
    if not text.strip():
        return SkippedFile(str(path), "empty file")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        return SkippedFile(str(path), f"not valid JSON (truncated or corrupt): {exc}")
    try:
        run = RunFile.from_json(path, raw, mtime)
    except _SchemaError as exc:
        return SkippedFile(str(path), f"unknown schema: {exc}")
    except (ValueError, TypeError) as exc:
        return SkippedFile(str(path), f"wrong shape: {exc}")
    return run


def _drop_unknown_extra_schemas(run: RunFile) -> tuple[RunFile, list[SkippedFile]]:
    """Remove benchmarks whose `extra_info.schema` is unknown; name each one.

    A benchmark without a `schema` key (plain pytest-benchmark, or a test that records no
    extra_info) is kept: only a version this package does not know is refused.
    """
    kept: list[BenchmarkResult] = []
    skipped: list[SkippedFile] = []
    for bench in run.benchmarks:
        schema = bench.extra.get("schema")
        if "schema" not in bench.extra or schema in SUPPORTED_EXTRA_SCHEMAS:
            kept.append(bench)
        else:
            skipped.append(
                SkippedFile(
                    run.path,
                    f"unknown schema: benchmark {bench.fullname} has extra_info.schema "
                    f"{schema!r}; this reports package reads {sorted(SUPPORTED_EXTRA_SCHEMAS)}",
                )
            )
    if not skipped:
        return run, []
    return _replace_benchmarks(run, tuple(kept)), skipped


def _replace_benchmarks(run: RunFile, benchmarks: tuple[BenchmarkResult, ...]) -> RunFile:
    return RunFile(
        path=run.path,
        machine_id=run.machine_id,
        machine_label=run.machine_label,
        commit_id=run.commit_id,
        branch=run.branch,
        dirty=run.dirty,
        datetime=run.datetime,
        env=run.env,
        pytest_benchmark_version=run.pytest_benchmark_version,
        benchmarks=benchmarks,
        mtime_s=run.mtime_s,
    )


def load_files(paths: Sequence[Path]) -> tuple[list[RunFile], list[SkippedFile]]:
    """Read every file in `paths`; return the usable ones and the named skips."""
    files: list[RunFile] = []
    skipped: list[SkippedFile] = []
    for path in paths:
        got = read_run_file(path)
        if isinstance(got, SkippedFile):
            skipped.append(got)
            continue
        run, dropped = _drop_unknown_extra_schemas(got)
        skipped.extend(dropped)
        files.append(run)
    return files, skipped


def group_runs(files: Sequence[RunFile]) -> dict[str, tuple[Run, ...]]:
    """Group files by machine, oldest first, merging shards of one commit into one `Run`.

    A file joins the run before it when both have the same machine and commit and no benchmark
    in common (the shards of one CI job); a file that repeats a benchmark starts a new run
    (a re-run of the same commit is a separate sample of run-to-run noise).
    """
    by_machine: dict[str, list[RunFile]] = {}
    for f in sorted(files, key=lambda f: (f.datetime, f.path)):
        by_machine.setdefault(f.machine_id, []).append(f)
    grouped: dict[str, tuple[Run, ...]] = {}
    for machine, machine_files in by_machine.items():
        runs: list[list[RunFile]] = []
        for f in machine_files:
            current = runs[-1] if runs else None
            if current is not None and current[-1].commit_id == f.commit_id:
                seen = {b.fullname for g in current for b in g.benchmarks}
                if not seen.intersection(b.fullname for b in f.benchmarks):
                    current.append(f)
                    continue
            runs.append([f])
        grouped[machine] = tuple(Run.from_files(r) for r in runs)
    return grouped


def load_history(paths: Sequence[Path]) -> History:
    """Read and group every history file under `paths` (see the module docstring)."""
    # Parsing builds hundreds of thousands of containers and none of them is garbage; the
    # cyclic collector would rescan them all again and again (a quarter of the load time of a
    # 1,000-run history). Reference counting still frees everything as usual.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        files, skipped = load_files(iter_json_files(paths))
    finally:
        if was_enabled:
            gc.enable()
    files, injected = _drop_calibration_runs(files)
    return History(machines=group_runs(files), skipped=(*skipped, *injected))


def _drop_calibration_runs(files: Sequence[RunFile]) -> tuple[list[RunFile], list[SkippedFile]]:
    """Keep runs with an injected slowdown (`nox -s calibrate`) out of history folders.

    Such a run is slowed on purpose; mixed into real history it would pass for a regression
    (or, as a baseline, hide one). Calibration itself names its files with `--current` and
    `--baseline`, which do not come through here.
    """
    kept: list[RunFile] = []
    skipped: list[SkippedFile] = []
    for run in files:
        slowdowns = {b.extra.get("calibration_slowdown") for b in run.benchmarks}
        injected = sorted(v for v in slowdowns if isinstance(v, int | float) and v > 0)
        if injected:
            skipped.append(
                SkippedFile(
                    run.path,
                    f"calibration run (extra_info.calibration_slowdown={injected[-1]}): an "
                    "injected slowdown is never history; gate it with --current/--baseline",
                )
            )
        else:
            kept.append(run)
    return kept, skipped


@dataclass(frozen=True)
class Comparison:
    """What one machine's verdicts compare: the current run against baseline runs."""

    machine_id: str
    machine_label: str
    current: Run
    baseline: tuple[Run, ...]
    baseline_rule: str
    history: tuple[Run, ...]
    current_repeats: tuple[Run, ...] = ()


@dataclass(frozen=True)
class Selection:
    """The comparisons to judge, plus machines left out and why."""

    comparisons: tuple[Comparison, ...]
    stale: tuple[tuple[str, str], ...]


def select_comparisons(
    history: History,
    base_branch: str = "main",
    current_override: Run | None = None,
    baseline_override: Sequence[Run] | None = None,
) -> Selection:
    """Choose, per machine, the current run and its baseline (DESIGN §6).

    - current: the machine's newest run. Only machines that ran the newest commit in the whole
      history are judged; others are `stale` (their newest run is older work, so gating on it
      would fail every later build forever).
    - baseline: the machine's earlier runs on `base_branch`; when there are none, all its earlier
      runs. Runs of the current commit itself are never baseline; clean re-runs of it are
      `current_repeats`, pooled with the current run.
    - `current_override` (from `--current`) judges that run alone, against `baseline_override`
      (from `--baseline`) when given, else against its machine's history as above.
    """
    if current_override is not None:
        # Its machine's runs older than it (all of them when it has no timestamp), itself excluded.
        cur = current_override
        runs = tuple(
            r
            for r in history.machines.get(cur.machine_id, ())
            if (r.datetime < cur.datetime or not cur.datetime)
            and set(r.paths).isdisjoint(cur.paths)
        )
        return Selection(
            comparisons=(_comparison(current_override, runs, base_branch, baseline_override),),
            stale=(),
        )
    newest = [runs[-1] for runs in history.machines.values() if runs]
    if not newest:
        return Selection((), ())
    head = max(newest, key=lambda r: (r.datetime, r.mtime_s))
    comparisons: list[Comparison] = []
    stale: list[tuple[str, str]] = []
    for machine, runs in sorted(history.machines.items()):
        current = runs[-1]
        if current.commit_id != head.commit_id:
            stale.append(
                (
                    machine,
                    f"{current.machine_label}: newest run is commit {current.short_commit} "
                    f"({current.datetime}), not the newest commit {head.short_commit}; not judged",
                )
            )
            continue
        comparisons.append(_comparison(current, runs[:-1], base_branch, baseline_override))
    return Selection(tuple(comparisons), tuple(stale))


def _comparison(
    current: Run,
    earlier: Sequence[Run],
    base_branch: str,
    baseline_override: Sequence[Run] | None,
) -> Comparison:
    history = tuple(earlier)
    if baseline_override is not None:
        baseline = tuple(baseline_override)
        rule = f"{len(baseline)} run(s) given with --baseline"
    else:
        candidates = [r for r in earlier if r.commit_id != current.commit_id]
        on_branch = [r for r in candidates if r.branch == base_branch]
        if on_branch:
            baseline = tuple(on_branch)
            rule = f"{len(baseline)} earlier run(s) on branch {base_branch}"
        else:
            baseline = tuple(candidates)
            rule = (
                f"no earlier run on branch {base_branch}; all {len(baseline)} earlier run(s)"
                if baseline
                else "no earlier run: every benchmark is new"
            )
    # Re-runs of the same clean commit measure the same code: pooled with the current run, they
    # average out its run-to-run noise. A dirty tree may hold other code, so it is not pooled.
    in_baseline = {r.paths for r in baseline}
    repeats = tuple(
        r
        for r in earlier
        if r.commit_id == current.commit_id
        and not r.dirty
        and not current.dirty
        and r.paths not in in_baseline
    )
    if repeats:
        rule += f"; {len(repeats)} earlier re-run(s) of this commit pooled with the current run"
    return Comparison(
        machine_id=current.machine_id,
        machine_label=current.machine_label,
        current=current,
        baseline=baseline,
        baseline_rule=rule,
        history=(*history, current),
        current_repeats=repeats,
    )


def run_from_paths(paths: Sequence[Path]) -> tuple[list[Run], list[SkippedFile]]:
    """Runs from explicitly named files (`--current`, `--baseline`), one run per machine+commit."""
    files, skipped = load_files(iter_json_files(paths))
    runs = [r for group in group_runs(files).values() for r in group]
    return sorted(runs, key=lambda r: r.datetime), skipped


def files_that_could_be_current(history: History, comparisons: Sequence[Comparison]) -> list[str]:
    """Skipped files that may have been the run to judge (the gate then exits 2).

    In a folder that holds a current run's file, pytest-benchmark numbers its files
    (`0001_...`, `0002_...`), so a skipped file there is suspect when its name sorts after the
    current file's. Elsewhere the age is only known from the modification time (copies and
    artifact downloads reset it, so this errs on the side of suspicion): a skipped file at
    least as new as the oldest current file is suspect. With no current run at all, every
    unreadable file is suspect.
    """
    if not comparisons:
        return [s.path for s in history.skipped]
    current_paths = [Path(p) for c in comparisons for p in c.current.paths]
    used = {str(p) for p in current_paths}
    oldest_mtime = min(c.current.mtime_s for c in comparisons)
    suspects: list[str] = []
    for skipped in history.skipped:
        if skipped.path in used:
            continue  # a benchmark-level skip inside a file that was used
        path = Path(skipped.path)
        same_folder = [p for p in current_paths if p.parent == path.parent]
        if same_folder:
            suspect = any(path.name > p.name for p in same_folder)
        else:
            try:
                suspect = path.stat().st_mtime >= oldest_mtime
            except OSError:
                suspect = True
        if suspect:
            suspects.append(skipped.path)
    return suspects
