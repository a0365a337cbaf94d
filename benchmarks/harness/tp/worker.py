"""One rank of a tensor-parallel run, started by torchrun (`launch.run_tp` builds the command).

    torchrun --standalone --nproc-per-node N -m benchmarks.harness.tp.worker \
        --model-dir DIR --out DIR --prompt-len P --new-tokens N --batch B --rounds R \
        [--warmup W] [--dtype float32] [--device cpu|cuda] [--seed 0] \
        [--threads T] [--fail-rank R --fail-mode exit|kill|hang|raise \
        --fail-at init|load|generate|prefill|decode]

Each rank joins the process group (gloo on CPU, NCCL on CUDA with one rank per device, the
rank's `LOCAL_RANK` naming its GPU; a CPU rank first hides the host's accelerator from torch
and transformers, `cpuranks.hide_accelerator`, and records what it hid), pins its CPU threads
to `--threads`, by default `cores // world` (the ranks share the cores; more threads than that
would make them fight), and hands over to `rank.run_rank`.

Every rank writes `OUT/rank<R>.json` at each stage (atomically: a reader never sees half a
file), so a rank that dies or hangs leaves its last stage behind, and at the end its whole
record or its error (type, message, traceback tail). Rank 0 also writes `OUT/result.json`, the
run as a whole (`rank.combine`: each round the max over ranks). On SIGTERM a rank's Python
stacks go to `OUT/rank<R>.stack` (`faulthandler`, which works while the rank is blocked in a
collective), so the launcher can say where a hung rank was. The `--fail-*` flags make one rank
exit hard (`os._exit(3)`: no JSON, like a crash), SIGKILL itself (a rank killed from outside),
hang, or raise at a stage, so the launcher's failure handling is tested on real processes.

The heavy imports (transformers, the engine) come after the process group and the `init`
failure point, so a failure there is seen in the time torch takes to import.
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import os
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import torch

from benchmarks.harness.device.cpustate import allowed_cpus
from benchmarks.harness.tp.cpuranks import hide_accelerator
from benchmarks.harness.tp.files import SCHEMA, rank_file, stack_file, write_json
from benchmarks.harness.tp.timing import TorchGroup, threads_per_rank

STAGES = ("init", "load", "generate", "prefill", "decode")
FAIL_MODES = ("exit", "kill", "hang", "raise")
INJECTED_EXIT_CODE = 3


class Report:
    """This rank's record, rewritten at every stage."""

    def __init__(self, out: Path, rank: int, world: int) -> None:
        self.path = rank_file(out, rank)
        self.data: dict[str, Any] = {
            "schema": SCHEMA,
            "rank": rank,
            "world": world,
            "status": "running",
            "stage": "start",
            "pid": os.getpid(),
            "errors": [],
            "error": None,
            "stages_s": {},
        }
        self._born = psutil.Process().create_time()

    def stage(self, name: str) -> None:
        """Record that the rank entered stage `name`, and when (seconds since the process
        started: the imports before `init` included, which dominate a tiny model's run)."""
        self.data["stage"] = name
        self.data["stages_s"][name] = round(time.time() - self._born, 3)
        write_json(self.path, self.data)

    def finish(self, record: dict[str, Any]) -> None:
        """The rank's whole record; `errors` (byte mismatches and the like) decide its status."""
        self.data.update(record)
        self.data["stages_s"]["end"] = round(time.time() - self._born, 3)
        self.data["status"] = "error" if self.data["errors"] else "ok"
        write_json(self.path, self.data)

    def fail(self, error: BaseException) -> None:
        """Record an exception that ended the rank."""
        tail = traceback.format_exception(type(error), error, error.__traceback__)
        self.data["status"] = "error"
        self.data["error"] = {
            "type": type(error).__name__,
            "message": str(error).strip().splitlines()[0] if str(error).strip() else "",
            "stage": self.data["stage"],
            "traceback_tail": "".join(tail)[-2000:],
        }
        write_json(self.path, self.data)


class FailurePoint:
    """The injected failure of `--fail-*`: one rank, one stage, one way."""

    def __init__(self, args: argparse.Namespace, rank: int, report: Report) -> None:
        self.armed = args.fail_rank == rank
        self.mode: str = args.fail_mode
        self.stage: str = args.fail_at
        self.report = report

    def __call__(self, stage: str) -> None:
        """Enter `stage`: record it, then fail here if this is the injected point."""
        self.report.stage(stage)
        if not self.armed or stage != self.stage:
            return
        print(f"phasebench tp worker: injected {self.mode} at {stage}", file=sys.stderr, flush=True)
        if self.mode == "exit":
            os._exit(INJECTED_EXIT_CODE)  # a crash: no JSON, no cleanup
        if self.mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer or a user would
        if self.mode == "hang":
            while True:  # until the launcher ends the group
                time.sleep(1.0)
        raise RuntimeError(f"injected failure at stage {stage}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The worker's command line (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness.tp.worker")
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompt-len", type=int, required=True)
    parser.add_argument("--new-tokens", type=int, required=True)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)  # None: cores // world
    parser.add_argument("--collective-timeout-s", type=float, default=600.0)
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-mode", choices=FAIL_MODES, default="raise")
    parser.add_argument("--fail-at", choices=STAGES, default="init")
    return parser.parse_args(argv)


def _device_and_backend(
    device_type: str, local_rank: int, report: Report
) -> tuple[torch.device, str]:
    if device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # NCCL and transformers' mesh use the current device
        return device, "nccl"
    # Before transformers is imported (run_rank): its mesh would take the host's accelerator.
    report.data["hidden_accelerator"] = hide_accelerator()
    report.data["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    return torch.device("cpu"), "gloo"


def main(argv: Sequence[str] | None = None) -> int:
    """Run this rank; 0 when its record has no errors, 1 otherwise."""
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    args.out.mkdir(parents=True, exist_ok=True)
    # Kept open for the life of the process: faulthandler writes to its descriptor from the
    # signal handler, then chains to the default action (the rank still ends on SIGTERM).
    stacks = stack_file(args.out, rank).open("w", encoding="utf-8")
    faulthandler.register(signal.SIGTERM, file=stacks, all_threads=True, chain=True)
    report = Report(args.out, rank, world)
    enter = FailurePoint(args, rank, report)
    try:
        report.stage("init")
        device, backend = _device_and_backend(args.device, local_rank, report)
        threads = args.threads or threads_per_rank(len(allowed_cpus()), world)
        if threads < 1:
            raise RuntimeError(f"{len(allowed_cpus())} cores cannot give {world} ranks a thread")
        torch.set_num_threads(threads)
        report.data.update({"backend": backend, "device": str(device), "threads": threads})
        torch.distributed.init_process_group(
            backend,
            timeout=datetime.timedelta(seconds=args.collective_timeout_s),
            device_id=device if device.type == "cuda" else None,
        )
        group = TorchGroup()
        enter("init")  # the injected failure point: in the group, before the first collective
        group.barrier()
        # Imported here, not at the top: transformers takes seconds to import, and a failure
        # before this point should show in the time torch takes (module docstring).
        from benchmarks.harness.tp.rank import run_rank  # noqa: PLC0415

        record = run_rank(args, group, device, backend, enter)
        report.finish(record)
        return 0 if not report.data["errors"] else 1
    except BaseException as error:  # every failure, KeyboardInterrupt included, is recorded
        report.fail(error)
        if isinstance(error, KeyboardInterrupt):
            raise
        return 1


if __name__ == "__main__":
    code = main()
    if code == 0 and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()  # only on success: a failed peer may hang it
    sys.exit(code)
