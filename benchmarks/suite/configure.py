"""Session set-up of the benchmark suite: `pytest_configure` and `pytest_report_header`.

* `pytest_configure` loads `--matrix` (a broken matrix is a `pytest.UsageError`: exit 4 before
  anything runs), parses `--shard`, pins `--threads`, checks the `--warmup-until-stable`
  options, and sets the history defaults: autosave with raw rounds unless the user chose where
  to save, and no history at all under `--profile`. What it decides goes in `config.stash`
  under the keys defined here. Last, it starts the CPU host probes' own process
  (`benchmarks.suite.hostprobe.start_worker`) in a run that saves history.
* `pytest_report_header` says which matrix runs, how much of it and where its history goes.

The options themselves are declared in the root conftest.py; the hooks are registered by
`benchmarks/conftest.py`, which imports them. Deliberately not here: collection
(`benchmarks.suite.collect`), fixtures, measuring.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from pytest_benchmark.utils import get_tag

from benchmarks.harness.device.devices import device_unavailable_reason
from benchmarks.harness.device.noise import WarmupPolicy, pin_cpu_threads
from benchmarks.harness.errors import PhasebenchError
from benchmarks.harness.matrix.cells import Matrix
from benchmarks.harness.matrix.parse import load_matrix
from benchmarks.harness.matrix.shard import parse_shard, select_shard
from benchmarks.harness.roofline.peaks import Peaks
from benchmarks.suite.hostprobe import start_worker
from benchmarks.suite.partial import PartialHistory
from benchmarks.suite.rounds import ACCELERATOR, MATRIX, THREADS

SHARD_IDS = pytest.StashKey["frozenset[str] | None"]()
PEAKS: pytest.StashKey[dict[tuple[str, str], Peaks]] = pytest.StashKey()
# --warmup-until-stable's policy (min_rounds is set per cell from its warmup); None when off.
STABLE = pytest.StashKey["WarmupPolicy | None"]()
PARTIAL = pytest.StashKey[PartialHistory]()


def pytest_configure(config: pytest.Config) -> None:
    """Load the matrix and the shard, and default to saving history (before pytest-benchmark)."""
    models_dir = models_dir_option(config)
    try:
        matrix = load_matrix(Path(config.getoption("matrix")), models_dir=models_dir)
        shard = config.getoption("shard")
        selected = None
        if shard:
            index, count = parse_shard(shard)
            selected = frozenset(select_shard(matrix.ids, index, count))
    except PhasebenchError as error:
        raise pytest.UsageError(str(error)) from None
    config.stash[MATRIX] = matrix
    config.stash[SHARD_IDS] = selected
    # The fingerprint describes the accelerator this run measures: the first one the matrix
    # names that this machine has (a CUDA cell skipped on a Mac must not be fingerprinted).
    config.stash[ACCELERATOR] = next(
        (
            c.device
            for c in matrix.cells
            if c.device != "cpu" and device_unavailable_reason(c.device) is None
        ),
        None,
    )
    config.stash[PEAKS] = {}
    config.stash[STABLE] = _noise_control(config, matrix)
    config.stash[THREADS] = torch.get_num_threads()  # after --threads: what every cell runs with
    _history_defaults(config)
    config.stash[PARTIAL] = PartialHistory(config)
    # The CPU host probes' own process, before the test modules and the models are imported.
    start_worker(config)


def _noise_control(config: pytest.Config, matrix: Matrix) -> WarmupPolicy | None:
    """Pin `--threads` now, before any model is built; check and return the until-stable policy."""
    threads = config.getoption("threads")
    if threads is not None:
        count = _whole_number(threads, "--threads", 1, "the torch intra-op threads, e.g. 4")
        pin_cpu_threads(count)
    if not config.getoption("warmup_until_stable"):
        return None
    cv_text = config.getoption("stable_cv")
    try:
        cv_bound = float(cv_text)
    except ValueError:
        cv_bound = math.nan
    if not (math.isfinite(cv_bound) and cv_bound > 0):
        raise pytest.UsageError(
            f"--stable-cv {cv_text!r} is not a number above 0; pass the coefficient of "
            "variation the warmup must get under, e.g. --stable-cv 0.02"
        )
    window = _whole_number(
        config.getoption("stable_window"),
        "--stable-window",
        2,
        "a CV needs at least two generations, e.g. 3",
    )
    cap = _whole_number(
        config.getoption("stable_max"),
        "--stable-max",
        window,
        f"the cap must hold one --stable-window of {window} generations",
    )
    most = max(matrix.cells, key=lambda c: c.warmup)
    if most.warmup > cap:
        raise pytest.UsageError(
            f"--stable-max {cap} is below the warmup {most.warmup} of {matrix.path.name} "
            f"(cell {most.id}); raise --stable-max to at least {most.warmup}"
        )
    return WarmupPolicy(cv_bound=cv_bound, window=window, min_rounds=1, max_rounds=cap)


def _whole_number(text: str, option: str, least: int, hint: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = least - 1
    if number < least:
        raise pytest.UsageError(f"{option} {text!r} is not a whole number >= {least}; {hint}")
    return number


def stable_policy_label(policy: WarmupPolicy) -> str:
    """How `extra_info.warmup_policy` names an until-stable warmup."""
    return f"until-stable:cv<{policy.cv_bound:g},k={policy.window},max={policy.max_rounds}"


def models_dir_option(config: pytest.Config) -> Path | None:
    value = config.getoption("models_dir")
    return None if value is None else Path(value)


def _history_defaults(config: pytest.Config) -> None:
    # pytest-benchmark reads these options in its own (trylast) pytest_configure, after this one.
    option = config.option
    if config.getoption("profile"):
        # A profiler distorts every timing it observes: such a run must not become history.
        option.benchmark_autosave = False
        option.benchmark_save = None
        return
    if not option.benchmark_save and not option.benchmark_autosave:
        # DESIGN §5: a plain `pytest benchmarks` saves history, named as --benchmark-autosave
        # names it (commit id and time).
        option.benchmark_autosave = get_tag()  # type: ignore[no-untyped-call]
    option.benchmark_save_data = True  # the raw rounds feed the reports' noise model


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say which matrix runs, how much of it, and where its history goes."""
    matrix = config.stash[MATRIX]
    lines = [
        f"phasebench: matrix {matrix.path}: {len(matrix.cells)} cells "
        f"({matrix.excluded} excluded), warmup {matrix.warmup}, rounds {matrix.rounds}"
    ]
    shard = config.getoption("shard")
    selected = config.stash[SHARD_IDS]
    if shard and selected is not None:
        lines.append(f"phasebench: shard {shard}: {len(selected)} of {len(matrix.cells)} cells")
    if config.getoption("threads") is not None:
        pinned = torch.get_num_threads()
        lines.append(f"phasebench: torch intra-op threads pinned to {pinned} (--threads)")
    stable = config.stash[STABLE]
    if stable is not None:
        lines.append(
            f"phasebench: warmup until stable: CV < {stable.cv_bound:g} over the last "
            f"{stable.window} generations, at least each cell's warmup, at most "
            f"{stable.max_rounds}"
        )
    profile = config.getoption("profile")
    if profile:
        lines.append(
            f"phasebench: --profile {profile}: timings are NOT saved to history (a profiler "
            "distorts them); traces go to that directory"
        )
    elif config.option.benchmark_autosave or config.option.benchmark_save:
        storage = config.option.benchmark_storage
        lines.append(f"phasebench: history: {storage} (autosave with raw rounds)")
    return lines
