"""A server that starts, answers and stops: its command, its process group, its readiness, its log.

`Server(command, log_path)` is a context manager. Entering it picks a free loopback port,
starts the command under `guard` (the server in a session and process group of its own, its
output appended to `log_path`), and waits until `GET /v1/models` answers 200 within
`ready_timeout_s`; a server that exits first, or does not answer in time, is stopped and raises
`ServeError` naming its exit code and the log's last lines. Leaving it (success, failure, a
timeout, Ctrl-C) stops the server: SIGTERM to the guard, which ends the group; then every
process of the server's tree the launcher ever saw (psutil, which checks a pid's start time
before signalling) gets SIGTERM and SIGKILL; `survivors` must be empty. When the benchmark
run itself is killed, the guard ends the group (`guard`).

The commands: `transformers_command` (`transformers serve` through `tserve`, with the model,
device, dtype and continuous batching of the cell; `--cb-num-blocks` sizes the paged cache for
the cell's load, since by default it claims 90 % of free memory -- on a CPU host, its RAM),
`vllm_command` (`vllm serve`; continuous batching off is `--max-num-seqs 1`) and `fake_command`
(`fake`). Servers bind 127.0.0.1 only. It deliberately sends no load (`client`).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import psutil

from benchmarks.harness.device.proctree import ProcessTree
from benchmarks.harness.errors import ServeError

REPO_ROOT = Path(__file__).resolve().parents[3]
HOST = "127.0.0.1"
GRACE_S = 5.0
_POLL_S = 0.2
_LOG_TAIL_LINES = 12
# Offline and quiet: no hub look-up, no update check (a server must load what is on disk).
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_UPDATE_CHECK": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
# transformers' continuous batching: tokens per page (its default 256).
CB_PAGE_TOKENS = 256


@dataclass(frozen=True)
class ServerCommand:
    """How to start one server: its argv with `{port}` where the port goes, and its env."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    label: str = "server"

    def with_port(self, port: int) -> list[str]:
        """The argv with the port filled in."""
        return [part.replace("{port}", str(port)) for part in self.argv]


def cb_num_blocks(max_concurrency: int, positions: int) -> int:
    """Paged-cache blocks for `max_concurrency` requests of `positions` (P + N) each, with one
    spare per request (a request's last page may straddle a boundary)."""
    return max_concurrency * (math.ceil(positions / CB_PAGE_TOKENS) + 1)


def transformers_command(
    model_dir: Path,
    *,
    device: str,
    dtype: str,
    continuous_batching: bool,
    concurrency: int,
    positions: int,
    slowdown: float = 0.0,
    python: str = sys.executable,
) -> ServerCommand:
    """`transformers serve` of `model_dir` (module docstring), through `tserve`'s knob."""
    argv = [
        python, "-m", "benchmarks.harness.serve.tserve", "--slowdown", repr(slowdown), "--",
        str(model_dir), "--device", device, "--dtype", dtype,
        "--host", HOST, "--port", "{port}", "--log-level", "warning",
    ]  # fmt: skip
    if continuous_batching:
        argv += ["--continuous-batching", "--cb-num-blocks"]
        argv += [str(cb_num_blocks(concurrency, positions))]
    return ServerCommand(tuple(argv), OFFLINE_ENV, "transformers serve")


def vllm_command(
    model_dir: Path,
    *,
    dtype: str,
    continuous_batching: bool,
    positions: int,
    python: str = sys.executable,
) -> ServerCommand:
    """`vllm serve` of `model_dir`; without continuous batching, one sequence at a time."""
    argv = [
        python, "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir), "--dtype", dtype,
        "--host", HOST, "--port", "{port}", "--max-model-len", str(positions),
        "--no-enable-prefix-caching",
    ]  # fmt: skip
    # No `--disable-log-requests`: vLLM deprecated it (#21739) and removed it (#29402), and
    # request logging is off by default since; vllm is unpinned, so an old flag kills the cell.
    if not continuous_batching:
        argv += ["--max-num-seqs", "1"]
    return ServerCommand(tuple(argv), OFFLINE_ENV, "vllm serve")


