"""Read one pytest-benchmark JSON file into a frozen `RunFile`, or name why it cannot be used.

- checks the schema versions phasebench writes (`machine_info.phasebench.schema`,
  `extra_info.schema`); files from plain pytest-benchmark (no `phasebench` key) are foreign and
  accepted, identified by a hash of pytest-benchmark's own `machine_info` fields;
- reads phasebench's identity fields: `hardware_id` (the grouping key) and `stack` (the
  software stack, judged against the same hardware's baseline), falling back to
  `fingerprint_id` for files written before they existed; `planned` (the cell fullnames the
  run selected), `shard` ("I/N": `planned` is one shard's) and `partial` (a run killed before
  it finished);
- sets host-probe records apart (`extra_info.host_probe` names their kind, DESIGN §3): they
  measure the machine, not the code, so they are the file's `probes`, never its `benchmarks`
  (a probe needs only its name, that field and its `stats`: other tools may write them too);
- a file it cannot use becomes a `SkippedFile` with the reason; it never raises for one.

Deliberately not here: grouping files into runs (`history`), choosing baselines (`selection`).
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from reports.errors import ReportError
from reports.history.rounds import record_rounds

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
    #: The file the record was read from: a run's shards each keep their own session clock, so
    #: a benchmark's window is read against the probes of its own file.
    source: str = ""

    @cached_property
    def median_s(self) -> float:
        """Median of the rounds (computed once; trends read it for every run)."""
        return statistics.median(self.rounds_s)

    @property
    def host_probe(self) -> str | None:
        """The probe's kind ("memory", "compute", ...) when this record is a host probe."""
        kind = self.extra.get("host_probe")
        return kind if isinstance(kind, str) and kind else None

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
        rounds = record_rounds(stats, raw.get("extra_info"), fullname)
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


#: The software-stack fields of the fingerprint, for files that predate `phasebench.stack`.
LEGACY_STACK_KEYS = (
    "torch",
    "transformers",
    "python",
    "driver",
    "runtime",
    "os_release",
    "torch_num_threads",
)


@dataclass(frozen=True)
class RunFile:
    """One readable history file.

    machine_id: the grouping key (`hardware_id`, else `fingerprint_id`, else a foreign hash).
    stack: software-stack fields (torch, transformers, python, driver, runtime, ...).
    planned: the benchmark fullnames the run selected, or None when not recorded.
    partial: the run was killed before it finished (only the cells that finished are here).
    commit_time: the commit's own time from `commit_info.time` ("" when absent).
    probes: the host-probe records (`BenchmarkResult.host_probe`), never among `benchmarks`.
    """

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
    stack: Mapping[str, str] = field(default_factory=dict)
    planned: frozenset[str] | None = None
    partial: bool = False
    commit_time: str = ""
    shard: tuple[int, int] | None = None
    probes: tuple[BenchmarkResult, ...] = ()

    @property
    def cells(self) -> frozenset[str]:
        """The fullnames this file covers: its planned list when recorded, else what it holds."""
        if self.planned is not None:
            return self.planned
        return frozenset(b.fullname for b in self.benchmarks)

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
        ident = _machine_identity(machine)
        stamp = raw.get("datetime")
        records = [
            replace(BenchmarkResult.from_json(b), source=str(path)) for b in raw["benchmarks"]
        ]
        benchmarks = tuple(b for b in records if b.host_probe is None)
        commit_time = commit.get("time")
        return cls(
            path=str(path),
            machine_id=ident.machine_id,
            machine_label=ident.label,
            commit_id=str(commit.get("id") or "unknown"),
            branch=str(commit.get("branch") or "unknown"),
            dirty=bool(commit.get("dirty")),
            datetime=stamp if isinstance(stamp, str) else "",
            env=ident.env,
            pytest_benchmark_version=str(raw.get("version") or "unknown"),
            benchmarks=benchmarks,
            mtime_s=mtime_s,
            stack=ident.stack,
            planned=ident.planned,
            partial=ident.partial,
            commit_time=commit_time if isinstance(commit_time, str) else "",
            shard=ident.shard,
            probes=tuple(b for b in records if b.host_probe is not None),
        )


class _SchemaError(ValueError):
    """A phasebench schema version this package does not read."""


@dataclass(frozen=True)
class _Identity:
    machine_id: str
    label: str
    env: dict[str, str]
    stack: dict[str, str]
    planned: frozenset[str] | None
    partial: bool
    shard: tuple[int, int] | None = None


def _shard(raw: object) -> tuple[int, int] | None:
    """`machine_info.phasebench.shard` "I/N" -> (I, N); None when absent or "1/1"."""
    if raw is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", raw) if isinstance(raw, str) else None
    if match is None or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise ValueError(f"machine_info.phasebench.shard is {raw!r}, not I/N with 1 <= I <= N")
    index, count = int(match.group(1)), int(match.group(2))
    return None if count == 1 else (index, count)


def _machine_identity(machine: Mapping[str, Any]) -> _Identity:
    """Machine id, label, environment, stack, planned cells and partial flag from `machine_info`."""
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
        stack = {"python": env["python_version"]} if "python_version" in env else {}
        return _Identity(f"mi-{digest}", label, env, stack, None, False)
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
    hid = pb.get("hardware_id")
    if hid is not None and (not isinstance(hid, str) or not hid):
        raise ValueError("machine_info.phasebench.hardware_id is not a non-empty string")
    raw_stack = pb.get("stack")
    if raw_stack is not None and not isinstance(raw_stack, dict):
        raise ValueError("machine_info.phasebench.stack is not an object")
    stack = (
        {str(k): str(v) for k, v in raw_stack.items()}
        if isinstance(raw_stack, dict)
        else {k: env[k] for k in LEGACY_STACK_KEYS if k in env}
    )
    planned_raw = pb.get("planned")
    if planned_raw is not None and (
        not isinstance(planned_raw, list) or not all(isinstance(p, str) for p in planned_raw)
    ):
        raise ValueError("machine_info.phasebench.planned is not a list of benchmark fullnames")
    planned = frozenset(planned_raw) if isinstance(planned_raw, list) else None
    parts = [env.get(k) for k in ("accelerator", "cpu", "os")]
    label = " / ".join(p for p in parts if p and p not in {"none", "n/a"}) or fid
    # Files without hardware_id group by fingerprint_id, as before (it also hashes the stack).
    return _Identity(
        hid or fid, label, env, stack, planned, bool(pb.get("partial")), _shard(pb.get("shard"))
    )


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
    for bench in (*run.benchmarks, *run.probes):
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


def _replace_benchmarks(run: RunFile, records: tuple[BenchmarkResult, ...]) -> RunFile:
    return replace(
        run,
        benchmarks=tuple(b for b in records if b.host_probe is None),
        probes=tuple(b for b in records if b.host_probe is not None),
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
