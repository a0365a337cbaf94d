"""Support for the benchmark modules: shared stash keys, progress lines, the record skeleton.

`benchmarks/conftest.py` wires pytest (options, parametrization, fixtures); the test modules
measure; this module holds what both need and is neither: the stash keys (also read by the root
conftest's machine-info hook), the `Progress` writer that keeps a long run visibly alive, and
`start_record`, which stamps every benchmark with the flat `params` and the schema-1 fields
(noise control included: the warmup's outcome and the thermal state around the rounds).

It deliberately imports no torch at module level (the root conftest imports it from a hook).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from benchmarks.harness.matrix import Matrix
from benchmarks.harness.peaks import Peaks
from benchmarks.harness.roofline import RooflineError

if TYPE_CHECKING:
    import torch

    from benchmarks.harness.matrix import Cell
    from benchmarks.harness.modelcache import Loaded

# The loaded matrix (benchmarks/conftest.py pytest_configure).
MATRIX = pytest.StashKey[Matrix]()
# The first accelerator the matrix uses ("cuda", "mps", ...), None when it is CPU only: the
# machine fingerprint names it.
ACCELERATOR = pytest.StashKey[str | None]()

EXTRA_INFO_SCHEMA = 1


@dataclass(frozen=True)
class Warmup:
    """What a cell's warmup did: how many whole generations, how long, the first one's e2e.

    `policy` says how the count was decided ("fixed:2", "until-stable:cv<0.02,k=3,max=10");
    `final_cv` is the CV of the last window of an until-stable warmup (None otherwise, or when
    fewer generations than the window ran); `thermal_before` is `noise.thermal_state` sampled
    just before the warmup (empty when the OS exposes nothing).
    """

    generations: int
    seconds: float
    first_e2e_s: float | None
    policy: str
    final_cv: float | None
    thermal_before: dict[str, Any]


@dataclass(frozen=True, eq=False)
class CellRun:
    """Everything a measurement needs about its cell, prepared by `benchmarks/conftest.py`."""

    cell: Cell
    loaded: Loaded  # the built model and its engine
    prompt: torch.Tensor  # [B, P] seeded ids, on the host
    warmup: Warmup
    progress: Progress
    timer: str  # the benchmark timer's name, for extra_info
    sync: str  # how the timer waits for the device, for extra_info
    # The extra_info dicts `start_record` made for this test: the `run` fixture adds
    # `thermal_after` to each when the test ends, after its timed rounds.
    records: list[dict[str, Any]] = field(default_factory=list)


class Progress:
    """One line per cell and phase on the terminal, whatever `-s`/capture says.

    Lines go through pytest's terminal reporter with capturing suspended (as live logging
    does), so a model build or a long warmup never looks like a hang.
    """

    def __init__(self, config: pytest.Config) -> None:
        self._config = config
        self._started_s = time.perf_counter()

    def __call__(self, line: str) -> None:
        """Write `phasebench: [m:ss] <line>` on its own line (time since the session began)."""
        reporter = self._config.pluginmanager.get_plugin("terminalreporter")
        capture = self._config.pluginmanager.get_plugin("capturemanager")
        minutes, seconds = divmod(int(time.perf_counter() - self._started_s), 60)
        text = f"phasebench: [{minutes}:{seconds:02d}] {line}"
        if reporter is None:
            print(text, file=sys.__stderr__, flush=True)
            return
        if capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(text)
        else:
            reporter.write_line(text)


def start_record(benchmark: Any, run: CellRun, measurement: str) -> dict[str, Any]:
    """Set the benchmark's flat `params` and the schema-1 skeleton of its `extra_info`.

    Call it before `benchmark.pedantic`: pytest-benchmark copies `params` when the round
    statistics are created, and keeps a reference to `extra_info`, so metrics added after the
    rounds still reach the saved JSON. Returns that `extra_info` dict.
    """
    cell = run.cell
    benchmark.params = cell.axes()
    benchmark.group = measurement
    info: dict[str, Any] = benchmark.extra_info
    info.update(
        {
            "schema": EXTRA_INFO_SCHEMA,
            "cell_id": cell.id,
            "measurement": measurement,
            "warmup": cell.warmup,
            "rounds": cell.rounds,
            "seed": cell.seed,
            "timer": run.timer,
            "sync": run.sync,
            "warmup_s": run.warmup.seconds,
            "build_s": run.loaded.build_s,
        }
    )
    # The cell's first generation (right after the build, for a model's first cell): the
    # first-call cost, its own metric (STYLE principle 3); None when warmup is 0.
    info["first_generation_e2e_s"] = run.warmup.first_e2e_s
    # Noise control: what the warmup did (the count may differ from `warmup` under
    # --warmup-until-stable) and the thermal state before it; `thermal_after` follows at the end.
    info["warmup_generations_run"] = run.warmup.generations
    info["warmup_final_cv"] = run.warmup.final_cv
    info["warmup_policy"] = run.warmup.policy
    info["thermal_before"] = dict(run.warmup.thermal_before)
    run.records.append(info)
    return info


def memory_fields(sample: Any, weights_bytes: int) -> dict[str, Any]:
    """Weights and the phase's peak memory from a `devices.MemorySample`, with their labels.

    CPU has no allocator counters (the peaks are None, as labelled); `peak_rss_bytes` is the
    process RSS read when the phase ended, a lower bound of its true peak.
    """
    labels = dict(sample.labels)
    labels["peak_rss"] = "process RSS sampled at the end of the phase (a lower bound of the peak)"
    return {
        "weights_bytes": weights_bytes,
        "peak_allocated_bytes": sample.peak_allocated_bytes,
        "peak_reserved_bytes": sample.peak_reserved_bytes,
        "peak_rss_bytes": sample.rss_bytes,
        "memory_labels": labels,
    }


def round_times(benchmark: Any) -> list[float] | None:
    """The timed rounds in seconds, or None when pytest-benchmark did not time (disabled)."""
    stats = getattr(benchmark, "stats", None)
    if stats is None:
        return None
    return list(stats.stats.data)


def roofline_confirmed(
    compute: Callable[[Peaks], dict[str, Any]], peaks: Peaks, remeasure: Callable[[], Peaks]
) -> dict[str, Any]:
    """Roofline fields, where an excess over a *measured* peak is confirmed before it fails.

    Above 100 % of a peak is a measurement bug (`RooflineError`), unless the peak itself was
    measured while other work held the device (a shared CPU runner): then one fresh measurement
    (`remeasure`, which keeps the higher figure) is taken and the rate judged again; a second
    excess raises. Table peaks are not re-measured.
    """
    try:
        return compute(peaks)
    except RooflineError:
        if not peaks.source.startswith("measured"):
            raise
        return compute(remeasure())
