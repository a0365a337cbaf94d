"""phasebench's pytest options and the machine-info hook (DESIGN §1: this file stays light).

`pytest_addoption` only works in the root conftest, so the suite's options live here; what they
do lives in `benchmarks/conftest.py` (matrix loading, cells, fixtures, history defaults).
It deliberately imports nothing heavy at module level: `pytest tests` loads this file too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent

# Process state: the suite leaves OpenMP's wait policy (OMP_WAIT_POLICY, GOMP_SPINCOUNT) as the
# user's process has it, so its figures are the ones a default torch process gets, whatever
# imported torch first (issue 33). Forcing PASSIVE cost +7-10 % on the 2-core EPYC VM and
# 1.5-2x on a 2-core Xeon VM, quiet, and saved no verdict: a neighbour on one core still made
# prefill 1.9x slower under PASSIVE, so a disturbed run must be (and is) named busy from its
# other-process CPU record whatever the policy (docs/suite.md, "Threads on a shared CPU").
# A user's setting is recorded (fingerprint `omp_wait_policy`, `gomp_spincount`; extra_info).
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
    # Noise control (docs/measurement.md). Values are parsed and checked in
    # benchmarks/suite/configure.py so that a bad one is a one-line usage error naming the option,
    # not argparse's usage dump.
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
    # Serving cells (DESIGN §13, docs/serving.md).
    group.addoption(
        "--serve-url",
        metavar="URL",
        default=None,
        help="the OpenAI-compatible server that `serve: url` cells measure, e.g. "
        "http://127.0.0.1:8000 (a vLLM or SGLang deployment of your own)",
    )
    group.addoption(
        "--serve-api",
        choices=("completions", "chat"),
        default="completions",
        help="serving cells' endpoint: /v1/completions (default) or /v1/chat/completions",
    )
    group.addoption(
        "--serve-extra-body",
        metavar="JSON",
        default=None,
        help="fields added to every serving request, e.g. '{\"ignore_eos\": true}' for vLLM",
    )
    group.addoption(
        "--serve-timeout-s",
        metavar="S",
        type=float,
        default=None,
        help="seconds one serving request may take (default: 120 s for the first request, "
        "sent alone; then 10x its E2EL per wave of max_concurrency requests, at least 30 s)",
    )
    group.addoption(
        "--serve-allow-errors",
        metavar="FRACTION",
        type=float,
        default=0.0,
        help="the share of a serving cell's requests that may fail without failing the cell "
        "(default 0: any failed request fails it; for servers that shed load on purpose)",
    )
    # H4 (issue 12): the skip itself is in benchmarks/suite/collect.py `_skip_reason`.
    group.addoption(
        "--allow-slow-dtypes",
        action="store_true",
        default=False,
        help="run CPU cells whose dtype this CPU only emulates (F.linear under half the float32 "
        "rate, e.g. bfloat16 on AVX2-only x86); by default they are skipped with the ratio",
    )


PLANNED = pytest.StashKey[list[str]]()


def planned_benchmarks(items: list[pytest.Item]) -> list[str]:
    """Sorted node ids of the benchmarks this run will run: collected, selected, not skip-marked.

    Recorded as `machine_info.phasebench.planned` so that the gate can tell a cell the matrix
    dropped (not planned: not judged) from one that failed to run (planned, absent: missing).
    A `skipif` whose conditions are all booleans counts when any is true; string conditions
    are evaluated by pytest only at run time, so such a cell stays planned.
    """
    planned = []
    for item in items:
        if "benchmark" not in getattr(item, "fixturenames", ()):
            continue
        if item.get_closest_marker("skip") is not None:
            continue
        skipif = [m for m in item.iter_markers("skipif") if m.args]
        if any(all(isinstance(a, bool) for a in m.args) and any(m.args) for m in skipif):
            continue
        planned.append(item.nodeid)
    return sorted(planned)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Remember the planned benchmarks (after -k, -m, --shard and every other deselection)."""
    session.config.stash[PLANNED] = planned_benchmarks(session.items)


def pytest_benchmark_update_commit_info(config: pytest.Config, commit_info: dict[str, Any]) -> None:
    """Record the branch CI names in `PHASEBENCH_BRANCH` (H2, issue 10).

    CI checks out a commit, a detached HEAD, which pytest-benchmark records as "(detached
    head)", so a baseline of "earlier runs on main" would never match a stored run.
    """
    del config  # part of the hook's signature
    branch = os.environ.get("PHASEBENCH_BRANCH", "").strip()
    if branch:
        commit_info["branch"] = branch


def pytest_benchmark_update_machine_info(
    config: pytest.Config, machine_info: dict[str, Any]
) -> None:
    """Add the machine fingerprint: history is grouped by it, not by the storage folder name."""
    from benchmarks.harness.device.devices import resolve_device  # noqa: PLC0415
    from benchmarks.harness.device.fingerprint import (  # noqa: PLC0415
        device_fingerprints,
        fingerprint_id,
        hardware_id,
        machine_fingerprint,
        stack,
    )
    from benchmarks.harness.device.noise import cpu_thread_state  # noqa: PLC0415
    from benchmarks.harness.roofline.dtypespeed import slow_dtypes  # noqa: PLC0415
    from benchmarks.suite.rounds import ACCELERATOR, MATRIX  # noqa: PLC0415

    accelerator = config.stash.get(ACCELERATOR, None)
    matrix = config.stash.get(MATRIX, None)
    # H4: a run without an accelerator cell is fingerprinted as the CPU, even on a GPU box; a
    # run with MLX cells records mlx and mlx-lm in its stack (DESIGN §14).
    uses_mlx = matrix is not None and any(c.engine_name == "mlx" for c in matrix.cells)
    fingerprint = machine_fingerprint(resolve_device(accelerator or "cpu"), mlx=uses_mlx)
    # update, not replace: other hooks (the partial-run flag) add their own keys
    machine_info.setdefault("phasebench", {}).update(
        {
            "schema": 1,
            "fingerprint": fingerprint,
            # kept for readers older than hardware_id (they group by it)
            "fingerprint_id": fingerprint_id(fingerprint),
            "hardware_id": hardware_id(fingerprint),
            "stack": stack(fingerprint),
            "planned": config.stash.get(PLANNED, []),
            # "I/N" with --shard: `planned` is then one shard's cells, and the reports know a
            # run is whole only when every shard 1..N is there
            "shard": config.getoption("shard", None),
            # Descriptive only (threads as pinned by --threads, OMP/MKL env, affinity mask): the
            # id already hashes torch_num_threads, the one thread figure that decides comparability.
            "threads": cpu_thread_state(),
            # H4: each device the run's cells use, fingerprinted on its own (cuda and cuda:1).
            "devices": device_fingerprints(c.device for c in matrix.cells) if matrix else {},
            # H4: 16-bit dtypes this CPU only emulates, with their F.linear rate vs float32.
            "slow_dtypes": slow_dtypes(),
        }
    )
