"""Support for the benchmark modules: shared stash keys, progress lines, the record skeleton.

`benchmarks/conftest.py` wires pytest (options, parametrization, fixtures); the test modules
measure; this module holds what both need and is neither: the stash keys (also read by the root
conftest's machine-info hook), the `Progress` writer that keeps a long run visibly alive, and
`start_record`, which stamps every benchmark with the flat `params` and the schema-1 fields
(noise control included: the warmup's outcome and the thermal state around the rounds), and
`Rounds`, which runs timed rounds that keep nothing of one round alive into the next and read
each round's own memory peak (`benchmarks/suite/partial.py` keeps a killed run's finished cells).

It deliberately imports no torch at module level (the root conftest imports it from a hook).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from benchmarks.harness.matrix.cells import Cell, Matrix
from benchmarks.harness.records import phase_energy_fields

if TYPE_CHECKING:
    import torch

    from benchmarks.harness.cellmodel import CellModel

# The loaded matrix (pytest_configure in benchmarks/suite/configure.py).
MATRIX = pytest.StashKey[Matrix]()
# The first accelerator the matrix uses ("cuda", "mps", ...), None when it is CPU only: the
# machine fingerprint names it.
ACCELERATOR = pytest.StashKey[str | None]()

# torch's intra-op threads as the run set them up (`--threads` or torch's default), restored
# before every cell so that no earlier cell's setting carries over (benchmarks/conftest.py).
THREADS = pytest.StashKey[int]()

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
    # torch.compile's first calls (`compiled.first_calls`, DESIGN §9): compile_s, ...
    run_mode: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class CellRun:
    """Everything a measurement needs about its cell, prepared by `benchmarks/conftest.py`."""

    cell: Cell
    loaded: CellModel  # the built model and its engine (torch's or MLX's)
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
            "rounds": cell.rounds,  # the floor; the benchmark's stats count the rounds timed
            "min_timed_s": cell.min_timed_s,
            "seed": cell.seed,
            "timer": run.timer,
            "sync": run.sync,
            "warmup_s": run.warmup.seconds,
            "build_s": run.loaded.build_s,
            **thread_policy(),
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
    info.update(run.warmup.run_mode)  # compile cost of a compiled cell (DESIGN §9)
    # A quantized cell's method, quantization time and accuracy, as measured where its model was
    # built and quantized (`modelcache.build_loaded`); an MLX cell's engine and versions. Read
    # here, never measured.
    info.update(run.loaded.record_fields(cell))
    run.records.append(info)
    return info


def thread_policy() -> dict[str, Any]:
    """The threads the rounds ran with (the wait policy as the user's process has it), in the
    names the fingerprint uses; read by `noise.cpu_thread_state` (imported here: no torch at
    import)."""
    from benchmarks.harness.device.fingerprint import UNSET  # noqa: PLC0415 - torch
    from benchmarks.harness.device.noise import cpu_thread_state  # noqa: PLC0415 - torch

    state = cpu_thread_state()
    return {
        "torch_num_threads": state["torch_num_threads"],
        "omp_wait_policy": state["env_OMP_WAIT_POLICY"] or UNSET,
        "gomp_spincount": state["env_GOMP_SPINCOUNT"] or UNSET,
    }


def memory_fields(samples: list[Any], weights: dict[str, Any]) -> dict[str, Any]:
    """Weights and the phase's peak memory over the rounds' `memory.MemorySample`s, labelled.

    Each sample is one round's own peak (`Rounds`); the fields are the largest over rounds. CPU
    has no allocator counters (the peaks are None, as labelled); `peak_rss_bytes` is the process
    RSS read when each round ended, a lower bound of its true peak.
    """
    from benchmarks.harness.device.memory import peak_fields  # noqa: PLC0415 - torch

    labels = dict(samples[0].labels) if samples else {}
    labels["peak_rss"] = "process RSS sampled at the end of each round (a lower bound of the peak)"
    return {
        **weights,  # `Loaded.weights_fields()`: stored, dense and analytic weight bytes
        # MPS maxima of samples go under `peak_*_sampled_bytes`, never as a true peak.
        **peak_fields(samples),
        "peak_rss_bytes": max_or_none(s.rss_bytes for s in samples),
        "memory_labels": labels,
    }


def round_times(benchmark: Any) -> list[float] | None:
    """The timed rounds in seconds, or None when pytest-benchmark did not time (disabled)."""
    stats = getattr(benchmark, "stats", None)
    if stats is None:
        return None
    return list(stats.stats.data)


class PeakMonitor(Protocol):
    """What `Rounds` needs of `memory.MemoryMonitor`: start a phase, read its peak."""

    def reset_peak(self) -> None: ...

    def sample(self) -> Any: ...


class Rounds:
    """`benchmark.pedantic` rounds that keep nothing of one round alive into the next.

    pytest-benchmark keeps the previous round's return value (and its arguments) alive while the
    next round runs (FACTS §7), so a timed function that returned a cache would hold a spare one
    through every later round's memory peak. Here the timed function takes no arguments and
    returns None: each round's untimed `setup` first drops the previous round's input and output,
    then builds this round's input with `prepare()`, then resets the memory peak; the timed call
    `run(input)` keeps its output in `last`. The peak is read when the next round's setup starts
    (and once after the last round), before anything is dropped or built, so `peaks[i]` is round
    i's own: weights + its input + what the timed call allocated.
    """

    def __init__(
        self,
        run: Callable[[Any], Any],
        prepare: Callable[[], Any] | None = None,
        monitor: PeakMonitor | None = None,
    ) -> None:
        self._run = run
        self._prepare = prepare
        self._monitor = monitor
        self._input: Any = None
        self._pending = False  # a round ran and its peak is not read yet
        self.last: Any = None  # the latest round's output, for checks after the rounds
        self.outputs: list[Any] = []  # what `keep` kept of every round (see `pedantic`)
        self.peaks: list[Any] = []  # one monitor sample per round
        self._keep: Callable[[Any], Any] | None = None

    def setup(self) -> None:
        """Untimed, before every round: read the last peak, drop, prepare, reset the peak."""
        self._read_peak()
        self._input = self.last = None
        self._input = self._prepare() if self._prepare is not None else None
        if self._monitor is not None:
            self._monitor.reset_peak()

    def target(self) -> None:
        """The timed call: `run(input)`; the output is kept here, never returned."""
        self.last = self._run(self._input)
        self._pending = True
        if self._keep is not None:
            self.outputs.append(self._keep(self.last))

    def _warm_round(self, timer: Callable[[], float]) -> float:
        """One untimed round of exactly what is timed (output and peak discarded): the cell's
        warm-up warms shapes, not each module's own path, whose first timed round ran up to
        10 % slower (issue 19). Inside the compile window: a recompilation here still fails.
        Returns the call's seconds on `timer` (the benchmark's synchronizing timer)."""
        self.setup()
        start = timer()
        self.target()
        elapsed_s = timer() - start
        self._pending = False
        self.last = self._input = None
        self.outputs.clear()
        return elapsed_s

    def _read_peak(self) -> None:
        if self._pending and self._monitor is not None:
            self.peaks.append(self._monitor.sample())
        self._pending = False

    def pedantic(
        self,
        benchmark: Any,
        rounds: int,
        keep: Callable[[Any], Any] | None = None,
        min_timed_s: float = 0.0,
    ) -> int:
        """One untimed round of the timed call (`_warm_round`), a phase's energy block (devstate),
        the timed rounds (at least `rounds`, more while they would add up to less than
        `min_timed_s`: `timed_rounds`); `keep(output)` per timed round. Returns the rounds timed."""
        self._keep = keep
        # A compiled cell fails if torch.compile (re)compiles in the timed rounds (DESIGN §9).
        from benchmarks.calibration.slowdown import (  # noqa: PLC0415 - torch
            LEDGER,
            maybe_slow_region,
            waited_extra_info,
        )
        from benchmarks.harness.device.cpustate import OthersCpuMeter  # noqa: PLC0415 - psutil
        from benchmarks.harness.device.devstate import meter_for  # noqa: PLC0415 - torch
        from benchmarks.harness.device.fpstate import pin_fp_state, read_fp_state  # noqa: PLC0415
        from benchmarks.harness.runmode.compiled import (  # noqa: PLC0415 - torch
            TimedWindow,
            cuda_graphs_kept,
        )

        info = benchmark.extra_info
        target = maybe_slow_region(self.target)  # calibration runs only; else self.target
        # The rounds run in the pinned FP state whatever ran before (a compiled warmup may have
        # changed it); what they ended with is recorded, and the pin restored for what follows.
        pin_fp_state()
        others = OthersCpuMeter()  # two counter reads around the rounds, none inside them
        device_state = meter_for(params := getattr(benchmark, "params", None) or {})
        mode = info.get("compile_mode")
        graphs = bool(info.get("compile_cuda_graphs"))  # first_calls' (DESIGN §9)
        with (
            cuda_graphs_kept(graphs, mode, "timed rounds"),
            TimedWindow(info.get("cell_id", "?"), mode) as window,
        ):
            # pytest-benchmark keeps the timer the suite gave it (`collect`: the synchronizing
            # one) as `_timer`; a fake benchmark in a test has none.
            warm_s = self._warm_round(timer := getattr(benchmark, "_timer", time.perf_counter))
            rounds = timed_rounds(rounds, warm_s, min_timed_s)
            info["warm_round_s"] = warm_s  # what `min_timed_s` counted the rounds from
            device_state.block_for(info, self._run, self._prepare, call_s=warm_s, timer=timer)
            others.start()
            device_state.start()  # GPU state (and energy where no block ran) around the rounds
            waited_before_s = LEDGER.waited_s
            benchmark.pedantic(target, setup=self.setup, rounds=rounds, warmup_rounds=0)
            info.update(waited_extra_info(waited_before_s))
            info.update(device_state.stop())
            info.update(others.stop_extra_info())
        info.update(phase_energy_fields(info, round_times(benchmark), params))
        info.update(read_fp_state().as_extra_info())
        pin_fp_state()
        info.update(window.extra_info())
        window.check()
        self._read_peak()
        self._input = None
        return rounds


#: The most rounds `min_timed_s` adds: sub-millisecond rounds (a GPU decode step) would
#: otherwise run thousands, for no better median, into every history file.
MAX_TIMED_ROUNDS = 200


def timed_rounds(rounds: int, round_s: float, min_timed_s: float) -> int:
    """How many rounds to time: `rounds`, or as many as add up to `min_timed_s` seconds at
    `round_s` each (the warm round's time), whichever is more, at most `MAX_TIMED_ROUNDS`.

    Why: on a shared host the memory bandwidth moves +-15 % on a seconds scale (a 64 MB copy,
    no torch; docs/suite.md), so three 0.1-s rounds are a snapshot of one moment and two
    modules timing the same step read different moments. Rounds that span seconds each
    average over the host's level, whatever the module.
    """
    if min_timed_s <= 0 or round_s <= 0:
        return rounds
    wanted = math.ceil(min_timed_s / round_s)
    return max(rounds, min(wanted, MAX_TIMED_ROUNDS))


def rounds_text(cell: Cell) -> str:
    """The progress line's round count: "3 round(s)", or "3+ round(s), >= 5 s timed"."""
    if cell.min_timed_s <= 0:
        return f"{cell.rounds} round(s)"
    return f"{cell.rounds}+ round(s), >= {cell.min_timed_s} s timed"


def max_or_none(values: Any) -> int | None:
    """The largest of the values that are not None; None when there are none."""
    present = [v for v in values if v is not None]
    return max(present) if present else None
