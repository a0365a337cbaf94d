"""Choose, per machine, the current run and what it is compared against (DESIGN §6).

- current: the machine's newest run. Only machines that ran the newest commit in the whole
  history are judged; others are `stale` (gating on older work would fail every later build).
- baseline: the machine's earlier runs on the base branch (all its earlier runs when there are
  none), up to and including the merge-base's run when `merge_base` is given (a PR is not
  blamed for what main already has), and, when the stack changed within them, only those of the
  newest stack if at least `MIN_RUNS_SAME_STACK` remain. Earlier runs of the current commit are
  baseline too: a second `nox -s bench-cpu` on one commit is compared with the first.
- re-runs: a commit's runs accumulate evidence. By default earlier runs with the same commit,
  stack and cells as a clean current run are pooled with it (a red run re-run until green is
  judged on all its runs, not the last draw), as long as other runs remain to compare with;
  otherwise (a second `nox -s bench-cpu` on a fresh clone) the earlier runs are its baseline.
  A dirty tree is never pooled by default (uncommitted code may differ between the runs).
  `pool_reruns=True` (`--rerun`) pools dirty runs too; `False` (`--no-pool`) never pools. CI
  shards of one job are not re-runs: `reports.history.load` already unions them into one run.
- the stack change: every stack field whose value differs between the newest baseline run
  and the current run, named as "torch 2.13.0 → 2.14.1".

Deliberately not here: reading files (`runfile`, `history`), statistics, formatting.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from reports.errors import ReportError
from reports.history.load import History, Run

#: Keep only the newest stack's baseline runs when at least this many of them exist.
MIN_RUNS_SAME_STACK = 5


@dataclass(frozen=True)
class StackChange:
    """One software-stack field that differs between the baseline and the current run."""

    key: str
    baseline: str
    current: str

    def __str__(self) -> str:
        return f"{self.key} {self.baseline} → {self.current}"


def stack_changes(baseline: Mapping[str, str], current: Mapping[str, str]) -> list[StackChange]:
    """Every field whose value differs (absent = "(absent)"), sorted by field name."""
    keys = sorted(set(baseline) | set(current))
    return [
        StackChange(k, baseline.get(k, "(absent)"), current.get(k, "(absent)"))
        for k in keys
        if baseline.get(k) != current.get(k)
    ]


@dataclass(frozen=True)
class StackMark:
    """Where the stack changed in a machine's base-branch history: the first run of the new one."""

    commit_id: str
    datetime: str
    changes: tuple[StackChange, ...]

    @property
    def text(self) -> str:
        """The changes, comma-separated."""
        return ", ".join(str(c) for c in self.changes)


@dataclass(frozen=True)
class Comparison:
    """What one machine's verdicts compare: the current run against baseline runs.

    `stack_marks` are the stack changes between consecutive base-branch runs of the machine's
    history (and into the current run), oldest first.
    """

    machine_id: str
    machine_label: str
    current: Run
    baseline: tuple[Run, ...]
    baseline_rule: str
    history: tuple[Run, ...]
    current_repeats: tuple[Run, ...] = ()
    stack_change: tuple[StackChange, ...] = ()
    stack_marks: tuple[StackMark, ...] = ()

    @property
    def stack_change_text(self) -> str:
        """The changed stack fields, comma-separated ("" when none)."""
        return ", ".join(str(c) for c in self.stack_change)


@dataclass(frozen=True)
class Selection:
    """The comparisons to judge, plus machines left out and why."""

    comparisons: tuple[Comparison, ...]
    stale: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class SelectOptions:
    """How to choose baselines: base branch, merge-base (commit id prefix), re-run pooling.

    merge_base_time: the merge-base's commit time (ISO 8601) for when no run of it exists;
    base-branch runs of commits not newer than it are then the baseline.
    pool_reruns: None = the default rule (module docstring), True = pool dirty runs too,
    False = never pool.
    """

    base_branch: str = "main"
    merge_base: str | None = None
    merge_base_time: str | None = None
    pool_reruns: bool | None = None


def same_job(a: Run, b: Run) -> bool:
    """Same commit, dirty state, stack and cells: two runs of the same code on the same matrix."""
    return (
        a.commit_id == b.commit_id
        and a.dirty == b.dirty
        and dict(a.stack) == dict(b.stack)
        and a.cells == b.cells
    )


