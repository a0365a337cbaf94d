"""Host probes in every run: when they are timed, and their records in the run's history file.

A run times the probes of `benchmarks.harness.probe` (the CPU's memory copy and GEMM, and the
accelerator's own on CUDA/MPS) at its start (before its first benchmark), between its tests and
at its end (DESIGN §3). Between tests it probes when `MIN_GAP_S` have passed since the last
point and the probes have cost at most `MAX_SHARE` of the run so far: before every test of
`nox -s bench-cpu` (its tests take 5 s and more), every second or so of a tiny smoke run (its
tests take milliseconds), so each benchmark's timed window lies between two points (the reports
read the host's level at each window, `reports.analysis.timeline.Timeline.at`) and the cost stays
a few percent (a point is ~0.1 s on the 2-core development VM). Never during a timed round.

The CPU probes run in a process of their own (`probe.worker`, `"process": "own"` in the
records), started by `start_worker` from the suite's `pytest_configure`: before the test modules
and the models are imported and before any cell's fixture runs, with the environment of that
moment and fixed settings (the run's `--threads`, else torch's default for a fresh process;
flush-denormal off; float32 operands). So whatever process-wide state the code under test sets
(threads, default dtype, FTZ/DAZ) moves its benchmarks but not the probes, and the gate does not
subtract the code's own regression as "the host". The accelerator's probes stay in this process
(`"in-run"`: a second CUDA context would cost device memory, and the device queue is shared
anyway), with float32 operands and TF32 off. A worker that hangs, dies or cannot start stops
the probing, with its reason in the records (`stopped`) and in `machine_info.phasebench`
(`host_probes_stopped`); the run and its benchmarks' records go on.

Each point records when it was taken (`session_s`, seconds since the run began on this
process's clock, the midpoint between asking and the last answer; every benchmark record carries
its own `session_window_s` on the same clock) and what other processes took of the CPUs
meanwhile (the worker is this process's child: its CPU is the run's own, `cpustate`), and its
calls' times (their spread is the point's own noise) (over the window since the previous point:
a probe alone is too short for the CPU counters), so a busy probe is not trusted blindly.

`records` turns the points into one pytest-benchmark record per kind: `stats.data` is one value
per point (seconds), the full statistics beside it so `pytest-benchmark compare` reads the file,
and `extra_info.host_probe` names the kind (the field the reports find probes by, never the
name); `process`, `threads` and `dtype` say what it ran with. A run under the A/B turnstile
(`PHASEBENCH_AB_SOCKET`) does not probe (nor start a worker): its two sides share the machine
round by round, and a probe outside a turn would run during the other side's round; nor does a
run that saves no history.

Registered by `benchmarks/conftest.py`. Deliberately not here: the kernels, their timing and the
worker (`benchmarks.harness.probe`), judging (`reports.analysis.probes`).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pytest_benchmark.stats import Stats

from benchmarks.harness.device.cpustate import OthersCpuMeter
from benchmarks.harness.device.devices import resolve_device
from benchmarks.harness.probe.client import MODULE, ProbeWorker, WorkerError, WorkerInfo
from benchmarks.harness.probe.kernels import ProbeKernel, device_kernels
from benchmarks.harness.probe.timing import time_calls
from benchmarks.suite.rounds import ACCELERATOR, EXTRA_INFO_SCHEMA, THREADS, Progress

#: Seconds since the last probe point before the next test gets one: every benchmark of the
#: real matrices (seconds each) gets a point before it, so its window is bracketed (issue 51).
MIN_GAP_S = 1.0
#: The most of the run's time so far the probes between tests may have taken.
MAX_SHARE = 0.05
#: Set by the A/B runner for each side (`benchmarks/ab/turnstile.py`): no probes then.
AB_SOCKET_VAR = "PHASEBENCH_AB_SOCKET"
PROBES = pytest.StashKey["ProbeLog"]()
WORKER = pytest.StashKey[ProbeWorker]()


@dataclass(frozen=True)
class Kind:
    """A probe kind as its record names it: what ran, where, in which process, on what."""

    kind: str
    device: str
    description: str
    process: str  # "own": the worker's; "in-run": this process's
    threads: int
    dtype: str


@dataclass
class Point:
    """One probe point: where in the run, when, each kernel's seconds, others' CPU meanwhile."""

    at: str
    session_s: float
    calls: dict[str, list[float]]
    others: dict[str, Any]

    @property
    def seconds(self) -> dict[str, float]:
        """Each kernel's point value: the median of its calls."""
        return {kind: statistics.median(c) for kind, c in self.calls.items()}


