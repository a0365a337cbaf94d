"""The server's guard: a small process that ends the server's whole group when it must.

`python -m benchmarks.harness.serve.guard --parent PID [--grace-s S] -- COMMAND...` starts
COMMAND in a session (and process group) of its own and waits. It ends that group -- SIGTERM,
then SIGKILL after the grace period -- when it is told to (SIGTERM, SIGINT, SIGHUP: the launcher
stopping the server, a Ctrl-C), when its parent is gone (the benchmark run was killed, even with
SIGKILL, which no `finally` survives: the guard notices within 0.1 s that it was reparented), or
when COMMAND exits on its own (a crash: its children go with it). It exits with COMMAND's exit
code, or 128 + the signal that ended COMMAND.

Standard library only, so it starts fast and cannot fail to import what the server needs. It
deliberately knows nothing of HTTP or models (`launcher` does).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

POLL_S = 0.1


def end_group(pgid: int, process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the group, wait up to `grace_s` for its leader, then SIGKILL the group."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return  # the whole group is gone
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:
            # The leader left; what it started may not have: they get no second chance.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            return


def run(command: Sequence[str], parent: int, grace_s: float) -> int:
    """Run `command` under guard (module docstring); returns the exit code to leave with."""
    told: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        told.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    process = subprocess.Popen(list(command), start_new_session=True)
    pgid = process.pid  # a new session's leader leads its own process group
    while True:
        code = process.poll()
        if code is not None:
            end_group(pgid, process, grace_s)  # anything it left behind
            return code if code >= 0 else 128 - code
        if told or os.getppid() != parent:
            end_group(pgid, process, grace_s)
            code = process.wait()
            return code if code >= 0 else 128 - code
        time.sleep(POLL_S)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `--parent PID [--grace-s S] -- COMMAND...` and run it under guard."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness.serve.guard")
    parser.add_argument("--parent", type=int, required=True, help="the pid to outlive not")
    parser.add_argument("--grace-s", type=float, default=5.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the server's command after --")
    if os.getppid() != args.parent:
        return 1  # the parent died before the guard started: start nothing
    return run(command, args.parent, args.grace_s)


if __name__ == "__main__":
    sys.exit(main())
