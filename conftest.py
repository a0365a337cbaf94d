"""phasebench's pytest options and the machine-info hook (DESIGN §1: this file stays light).

`pytest_addoption` only works in the root conftest, so the suite's options live here; what they
do lives in `benchmarks/conftest.py` (matrix loading, cells, fixtures, history defaults).
It deliberately imports nothing heavy at module level: `pytest tests` loads this file too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent
DEFAULT_MATRIX = ROOT / "matrix" / "cpu.yaml"
# --warmup-until-stable defaults: CV under 2 % over the last 3 generations, at most 10.
STABLE_CV = 0.02
STABLE_WINDOW = 3
STABLE_MAX = 10


def pytest_addoption(parser: pytest.Parser) -> None:
    """The suite's options: which matrix, which model files, which shard, profiling, noise."""
    group = parser.getgroup("phasebench", "phasebench benchmark suite")
    group.addoption(
        "--matrix",
        metavar="PATH",
        default=str(DEFAULT_MATRIX),
        help="matrix YAML file to run (default: matrix/cpu.yaml)",
    )
    group.addoption(
        "--models-dir",
        metavar="DIR",
        default=None,
        help="directory of model files the matrix names (default: matrix/models)",
    )
    group.addoption(
        "--shard",
        metavar="I/N",
        default=None,
        help="run only shard I of N (1-based), split deterministically over cell ids",
    )
    group.addoption(
        "--peaks",
        choices=("measured", "refresh", "table", "none"),
        default="measured",
        help="device peaks for roofline percentages: measured once per machine, device and "
        "dtype and cached in .phasebench/peaks.json (default); refresh: measure again and keep "
        "the higher figures; a datasheet table; or none",
    )
    group.addoption(
        "--profile",
        metavar="DIR",
        default=None,
        help="write a torch.profiler trace per generate cell into DIR; timings are then "
        "not saved to history (the profiler distorts them)",
    )
    # Noise control (docs/measurement.md). Values are parsed and checked in benchmarks/conftest.py
    # so that a bad one is a one-line usage error naming the option, not argparse's usage dump.
    group.addoption(
        "--threads",
        metavar="N",
        default=None,
        help="pin torch's intra-op CPU threads to N for the whole run (default: torch's own "
        "choice); recorded in machine_info and part of the fingerprint id",
    )
    group.addoption(
        "--warmup-until-stable",
        action="store_true",
        default=False,
        help="warm each cell with whole generations until the CV of the last --stable-window "
        "generation times is under --stable-cv, at least the matrix's warmup and at most "
        "--stable-max generations",
    )
    group.addoption(
        "--stable-cv",
        metavar="CV",
        default=str(STABLE_CV),
        help=f"with --warmup-until-stable: the CV bound (default {STABLE_CV})",
    )
    group.addoption(
        "--stable-window",
        metavar="K",
        default=str(STABLE_WINDOW),
        help=f"with --warmup-until-stable: generations in the CV window (default {STABLE_WINDOW})",
    )
    group.addoption(
        "--stable-max",
        metavar="M",
        default=str(STABLE_MAX),
        help=f"with --warmup-until-stable: the most warmup generations (default {STABLE_MAX})",
    )


def pytest_benchmark_update_machine_info(
    config: pytest.Config, machine_info: dict[str, Any]
) -> None:
    """Add the machine fingerprint: history is grouped by it, not by the storage folder name."""
    from benchmarks.harness.devices import resolve_device  # noqa: PLC0415
    from benchmarks.harness.fingerprint import fingerprint_id, machine_fingerprint  # noqa: PLC0415
    from benchmarks.harness.noise import cpu_thread_state  # noqa: PLC0415
    from benchmarks.suite import ACCELERATOR  # noqa: PLC0415

    accelerator = config.stash.get(ACCELERATOR, None)
    fingerprint = machine_fingerprint(None if accelerator is None else resolve_device(accelerator))
    machine_info["phasebench"] = {
        "schema": 1,
        "fingerprint": fingerprint,
        "fingerprint_id": fingerprint_id(fingerprint),
        # Descriptive only (threads as pinned by --threads, OMP/MKL env, affinity mask): the id
        # already hashes torch_num_threads, the one thread figure that decides comparability.
        "threads": cpu_thread_state(),
    }
