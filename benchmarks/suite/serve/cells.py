"""Serving cells in the suite: why one cannot run here, and the server it measures.

* `serve_cell_reason(cell, config)`: a `transformers` cell needs transformers 5.x and the
  `serve` dependency group; a `vllm` cell needs vllm; a `url` cell needs `--serve-url`. Each
  reason names the command that fixes it (the cell is skipped at collection).
* `ServerPool` (the session's `serve_pool` fixture) keeps one server up at a time: the server
  of the cell's model, device, dtype, `serve` and `continuous_batching` (its `build_key`), so
  the cells of one server (rates, concurrencies, SLOs) reuse it and cells of another stop it
  first. Continuous batching's paged cache is sized for the largest load of the matrix's cells
  on that server. A server that failed to start fails every cell of its key with the same
  reason, without another start. The log of every server goes beside the run's history file
  (`<NNNN>_<name>-serve-logs/`), else under `.phasebench/serve-logs/`.

The calibration knob reaches the server: `PHASEBENCH_CALIBRATION_SLOWDOWN` becomes `tserve`'s
`--slowdown` (docs/serving.md). Deliberately not here: load passes and records (`record`).
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
import torch
import transformers
from packaging.version import Version

from benchmarks.calibration.slowdown import slowdown_from_env
from benchmarks.harness.errors import ServeError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.matrix.dataset import read_dataset
from benchmarks.harness.model.models import MODELS_DIR, load_model_spec
from benchmarks.harness.serve.launcher import (
    Server,
    ServerCommand,
    cb_num_blocks,
    ready_timeout_s,
    transformers_command,
    vllm_command,
)
from benchmarks.harness.serve.modeldir import serving_model_dir
from benchmarks.harness.serve.models import list_models
from benchmarks.harness.serve.workload import Workload
from benchmarks.suite.configure import models_dir_option
from benchmarks.suite.rounds import MATRIX, Progress

INSTALL = "pip install --group serve (or `nox -s bench-cpu-serve`, which installs it)"
# What `transformers serve` imports (transformers[serving]'s own dependencies) and our client.
SERVE_MODULES = ("fastapi", "uvicorn", "openai", "pydantic", "aiohttp")
REPO_ROOT = Path(__file__).resolve().parents[3]


def _missing(modules: Sequence[str]) -> list[str]:
    return [name for name in modules if importlib.util.find_spec(name) is None]


def serve_cell_reason(cell: Cell, serve_url: str | None) -> str | None:
    """Why serving cell `cell` cannot run here (module docstring), or None."""
    if cell.serve is None:
        return None
    if cell.serve == "transformers":
        if Version(transformers.__version__).major < 5:
            return (
                f"transformers serve needs transformers 5.x; this environment has "
                f"{transformers.__version__} (pip install 'transformers>=5.24')"
            )
        missing = _missing(SERVE_MODULES)
    elif cell.serve == "vllm":
        if importlib.util.find_spec("vllm") is None:
            return "vllm is not installed: pip install vllm (on a CUDA machine; docs/serving.md)"
        missing = _missing(("aiohttp",))
    else:
        if not serve_url:
            return "serve: url measures an existing server: pass --serve-url http://HOST:PORT"
        missing = _missing(("aiohttp",))
    if missing:
        return f"the serve dependency group is missing {', '.join(missing)}: {INSTALL}"
    return None


@dataclass(frozen=True)
class Running:
    """The server a cell is measured on."""

    base_url: str
    model_id: str  # what `GET /v1/models` lists first
    label: str  # transformers serve, vllm serve, url
    log_path: Path | None  # None for a `url` server (not ours)
    ready_s: float | None  # start -> ready; None when reused or not ours
    started_for: str  # the cell id whose test started it
    model_dir: Path | None
    cb_num_blocks: int | None
    server: Server | None  # None for a `url` server

    def pids(self) -> tuple[int, ...]:
        """The server's processes (empty for a `url` server)."""
        return self.server.pids if self.server is not None else ()

    def dead_reason(self) -> str | None:
        """Why the server can no longer be measured (exited, or not answering), else None."""
        if self.server is not None:
            return self.server.dead_reason()
        try:
            list_models(self.base_url, timeout_s=10.0)
        except ServeError as error:
            return str(error)
        return None


_LOG_DIR = pytest.StashKey[Path]()


def log_dir(config: pytest.Config) -> Path:
    """Where this run's server logs go, decided once: `<name>-serve-logs/` beside the run's
    history file (`NNNN_<name>.json`; the number is taken only when the file is written),
    else `.phasebench/serve-logs/<time>/`."""
    if _LOG_DIR not in config.stash:
        session = getattr(config, "_benchmarksession", None)
        storage = getattr(session, "storage", None)
        name = getattr(session, "save", None) or getattr(session, "autosave", None)
        if storage is not None and name and not getattr(session, "disabled", True):
            config.stash[_LOG_DIR] = Path(storage.get(f"{name}-serve-logs"))
        else:
            stamp = time.strftime("%Y%m%d_%H%M%S")
            config.stash[_LOG_DIR] = REPO_ROOT / ".phasebench" / "serve-logs" / stamp
    return config.stash[_LOG_DIR]


def cell_workload(cell: Cell, vocab: int) -> Workload:
    """The cell's workload (`workload.Workload`): its P, N, range, prefix or dataset."""
    rows = read_dataset(Path(cell.dataset)) if cell.dataset is not None else None
    return Workload(
        prompt_len=cell.prompt_len,
        new_tokens=cell.new_tokens,
        vocab=vocab,
        range_ratio=cell.range_ratio,
        prefix_len=cell.prefix_len,
        dataset=rows,
        cell_seed=cell.seed,
    )


