"""The CPU probes' own process: `python -m benchmarks.harness.probe.worker [--threads N]`.

The code under test may set process-wide state (`torch.set_num_threads`,
`torch.set_default_dtype`, flush-to-zero, ...); a probe timed in its process would move with it,
and the reports would then subtract the code's own regression as "the host". This process
imports only torch, psutil and the probe kernels and timing (never transformers, the suite or
the code under test) and fixes its settings once at start: `--threads` (else the default torch
picks in a fresh process under the environment it was started with), flush-denormal off, and
float32 operands (`kernels.DTYPE`, explicit in every kernel).

Protocol, one JSON object per line: on start it prints its settings (`{"op": "info",
"threads", "dtype", "default_dtype", "flush_denormal", "torch", "pid", "kinds"}`, each observed,
not assumed); then it answers `{"op": "point"}` with `{"op": "point", "calls_s": {kind:
[seconds, ...]}}` (`timing.time_calls` of each kernel), `{"op": "info"}` with its settings
again, and anything it cannot answer with `{"op": "error", "error": "..."}`. It exits on
`{"op": "stop"}`, when its stdin closes (the parent ended, whatever way) or when its parent
process is gone. The parent's side is `client.ProbeWorker`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

import torch

from benchmarks.harness.device.fpstate import pin_fp_state, read_fp_state
from benchmarks.harness.probe.kernels import DTYPE, ProbeKernel, cpu_kernels
from benchmarks.harness.probe.timing import time_calls

#: How often the worker checks that its parent is still there (stdin's end is the first sign;
#: this catches a parent whose pipe end was inherited by a forked process that outlived it).
PARENT_CHECK_S = 5.0


def settings(probes: Sequence[ProbeKernel]) -> dict[str, Any]:
    """The worker's settings, read back from torch and the FPU (the `info` answer)."""
    return {
        "op": "info",
        "threads": torch.get_num_threads(),
        "dtype": str(DTYPE).removeprefix("torch."),
        "default_dtype": str(torch.get_default_dtype()).removeprefix("torch."),
        "flush_denormal": read_fp_state().flush_denormal,
        "torch": torch.__version__,
        "pid": os.getpid(),
        "kinds": [
            {
                "kind": k.kind,
                "device": str(k.device),
                "description": k.description,
                "dtype": str(k.dtype).removeprefix("torch."),
            }
            for k in probes
        ],
    }


def answer(request: Any, probes: Sequence[ProbeKernel]) -> dict[str, Any] | None:
    """The reply to one request; None for `stop`."""
    op = request.get("op") if isinstance(request, dict) else None
    if op == "point":
        return {"op": "point", "calls_s": {k.kind: time_calls(k) for k in probes}}
    if op == "info":
        return settings(probes)
    if op == "stop":
        return None
    return {"op": "error", "error": f"unknown request {request!r}"}


def _watch_parent() -> None:
    parent = os.getppid()
    while True:
        time.sleep(PARENT_CHECK_S)
        if os.getppid() != parent:  # re-parented: the run is gone
            os._exit(0)


def serve(requests: TextIO, replies: TextIO, probes: Sequence[ProbeKernel]) -> int:
    """Answer `requests` line by line until `stop` or their end (module docstring)."""

    def send(reply: dict[str, Any]) -> None:
        replies.write(json.dumps(reply) + "\n")
        replies.flush()

    send(settings(probes))
    while line := requests.readline():
        if not line.strip():
            continue
        try:
            reply = answer(json.loads(line), probes)
        except Exception as error:  # any failure is the parent's to record
            reply = {"op": "error", "error": f"{type(error).__name__}: {error}"}
        if reply is None:
            break
        send(reply)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Fix the settings, then serve the parent over stdin/stdout (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness.probe.worker")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args(argv)
    # The replies get a private copy of stdout; fd 1 goes to stderr, so a library that prints
    # cannot break the protocol.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    # Ctrl-C reaches the whole process group; the parent decides when this process ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, daemon=True, name="parent-watch").start()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    # Off, as in a fresh process; pinned before the first parallel region, so torch's worker
    # threads start with it too (`device.fpstate`).
    pin_fp_state(False)
    probes = cpu_kernels()
    try:
        return serve(sys.stdin, replies, probes)
    except BrokenPipeError:  # the parent is gone: nobody to answer
        return 0


if __name__ == "__main__":
    sys.exit(main())
