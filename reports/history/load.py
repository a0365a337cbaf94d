"""Group history files into runs per machine: shards and retries merged, partial runs marked.

What it does:
- reads every `*.json` under the given paths (`reports.history.runfile`), keeping the skips named;
- groups files by machine (`RunFile.machine_id`: the hardware id, so one machine's history
  continues across a torch or driver upgrade) and merges the files of one CI job into one `Run`:
  files of one machine, commit, dirty state and software stack join the open run when their
  cells (`planned`, else the benchmarks they hold) are disjoint from it (another shard), or a
  strict subset of it while it already has two or more files (a retried shard: the retry
  replaces only its own cells). Any other file starts a new run: a second full run of a commit
  is a run of its own (compared with the first, or pooled as a re-run on request; see
  `reports.history.selection`);
- keeps runs with an injected calibration slowdown out of history.

What it deliberately does not do: parsing (`runfile`), choosing baselines (`selection`),
statistics (`analysis`), formatting (templates), or any import of torch.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reports.history.runfile import (
    SUPPORTED_EXTRA_SCHEMAS,
    SUPPORTED_MACHINE_SCHEMAS,
    BenchmarkResult,
    RunFile,
    SkippedFile,
    iter_json_files,
    load_files,
    read_run_file,
)

__all__ = [
    "SUPPORTED_EXTRA_SCHEMAS",
    "SUPPORTED_MACHINE_SCHEMAS",
    "BenchmarkResult",
    "History",
    "Run",
    "RunFile",
    "SkippedFile",
    "group_runs",
    "iter_json_files",
    "load_files",
    "load_history",
    "read_run_file",
    "run_from_paths",
]


@dataclass(frozen=True)
class Run:
    """One run of the suite on one machine: one file, or the shards (and retries) of one job.

    planned: the union of the files' planned cells (None when a file did not record them).
    partial: a file that still contributes cells was killed before it finished.
    whole: False when the files are shards "I/N" and some shard 1..N is absent: `planned`
    then does not hold the whole matrix, so a cell outside it may just be in a lost shard.
    probes: the host-probe records of every file of the run (the machine's own measurement,
    `reports.analysis.probes`), never judged as benchmarks.
    """

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
    stack: Mapping[str, str] = field(default_factory=dict)
    planned: frozenset[str] | None = None
    partial: bool = False
    commit_time: str = ""
    whole: bool = True
    probes: tuple[BenchmarkResult, ...] = ()

    @property
    def short_commit(self) -> str:
        """The first 10 characters of the commit id."""
        return self.commit_id[:10]

    @property
    def cells(self) -> frozenset[str]:
        """The planned cells when recorded, else the benchmarks the run holds."""
        return self.planned if self.planned is not None else frozenset(self.benchmarks)

    @classmethod
    def from_files(cls, files: Sequence[RunFile]) -> Run:
        """Merge the files of one job in time order: each file replaces the cells it covers.

        A file covers its planned cells (else the benchmarks it holds), so a retried shard
        replaces its own cells, including any its earlier attempt finished but it did not.
        The last file's metadata wins; files left with no cell are not part of the run.
        """
        merged: dict[str, BenchmarkResult] = {}
        owner: dict[str, int] = {}
        for i, f in enumerate(files):
            for name in f.cells:
                merged.pop(name, None)
                owner[name] = i
            for b in f.benchmarks:
                merged[b.fullname] = b
                owner[b.fullname] = i
        used = [f for i, f in enumerate(files) if i in set(owner.values())]
        last = files[-1]
        planned: frozenset[str] | None = None
        if all(f.planned is not None for f in used):
            planned = frozenset().union(*(f.planned or frozenset() for f in used))
        return cls(
            machine_id=last.machine_id,
            machine_label=last.machine_label,
            commit_id=last.commit_id,
            branch=last.branch,
            dirty=any(f.dirty for f in used),
            datetime=last.datetime,
            env=last.env,
            paths=tuple(f.path for f in used),
            benchmarks=merged,
            mtime_s=max(f.mtime_s for f in used),
            stack=last.stack,
            planned=planned,
            partial=any(f.partial for f in used),
            commit_time=last.commit_time,
            whole=_whole(used),
            # every file's probes: each timed the machine while its own cells ran
            probes=tuple(p for f in files for p in f.probes),
        )


def _whole(files: Sequence[RunFile]) -> bool:
    shards = [f.shard for f in files if f.shard is not None]
    if not shards:
        return True
    counts = {n for _, n in shards}
    return len(counts) == 1 and {i for i, _ in shards} == set(range(1, counts.pop() + 1))


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


def _job_key(f: RunFile) -> tuple[object, ...]:
    return f.commit_id, f.dirty, tuple(sorted(f.stack.items()))


def joins(open_run: Sequence[RunFile], f: RunFile) -> bool:
    """Whether file `f` belongs to the open run (module docstring: another shard or a retry)."""
    if not open_run or _job_key(open_run[-1]) != _job_key(f):
        return False
    covered = frozenset().union(*(g.cells for g in open_run))
    if covered.isdisjoint(f.cells):
        return True
    return len(open_run) >= 2 and f.cells < covered


def group_runs(files: Sequence[RunFile]) -> dict[str, tuple[Run, ...]]:
    """Group files by machine, oldest first, merging the files of one job into one `Run`."""
    by_machine: dict[str, list[RunFile]] = {}
    for f in sorted(files, key=lambda f: (f.datetime, f.path)):
        by_machine.setdefault(f.machine_id, []).append(f)
    grouped: dict[str, tuple[Run, ...]] = {}
    for machine, machine_files in by_machine.items():
        runs: list[list[RunFile]] = []
        for f in machine_files:
            if runs and joins(runs[-1], f):
                runs[-1].append(f)
            else:
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


def run_from_paths(paths: Sequence[Path]) -> tuple[list[Run], list[SkippedFile]]:
    """Runs from explicitly named files (`--current`, `--baseline`), grouped as in history."""
    files, skipped = load_files(iter_json_files(paths))
    runs = [r for group in group_runs(files).values() for r in group]
    return sorted(runs, key=lambda r: r.datetime), skipped