# The one model the fake server lists (here, not in `fake`, which needs aiohttp to import).
FAKE_MODEL_ID = "phasebench-fake"


def fake_command(args: Sequence[str] = (), python: str = sys.executable) -> ServerCommand:
    """The scripted fake server (`fake`) with its options."""
    argv = [python, "-m", "benchmarks.harness.serve.fake", "--port", "{port}", *args]
    return ServerCommand(tuple(argv), {}, "fake server")


def free_port() -> int:
    """A loopback port nothing listens on now (another process may take it: `Server` retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


# Readiness and liveness polls go straight to loopback: an HTTP_PROXY in the environment (a
# corporate runner) would otherwise receive them and readiness would wait out its timeout.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def models_ready(base_url: str, timeout_s: float = 1.0) -> bool:
    """Whether `GET /v1/models` answers 200 now (never through a proxy)."""
    try:
        with _DIRECT.open(base_url + "/v1/models", timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def listens_on(processes: Sequence[psutil.Process], port: int) -> bool | None:
    """Whether one of `processes` listens on `port`; None when the OS let us read none of
    their sockets (then the caller cannot tell whose server answers)."""
    readable = False
    for process in processes:
        try:
            connections = process.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
        readable = True
        for conn in connections:
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                return True
    return False if readable else None


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log, joined with ' | ' (for one-line errors)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(empty log)"


class Server:
    """One server's life (module docstring)."""

    def __init__(
        self,
        command: ServerCommand,
        log_path: Path,
        *,
        ready_timeout_s: float = 300.0,
        grace_s: float = GRACE_S,
        attempts: int = 3,
    ) -> None:
        self.command = command
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.grace_s = grace_s
        self.attempts = attempts
        self.port: int | None = None
        self.ready_s: float | None = None  # start -> first 200 from /v1/models
        self.survivors: tuple[int, ...] = ()
        self._guard: psutil.Popen | None = None
        self._tree: ProcessTree | None = None  # the guard and everything under it

    @property
    def base_url(self) -> str:
        """http://127.0.0.1:PORT (ServeError before the server started)."""
        if self.port is None:
            raise ServeError(f"{self.command.label} has not been started")
        return f"http://{HOST}:{self.port}"

    @property
    def pids(self) -> tuple[int, ...]:
        """Every process of the server's tree seen so far (the guard first)."""
        return () if self._tree is None else tuple(self._tree.seen)

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the server and wait until it answers (module docstring); ServeError if not."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, self.attempts + 1):
            self.port = free_port()
            try:
                self._spawn()
                self._wait_ready()
                return
            except ServeError as error:
                self.stop()
                in_use = "address already in use" in log_tail(self.log_path, 40).lower()
                if not in_use or attempt == self.attempts:
                    raise ServeError(str(error)) from None
            except BaseException:
                self.stop()  # Ctrl-C while waiting: nothing is left behind
                raise

    def _spawn(self) -> None:
        env = {**os.environ, **self.command.env}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        guard = [
            sys.executable, "-m", "benchmarks.harness.serve.guard",
            "--parent", str(os.getpid()), "--grace-s", str(self.grace_s), "--",
            *self.command.with_port(self.port or 0),
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            header = f"\n=== {self.command.label}: {' '.join(guard)}\n"
            log.write(header.encode())
            log.flush()
            self._guard = psutil.Popen(
                guard, cwd=REPO_ROOT, env=env, stdout=log, stderr=log, stdin=None,
                start_new_session=True,
            )  # fmt: skip
        self._tree = ProcessTree(self._guard.pid)
        self._start_s = time.perf_counter()

    def _remember(self) -> None:
        if self._tree is not None:
            self._tree.poll()

    def _wait_ready(self) -> None:
        assert self._guard is not None
        deadline = self._start_s + self.ready_timeout_s
        while True:
            self._remember()
            code = self._guard.poll()
            if code is not None:
                raise ServeError(
                    f"{self.command.label} exited with code {code} before answering "
                    f"GET /v1/models; its log ({self.log_path}) ends: {log_tail(self.log_path)}"
                )
            # `free_port` released the port before the server bound it: a 200 counts only when
            # our own tree holds the listening socket, never another run's server on that port.
            answered = models_ready(self.base_url)
            ours = listens_on(self.alive(), self.port or 0) if answered else None
            if answered and ours is not False:
                self.ready_s = time.perf_counter() - self._start_s
                self._remember()
                return
            if time.perf_counter() > deadline:
                other = (
                    f"another process answers on port {self.port}, not ours; " if answered else ""
                )
                raise ServeError(
                    f"{self.command.label} did not answer GET /v1/models within "
                    f"{self.ready_timeout_s:g} s ({other}raise PHASEBENCH_SERVE_READY_TIMEOUT_S "
                    f"for a large model); its log ({self.log_path}) ends: "
                    f"{log_tail(self.log_path)}"
                )
            time.sleep(_POLL_S)

    def alive(self) -> list[psutil.Process]:
        """The processes of the server's tree still running."""
        if self._tree is None:
            return []
        self._tree.poll()
        return self._tree.alive()

    def dead_reason(self, timeout_s: float = 10.0) -> str | None:
        """Why the started server can no longer be measured (it exited, or stopped answering
        `GET /v1/models` within `timeout_s`), with its log's last lines; None while it serves.
        Checked between load passes and cells, so a crashed server fails its cells at once."""
        if self._guard is None:
            return f"{self.command.label} is not running"
        code = self._guard.poll()
        if code is not None:
            return (
                f"{self.command.label} exited with code {code} during the run; its log "
                f"({self.log_path}) ends: {log_tail(self.log_path)}"
            )
        if not models_ready(self.base_url, timeout_s=timeout_s):
            with contextlib.suppress(psutil.TimeoutExpired):  # a crash: its guard exits soon
                code = self._guard.wait(timeout=2.0)
            if code is not None:
                return (
                    f"{self.command.label} exited with code {code} during the run; its log "
                    f"({self.log_path}) ends: {log_tail(self.log_path)}"
                )
            return (
                f"{self.command.label} stopped answering GET /v1/models (no 200 within "
                f"{timeout_s:g} s); its log ({self.log_path}) ends: {log_tail(self.log_path)}"
            )
        return None

    def stop(self) -> None:
        """Stop the server and everything it started (module docstring); idempotent."""
        if self._guard is None:
            return
        self._remember()
        guard, self._guard = self._guard, None
        if guard.poll() is None:
            guard.terminate()  # the guard ends the server's group, SIGTERM then SIGKILL
            with contextlib.suppress(psutil.TimeoutExpired):
                guard.wait(timeout=2 * self.grace_s + 2)
        if self._tree is not None:
            self._tree.end(self.grace_s)  # what the guard missed (it was killed, or it hung)
        self.survivors = tuple(p.pid for p in self.alive())
        if self.survivors:
            raise ServeError(
                f"{self.command.label}: processes {list(self.survivors)} survived SIGKILL; "
                "end them by hand (kill -9) before the next run"
            )


def ready_timeout_s(environ: Mapping[str, str] | None = None, default: float = 300.0) -> float:
    """`PHASEBENCH_SERVE_READY_TIMEOUT_S` (seconds a server may take to answer), else `default`."""
    raw = (os.environ if environ is None else environ).get("PHASEBENCH_SERVE_READY_TIMEOUT_S")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ServeError(
            f"PHASEBENCH_SERVE_READY_TIMEOUT_S={raw!r} is not a number of seconds > 0; e.g. 600"
        )
    return value