def select_comparisons(
    history: History,
    options: SelectOptions | None = None,
    current_override: Run | None = None,
    baseline_override: Sequence[Run] | None = None,
) -> Selection:
    """Choose the comparisons (module docstring); `current_override` is judged alone.

    `current_override` (from `--current`) is compared with `baseline_override` (from
    `--baseline`) when given, else with its machine's runs older than it.
    """
    opts = options or SelectOptions()
    if current_override is not None:
        cur = current_override
        runs = tuple(
            r
            for r in history.machines.get(cur.machine_id, ())
            if (r.datetime < cur.datetime or not cur.datetime)
            and set(r.paths).isdisjoint(cur.paths)
        )
        return Selection((_comparison(cur, runs, opts, baseline_override),), ())
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
        comparisons.append(_comparison(current, runs[:-1], opts, baseline_override))
    return Selection(tuple(comparisons), tuple(stale))


def _cut_at_merge_base(on_branch: list[Run], opts: SelectOptions) -> tuple[list[Run], str]:
    sha = (opts.merge_base or "").lower()
    hits = [i for i, r in enumerate(on_branch) if r.commit_id.lower().startswith(sha)]
    if hits:
        return on_branch[: hits[-1] + 1], f" up to merge-base {sha[:10]}"
    if opts.merge_base_time:
        kept = [r for r in on_branch if r.commit_time and r.commit_time <= opts.merge_base_time]
        return kept, f" up to merge-base {sha[:10]} ({opts.merge_base_time}, not benchmarked)"
    raise ReportError(
        f"--merge-base {opts.merge_base}: no {opts.base_branch} run of that commit in the history "
        "and its commit time is unknown: run in the git checkout, or pass a benchmarked commit"
    )


def _baseline(
    current: Run, earlier: Sequence[Run], opts: SelectOptions, repeats: Sequence[Run]
) -> tuple[tuple[Run, ...], str]:
    candidates = [r for r in earlier if all(r is not p for p in repeats)]
    on_branch = [r for r in candidates if r.branch == opts.base_branch]
    where = ""
    if opts.merge_base is not None:
        on_branch, where = _cut_at_merge_base(on_branch, opts)
        if not on_branch:
            return (), f"no {opts.base_branch} run{where}: every benchmark is new"
    if on_branch:
        chosen, rule = on_branch, f"{len(on_branch)} earlier run(s) on branch {opts.base_branch}"
    elif candidates:
        chosen = candidates
        rule = f"no earlier run on branch {opts.base_branch}; all {len(candidates)} earlier run(s)"
    else:
        return (), "no earlier run: every benchmark is new"
    newest_stack = dict(chosen[-1].stack)
    same = [r for r in chosen if dict(r.stack) == newest_stack]
    if len(same) < len(chosen) and len(same) >= MIN_RUNS_SAME_STACK:
        chosen = same
        rule += f", the {len(same)} with the newest stack"
    return tuple(chosen), rule + where


def _stack_marks(runs: Sequence[Run]) -> tuple[StackMark, ...]:
    marks = []
    for before, after in itertools.pairwise(runs):
        changes = stack_changes(before.stack, after.stack)
        if changes:
            marks.append(StackMark(after.commit_id, after.datetime, tuple(changes)))
    return tuple(marks)


def _comparison(
    current: Run,
    earlier: Sequence[Run],
    opts: SelectOptions,
    baseline_override: Sequence[Run] | None,
) -> Comparison:
    # the default pools only where the baseline is chosen here: runs given with --baseline
    # (calibration's leave-one-out) must not be pooled into the current run as well
    default_pool = baseline_override is None and not current.dirty
    pool = opts.pool_reruns is True or (opts.pool_reruns is None and default_pool)
    repeats = tuple(r for r in earlier if pool and same_job(r, current))
    if baseline_override is not None:
        baseline = tuple(baseline_override)
        rule = f"{len(baseline)} run(s) given with --baseline"
    else:
        baseline, rule = _baseline(current, earlier, opts, repeats)
        if repeats and not baseline and opts.pool_reruns is None:
            # nothing else to compare with: the commit's earlier runs are its baseline
            repeats = ()
            baseline, rule = _baseline(current, earlier, opts, repeats)
    if repeats:
        how = "--rerun" if opts.pool_reruns else "the default for a clean commit; --no-pool"
        rule += f"; {len(repeats)} earlier run(s) of this commit pooled with it ({how})"
    changes = stack_changes(baseline[-1].stack, current.stack) if baseline else []
    return Comparison(
        machine_id=current.machine_id,
        machine_label=current.machine_label,
        current=current,
        baseline=baseline,
        baseline_rule=rule,
        history=(*earlier, current),
        current_repeats=repeats,
        stack_change=tuple(changes),
        stack_marks=_stack_marks([*(r for r in earlier if r.branch == opts.base_branch), current]),
    )


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