@dataclass
class ProbeLog:
    """The run's probe points and the clock every record shares (module docstring).

    `probes` run in this process (the accelerator's; tests give fakes), `worker` times the
    CPU's in its own. The first failure of the worker stops all probing (`stopped`)."""

    probes: list[ProbeKernel]
    threads: int
    clock: Callable[[], float] = time.perf_counter
    started: float = field(default_factory=time.perf_counter)
    points: list[Point] = field(default_factory=list)
    cost_s: float = 0.0
    worker: ProbeWorker | None = None
    stopped: str | None = None
    _worker_info: WorkerInfo | None = None
    _meter: OthersCpuMeter | None = None

    def __post_init__(self) -> None:
        self._meter = OthersCpuMeter()  # the start point's window: the run's set-up
        self._meter.start()

    def session_s(self) -> float:
        """Seconds since the run began (the clock of `session_window_s` and `session_s`)."""
        return self.clock() - self.started

    def due(self) -> bool:
        """Whether a test should be preceded by a point (module docstring)."""
        if self.stopped is not None:
            return False
        if not self.points:
            return True
        since = self.session_s() - self.points[-1].session_s
        return since >= MIN_GAP_S and self.cost_s <= MAX_SHARE * self.session_s()

    def kinds(self) -> list[Kind]:
        """Every kind a point times: the worker's (once it has answered), then this process's."""
        out = []
        info = self._worker_info
        if info is not None:
            own = info.kinds
            out += [
                Kind(k.kind, k.device, k.description, "own", info.threads, k.dtype) for k in own
            ]
        return out + [
            Kind(k.kind, str(k.device), k.description, "in-run", self.threads, _name(k.dtype))
            for k in self.probes
        ]

    def probe(self, at: str) -> None:
        """Time every kernel once (a point); `at` says where in the run. A worker that fails
        stops the probing (`stopped`); the points so far are kept."""
        import torch  # noqa: PLC0415 - the suite's modules import torch lazily

        if self.stopped is not None:
            return
        calls: dict[str, list[float]] = {}
        try:
            if self.worker is not None:
                self._worker_info = self.worker.info()  # its start-up: not part of the point
            begin = self.clock()
            if self.worker is not None:
                calls.update(self.worker.point())
        except WorkerError as error:
            self.stop(str(error))
            return
        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            calls.update({k.kind: time_calls(k) for k in self.probes})
        finally:
            torch.set_num_threads(threads)
        others: dict[str, Any] = {}
        if self._meter is not None:
            others = self._meter.stop_extra_info()
        self._meter = OthersCpuMeter()
        self._meter.start()
        end = self.clock()
        if self.points:  # the start point is always taken; the ones between tests are budgeted
            self.cost_s += end - begin
        self.points.append(Point(at, (begin + end) / 2 - self.started, calls, others))

    def stop(self, reason: str) -> None:
        """Stop probing for good (`reason` goes in the records) and the worker with it."""
        if self.stopped is None:
            self.stopped = reason
        if self.worker is not None:
            self.worker.close()

    def records(self) -> list[dict[str, Any]]:
        """One pytest-benchmark record per kind (module docstring); none before a point."""
        out = []
        for kind in self.kinds():
            data = [p.seconds[kind.kind] for p in self.points if kind.kind in p.seconds]
            if not data:
                continue
            stats = Stats()  # type: ignore[no-untyped-call]
            for value in data:
                stats.update(value)  # type: ignore[no-untyped-call]
            out.append(_record(kind, data, stats, self.points, self.stopped))
        return out


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _record(
    kind: Kind, data: list[float], stats: Stats, points: list[Point], stopped: str | None
) -> dict[str, Any]:
    cpus = next((p.others.get("others_cpus") for p in points if p.others), None)
    return {
        "group": "host_probe",
        "name": f"host_probe[{kind.kind}]",
        "fullname": f"host_probe::host_probe[{kind.kind}]",
        "params": {"kind": kind.kind, "device": kind.device},
        "param": kind.kind,
        "extra_info": {
            "schema": EXTRA_INFO_SCHEMA,
            "host_probe": kind.kind,
            "device": kind.device,
            "probe": kind.description,
            "process": kind.process,
            "threads": kind.threads,
            "dtype": kind.dtype,
            **({"stopped": stopped} if stopped is not None else {}),
            "sync": "device_sync before and after each call",
            "others_cpus": cpus,
            "points": [
                {
                    "at": p.at,
                    "session_s": p.session_s,
                    "calls_s": p.calls[kind.kind],
                    "others_cores": p.others.get("others_cores"),
                    "others_cpu_s": p.others.get("others_cpu_s"),
                    "others_window_s": p.others.get("others_window_s"),
                }
                for p in points
                if kind.kind in p.seconds
            ],
        },
        "options": {"timer": "perf_counter", "min_rounds": len(data), "disable_gc": False},
        "stats": {**stats.as_dict(), "data": data, "iterations": 1},  # type: ignore[no-untyped-call]
    }


