"""The parent's handle on the CPU probes' own process (`worker`): start, ask, stop.

`ProbeWorker(threads)` starts `python -m benchmarks.harness.probe.worker` at once (the earlier,
the less of the run's process state there is to inherit: only the environment is) and returns
without waiting for it; `info()` waits for its start-up line (torch's import takes seconds),
`point()` asks for one probe point. Every wait has a timeout (`START_TIMEOUT_S`,
`POINT_TIMEOUT_S`): a hung or dead worker, or one that cannot be started, raises `WorkerError`
with the reason (its stderr's tail), so the caller records it and stops probing instead of
hanging or crashing the run. A thread reads the worker's replies into a queue, so a wait is a
`Queue.get` with a timeout on any platform. `close()` closes the worker's stdin (it exits on
that), waits briefly and kills it otherwise.

Deliberately not here: what the worker runs (`worker`, `kernels`), when to probe (the suite).
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

#: The repository root: `python -m benchmarks...` resolves from there.
ROOT = Path(__file__).resolve().parents[3]
MODULE = "benchmarks.harness.probe.worker"
#: Seconds for the worker's start-up line (a cold torch import on a slow disk takes tens).
START_TIMEOUT_S = 180.0
#: Seconds for one point's answer (a point takes well under a second on a 2-core VM).
POINT_TIMEOUT_S = 60.0
#: Seconds `close()` waits for the worker to exit before it kills it.
CLOSE_TIMEOUT_S = 5.0


class WorkerError(RuntimeError):
    """The worker did not answer as it should: the message says how (for the run's record)."""


@dataclass(frozen=True)
class WorkerKind:
    """One probe the worker times: its kind, device, description and operands' dtype."""

    kind: str
    device: str
    description: str
    dtype: str


@dataclass(frozen=True)
class WorkerInfo:
    """The worker's settings as it read them back (`worker.settings`)."""

    threads: int
    dtype: str
    default_dtype: str
    flush_denormal: bool
    torch: str
    pid: int
    kinds: tuple[WorkerKind, ...]

    @classmethod
    def parse(cls, reply: dict[str, Any]) -> WorkerInfo:
        """From the `info` line; WorkerError when a field is missing or mistyped."""
        try:
            kinds = tuple(
                WorkerKind(str(k["kind"]), str(k["device"]), str(k["description"]), str(k["dtype"]))
                for k in reply["kinds"]
            )
            return cls(
                threads=int(reply["threads"]),
                dtype=str(reply["dtype"]),
                default_dtype=str(reply["default_dtype"]),
                flush_denormal=bool(reply["flush_denormal"]),
                torch=str(reply["torch"]),
                pid=int(reply["pid"]),
                kinds=kinds,
            )
        except (KeyError, TypeError, ValueError) as error:
            raise WorkerError(f"the probe worker's settings are malformed: {reply!r}") from error


def worker_command(threads: int | None) -> list[str]:
    """The worker's command line: this interpreter, `-m` the worker, `--threads` when fixed."""
    return [sys.executable, "-m", MODULE, *(["--threads", str(threads)] if threads else [])]


class ProbeWorker:
    """A running worker (module docstring); `command` replaces the real one in tests."""

    def __init__(
        self,
        threads: int | None = None,
        *,
        command: Sequence[str] | None = None,
        start_timeout_s: float | None = None,
        point_timeout_s: float | None = None,
    ) -> None:
        # The module's figures read now (not as defaults): a test's plugin may lower them.
        self.start_timeout_s = START_TIMEOUT_S if start_timeout_s is None else start_timeout_s
        self.point_timeout_s = POINT_TIMEOUT_S if point_timeout_s is None else point_timeout_s
        self._replies: queue.Queue[str | None] = queue.Queue()
        self._info: WorkerInfo | None = None
        self._error: str | None = None
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        try:
            self._process = subprocess.Popen(
                list(command) if command is not None else worker_command(threads),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                cwd=ROOT,
                text=True,
                encoding="utf-8",
            )
        except OSError as error:
            self._error = f"the probe worker could not be started: {error}"
            return
        self._reader = threading.Thread(target=self._read, daemon=True, name="probe-worker-reader")
        self._reader.start()

    @property
    def pid(self) -> int | None:
        """The worker's process id (None when it could not be started)."""
        return None if self._process is None else self._process.pid

    def _read(self) -> None:
        assert self._process is not None
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._replies.put(line)
        self._replies.put(None)  # its stdout closed: it exited

    def _reply(self, timeout_s: float, what: str) -> dict[str, Any]:
        if self._error is not None:
            raise WorkerError(self._error)
        try:
            line = self._replies.get(timeout=timeout_s)
        except queue.Empty:
            self._fail(f"the probe worker gave no {what} in {timeout_s:g} s")
        if line is None:
            self._fail(f"the probe worker exited before its {what}")
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            self._fail(f"the probe worker wrote {line.strip()[:200]!r} instead of its {what}")
        if not isinstance(reply, dict) or reply.get("op") == "error":
            self._fail(f"the probe worker failed its {what}: {reply!r}"[:400])
        return reply

    def _fail(self, reason: str) -> NoReturn:
        code = self._stop()
        tail = self._stderr_tail()
        self._stderr.close()
        self._error = reason + (f" (exit code {code})" if code is not None else "")
        self._error += f"; its stderr ends: {tail}" if tail else ""
        raise WorkerError(self._error)

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            text = self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):  # closed
            return ""
        return " | ".join(text.strip().splitlines()[-3:])[-500:]

    def _send(self, request: dict[str, Any]) -> None:
        if self._error is not None:
            raise WorkerError(self._error)
        assert self._process is not None
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
        except (OSError, ValueError):  # a broken pipe: it exited
            self._fail(f"the probe worker exited before the {request.get('op')} request")

    def info(self) -> WorkerInfo:
        """Its start-up settings (waits for them the first time, up to `start_timeout_s`)."""
        if self._info is None:
            self._info = WorkerInfo.parse(self._reply(self.start_timeout_s, "start-up line"))
        return self._info

    def ask_info(self) -> WorkerInfo:
        """Its settings read back now (an `info` request)."""
        self.info()
        self._send({"op": "info"})
        return WorkerInfo.parse(self._reply(self.point_timeout_s, "info"))

    def point(self) -> dict[str, list[float]]:
        """One probe point: each kind's calls' seconds (waits up to `point_timeout_s`)."""
        self.info()
        self._send({"op": "point"})
        calls = self._reply(self.point_timeout_s, "point").get("calls_s")
        if not isinstance(calls, dict):
            self._fail(f"the probe worker's point has no calls_s: {calls!r}"[:400])
        return {str(kind): [float(s) for s in seconds] for kind, seconds in calls.items()}

    def close(self) -> int | None:
        """Stop the worker (module docstring); its exit code (None if it never started)."""
        code = self._stop()
        self._stderr.close()
        if self._error is None:
            self._error = "the probe worker was stopped"
        return code

    def _stop(self) -> int | None:
        process = self._process
        if process is None:
            return None
        if process.returncode is None:
            try:
                if process.stdin is not None:
                    process.stdin.close()  # it exits when its stdin ends
            except OSError:  # a broken pipe: it is gone already
                pass
            try:
                process.wait(CLOSE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(CLOSE_TIMEOUT_S)  # it ends at the worker's end of output
        if process.stdout is not None and (self._reader is None or not self._reader.is_alive()):
            process.stdout.close()
        return process.returncode

    def __enter__(self) -> ProbeWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