def _load_of(cells: Sequence[Cell]) -> tuple[int, int]:
    """(concurrent requests, positions per request) the largest of `cells` puts on a server."""
    concurrency = max((c.max_concurrency or c.num_prompts or DEFAULT_PROMPTS) for c in cells)
    positions = max(cell_workload(c, vocab=1).max_positions for c in cells)
    return concurrency, positions


DEFAULT_PROMPTS = 16  # a serving cell whose matrix does not name num_prompts


class ServerPool:
    """One server at a time, by build key (module docstring)."""

    def __init__(self, config: pytest.Config, progress: Progress) -> None:
        self.config = config
        self.progress = progress
        self.current: tuple[tuple[str, ...], Running] | None = None
        self.failed: dict[tuple[str, ...], str] = {}
        self.all_pids: list[int] = []  # every server process this session started

    def get(self, cell: Cell) -> Running:
        """The running server of `cell` (started now, or kept from the previous cell)."""
        key = cell.build_key
        if key in self.failed:
            raise ServeError(self.failed[key])
        if self.current is not None and self.current[0] == key:
            dead = self.current[1].dead_reason()
            if dead is None:
                return self.current[1]
            self.fail(cell, dead)
        self.stop()
        try:
            running = self._start(cell)
        except ServeError as error:
            self.failed[key] = f"{cell.serve} server for {cell.model}: {error}"
            raise
        self.current = (key, running)
        self.all_pids.extend(running.pids())
        return running

    def fail(self, cell: Cell, reason: str) -> NoReturn:
        """The server of `cell` is hung or dead: stop it, and fail every later cell of its key
        at once with `reason` (ServeError now), never waiting on it again."""
        message = f"{cell.serve} server for {cell.model}: {reason}"
        self.failed[cell.build_key] = message
        if self.current is not None and self.current[0] == cell.build_key:
            try:
                self.stop()
            except ServeError as error:  # a survivor: say so beside the reason
                message += f" ({error})"
        raise ServeError(message)

    def _start(self, cell: Cell) -> Running:
        url = self.config.getoption("serve_url")
        if cell.serve == "url":
            base = str(url).rstrip("/").removesuffix("/v1")
            models = list_models(base)
            if not models:
                raise ServeError(f"{base}/v1/models lists no model; is it an OpenAI server?")
            return Running(base, models[0], "url", None, None, cell.id, None, None, None)
        matrix = self.config.stash[MATRIX]
        mine = [c for c in matrix.cells if c.build_key == cell.build_key]
        concurrency, positions = _load_of(mine)
        spec = load_model_spec(cell.model, models_dir_option(self.config) or MODELS_DIR)
        self.progress(f"{cell.id}: saving or reusing the served model folder ...")
        folder = serving_model_dir(spec, getattr(torch, cell.dtype), seed=cell.seed).path
        command = self._command(cell, folder, concurrency, positions)
        log = log_dir(self.config) / f"{'-'.join(cell.build_key).replace('=', '_')}.log"
        self.progress(f"{cell.id}: starting {command.label} (log {log}) ...")
        server = Server(command, log, ready_timeout_s=ready_timeout_s())
        server.start()
        model = list_models(server.base_url)[0]
        blocks = cb_num_blocks(concurrency, positions) if cell.continuous_batching else None
        self.progress(f"{cell.id}: {command.label} ready in {server.ready_s or 0:.1f} s")
        return Running(
            server.base_url, model, command.label, log, server.ready_s, cell.id, folder, blocks,
            server,
        )  # fmt: skip

    def _command(self, cell: Cell, folder: Path, concurrency: int, positions: int) -> ServerCommand:
        if cell.serve == "vllm":
            return vllm_command(
                folder,
                dtype=cell.dtype,
                continuous_batching=bool(cell.continuous_batching),
                positions=positions,
            )
        return transformers_command(
            folder,
            device=cell.device,
            dtype=cell.dtype,
            continuous_batching=bool(cell.continuous_batching),
            concurrency=concurrency,
            positions=positions,
            slowdown=slowdown_from_env() or 0.0,
        )

    def stop(self) -> None:
        """Stop the running server (ServeError when a process survived it)."""
        if self.current is None:
            return
        _, running = self.current
        self.current = None
        if running.server is not None:
            running.server.stop()


@pytest.fixture(scope="session")
def serve_pool(pytestconfig: pytest.Config, progress: Progress) -> Iterator[ServerPool]:
    """The session's servers, one at a time; the last one stopped when the session ends."""
    pool = ServerPool(pytestconfig, progress)
    try:
        yield pool
    finally:
        pool.stop()


def serve_options(config: pytest.Config) -> dict[str, Any]:
    """`--serve-api`, `--serve-extra-body`, `--serve-timeout-s` and `--serve-allow-errors`."""
    import json  # noqa: PLC0415 - only serving runs parse it

    raw = config.getoption("serve_extra_body")
    try:
        extra = json.loads(raw) if raw else {}
    except json.JSONDecodeError as error:
        raise pytest.UsageError(
            f"--serve-extra-body {raw!r} is not JSON ({error}); e.g. '{{\"ignore_eos\": true}}'"
        ) from None
    if not isinstance(extra, dict):
        raise pytest.UsageError("--serve-extra-body must be a JSON object")
    timeout = config.getoption("serve_timeout_s")
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise pytest.UsageError(f"--serve-timeout-s {timeout} is not valid; use seconds > 0")
    allow = config.getoption("serve_allow_errors")
    if not (0.0 <= allow < 1.0):
        raise pytest.UsageError(
            f"--serve-allow-errors {allow} is not valid; use a fraction from 0 up to below 1"
        )
    return {
        "api": config.getoption("serve_api"),
        "extra_body": extra,
        "timeout_s": timeout,
        "allow_errors": allow,
    }
