"""Host probes in every run: when they are timed, and their records in the run's history file.

A run times the probes of `benchmarks.harness.probe` (the CPU's memory copy and GEMM, and the
accelerator's own on CUDA/MPS) at its start (before its first benchmark), between its tests and
at its end (DESIGN §3). Between tests it probes when `MIN_GAP_S` have passed since the last
point and the probes have cost at most `MAX_SHARE` of the run so far: before most tests of
`nox -s bench-cpu` (its tests take 5 s and more), every few seconds of a tiny smoke run (its
tests take milliseconds), so a drift of the host over minutes is followed and the cost stays a
few seconds (a point is ~0.2 s on the 2-core development VM). Each point records when it was
taken (`session_s`, seconds since the run began; every benchmark record carries its own
`session_window_s` on the same clock) and what other
processes took of the CPUs meanwhile (and its calls' times: their spread is the point's own
noise) (over the window since the previous point: a probe alone
is too short for the CPU counters), so a busy probe is not trusted blindly.

`records` turns the points into one pytest-benchmark record per kind: `stats.data` is one value
per point (seconds), the full statistics beside it so `pytest-benchmark compare` reads the file,
and `extra_info.host_probe` names the kind (the field the reports find probes by, never the
name). A run under the A/B turnstile (`PHASEBENCH_AB_SOCKET`) does not probe: its two sides share
the machine round by round, and a probe outside a turn would run during the other side's round.

Registered by `benchmarks/conftest.py`. Deliberately not here: the kernels and their timing
(`benchmarks.harness.probe`), judging (`reports.analysis.probes`).
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
from benchmarks.harness.probe.kernels import ProbeKernel, kernels
from benchmarks.harness.probe.timing import time_calls
from benchmarks.suite.rounds import ACCELERATOR, EXTRA_INFO_SCHEMA, THREADS

#: Seconds since the last probe point before the next test gets one.
MIN_GAP_S = 8.0
#: The most of the run's time so far the probes between tests may have taken.
MAX_SHARE = 0.02
#: Set by the A/B runner for each side (`benchmarks/ab/turnstile.py`): no probes then.
AB_SOCKET_VAR = "PHASEBENCH_AB_SOCKET"
PROBES = pytest.StashKey["ProbeLog"]()


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
    """The run's probe points and the clock every record shares (module docstring)."""

    probes: list[ProbeKernel]
    threads: int
    clock: Callable[[], float] = time.perf_counter
    started: float = field(default_factory=time.perf_counter)
    points: list[Point] = field(default_factory=list)
    cost_s: float = 0.0
    _meter: OthersCpuMeter | None = None

    def __post_init__(self) -> None:
        self._meter = OthersCpuMeter()  # the start point's window: the run's set-up
        self._meter.start()

    def session_s(self) -> float:
        """Seconds since the run began (the clock of `session_window_s` and `session_s`)."""
        return self.clock() - self.started

    def due(self) -> bool:
        """Whether a test should be preceded by a point (module docstring)."""
        if not self.points:
            return True
        since = self.session_s() - self.points[-1].session_s
        return since >= MIN_GAP_S and self.cost_s <= MAX_SHARE * self.session_s()

    def probe(self, at: str) -> None:
        """Time every kernel once (a point) on the run's threads; `at` says where in the run."""
        import torch  # noqa: PLC0415 - the suite's modules import torch lazily

        begin = self.clock()
        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            calls = {k.kind: time_calls(k) for k in self.probes}
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

    def records(self) -> list[dict[str, Any]]:
        """One pytest-benchmark record per kind (module docstring); none before a point."""
        out = []
        for kernel in self.probes:
            data = [p.seconds[kernel.kind] for p in self.points if kernel.kind in p.seconds]
            if not data:
                continue
            stats = Stats()
            for value in data:
                stats.update(value)
            out.append(_record(kernel, data, stats, self.points))
        return out


def _record(
    kernel: ProbeKernel, data: list[float], stats: Stats, points: list[Point]
) -> dict[str, Any]:
    cpus = next((p.others.get("others_cpus") for p in points if p.others), None)
    return {
        "group": "host_probe",
        "name": f"host_probe[{kernel.kind}]",
        "fullname": f"host_probe::host_probe[{kernel.kind}]",
        "params": {"kind": kernel.kind, "device": str(kernel.device)},
        "param": kernel.kind,
        "extra_info": {
            "schema": EXTRA_INFO_SCHEMA,
            "host_probe": kernel.kind,
            "device": str(kernel.device),
            "probe": kernel.description,
            "sync": "device_sync before and after each call",
            "others_cpus": cpus,
            "points": [
                {
                    "at": p.at,
                    "session_s": p.session_s,
                    "calls_s": p.calls[kernel.kind],
                    "others_cores": p.others.get("others_cores"),
                    "others_cpu_s": p.others.get("others_cpu_s"),
                    "others_window_s": p.others.get("others_window_s"),
                }
                for p in points
                if kernel.kind in p.seconds
            ],
        },
        "options": {"timer": "perf_counter", "min_rounds": len(data), "disable_gc": False},
        "stats": {**stats.as_dict(), "data": data, "iterations": 1},
    }


def _benchmarking(config: pytest.Config) -> bool:
    session = getattr(config, "_benchmarksession", None)
    if session is None or session.disabled or session.skip:
        return False
    return bool(session.save or session.autosave or session.json)


def log_of(config: pytest.Config) -> ProbeLog | None:
    """The run's probe log, made when first needed; None when this run does not probe."""
    if PROBES in config.stash:
        return config.stash[PROBES]
    if os.environ.get(AB_SOCKET_VAR) or not _benchmarking(config):
        return None
    device = resolve_device(config.stash.get(ACCELERATOR, None) or "cpu")
    config.stash[PROBES] = ProbeLog(kernels(device), config.stash[THREADS])
    return config.stash[PROBES]


def session_seconds(config: pytest.Config) -> float | None:
    """Seconds since the run began on the probes' clock (None when the run does not probe)."""
    log = config.stash.get(PROBES, None)
    return None if log is None else log.session_s()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a benchmark's fixtures are set up: a probe point when one is due."""
    if "benchmark" not in getattr(item, "fixturenames", ()):
        return
    if item.get_closest_marker("skip") is not None:
        return
    log = log_of(item.config)
    if log is not None and log.due():
        log.probe("start" if not log.points else f"before {item.nodeid}")


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    """After the last test (before pytest-benchmark saves the run): the end point."""
    result = yield
    log = session.config.stash.get(PROBES, None)
    if log is not None and log.points:
        log.probe("end")
    return result


def add_records(config: pytest.Config, output_json: dict[str, Any]) -> None:
    """Append the probe records to a history document being written (`update_json`)."""
    log = config.stash.get(PROBES, None)
    if log is not None:
        output_json["benchmarks"].extend(log.records())