def _benchmarking(config: pytest.Config) -> bool:
    session = getattr(config, "_benchmarksession", None)
    if session is None or session.disabled or session.skip:
        return False
    return bool(session.save or session.autosave or session.json)


def _will_save(config: pytest.Config) -> bool:
    """`_benchmarking` from the options, before pytest-benchmark's (trylast) configure reads
    them; `log_of` asks the session itself later."""
    option = config.option
    skip = getattr(option, "benchmark_skip", False)
    disabled = getattr(option, "benchmark_disable", False) and not getattr(
        option, "benchmark_enable", False
    )
    saves = any(getattr(option, f"benchmark_{o}", None) for o in ("save", "autosave", "json"))
    return saves and not (skip or disabled or option.collectonly)


def start_worker(config: pytest.Config) -> None:
    """Start the CPU probes' worker if this run will probe (module docstring); called at the end
    of the suite's `pytest_configure`, the first moment the run's options are settled."""
    if WORKER not in config.stash and not os.environ.get(AB_SOCKET_VAR) and _will_save(config):
        _launch(config)


def _launch(config: pytest.Config) -> ProbeWorker:
    # The configured threads, not the parent's torch now: a plugin or module imported before
    # this hook may have changed those already. None: torch's default in the fresh worker.
    threads = config.getoption("threads")  # checked by `configure`
    worker = config.stash[WORKER] = ProbeWorker(int(threads) if threads is not None else None)
    return worker


def log_of(config: pytest.Config) -> ProbeLog | None:
    """The run's probe log, made when first needed; None when this run does not probe."""
    if PROBES in config.stash:
        return config.stash[PROBES]
    if os.environ.get(AB_SOCKET_VAR) or not _benchmarking(config):
        return None
    worker = config.stash.get(WORKER, None) or _launch(config)  # started at configure, else now
    device = resolve_device(config.stash.get(ACCELERATOR, None) or "cpu")
    log = ProbeLog(device_kernels(device), config.stash[THREADS], worker=worker)
    config.stash[PROBES] = log
    return log


def session_seconds(config: pytest.Config) -> float | None:
    """Seconds since the run began on the probes' clock (None when the run does not probe)."""
    log = config.stash.get(PROBES, None)
    return None if log is None else log.session_s()


def _probe(config: pytest.Config, log: ProbeLog, at: str) -> None:
    log.probe(at)
    if log.stopped is not None:
        Progress(config)(
            f"host probes stopped: {log.stopped}. The run goes on with the points so far; "
            f'to see why, run `python -m {MODULE}` and type {{"op": "point"}}'
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a benchmark's fixtures are set up: a probe point when one is due."""
    if "benchmark" not in getattr(item, "fixturenames", ()):
        return
    if item.get_closest_marker("skip") is not None:
        return
    log = log_of(item.config)
    if log is not None and log.due():
        _probe(item.config, log, "start" if not log.points else f"before {item.nodeid}")


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    """After the last test (before pytest-benchmark saves the run): the end point; then the
    worker is stopped (nothing asks it again)."""
    result = yield
    log = session.config.stash.get(PROBES, None)
    if log is not None and log.points and log.stopped is None:
        _probe(session.config, log, "end")
    worker = session.config.stash.get(WORKER, None)
    if worker is not None:
        worker.close()
    return result


def pytest_unconfigure(config: pytest.Config) -> None:
    """The worker stopped whatever happened (an interrupted run skips the end point)."""
    worker = config.stash.get(WORKER, None)
    if worker is not None:
        worker.close()


def add_records(config: pytest.Config, output_json: dict[str, Any]) -> None:
    """Append the probe records to a history document being written (`update_json`), and say
    why the probing stopped when it did."""
    log = config.stash.get(PROBES, None)
    if log is None:
        return
    output_json["benchmarks"].extend(log.records())
    if log.stopped is not None:
        machine = output_json.setdefault("machine_info", {})
        machine.setdefault("phasebench", {})["host_probes_stopped"] = log.stopped
