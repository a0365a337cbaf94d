"""`transformers serve`, with the server-side slowdown knob of calibration runs.

`python -m benchmarks.harness.serve.tserve [--slowdown F] -- MODEL [transformers serve options]`
runs transformers' own CLI (`transformers serve ...`) in this process. With `--slowdown F`
(0 <= F <= 1) every forward of the served model (`GenerationMixin` modules, the outermost call
only; device-synchronized around it on CUDA and MPS) busy-waits, after it returns, F x the
step it ends: from the previous forward's end when that came less than `CONSECUTIVE_S` before
this one began (a decode loop: the step's sampling and streaming count too, so a tiny model
whose step is mostly host work still decodes 1 + F times slower), else its own duration (a
prefill after an idle server). TTFT and TPOT then move as a 1 + F times slower server's
would: the knob that checks the gate catches a slower server (docs/serving.md). `--slowdown 0`
(every run that is not a slowed calibration run) installs nothing: the measured server is
`transformers serve` as users run it, with no hook and no device synchronize on its forwards. The
suite sets it from `PHASEBENCH_CALIBRATION_SLOWDOWN`.

It deliberately changes nothing else about the server.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
import transformers

CONSECUTIVE_S = 0.02  # host work between two decode steps is milliseconds; an idle gap is not


def _sync(module: Any) -> None:
    device = next(module.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def install_slowdown(fraction: float) -> None:
    """Slow every outermost generative forward by `fraction` of its own duration."""
    state = threading.local()

    def is_model(module: Any) -> bool:
        return isinstance(module, transformers.GenerationMixin)

    def before(module: Any, _args: Any) -> None:
        if not is_model(module):
            return
        depth = getattr(state, "depth", 0)
        state.depth = depth + 1
        if depth == 0:
            _sync(module)
            state.start = time.perf_counter()
            last = getattr(state, "last_end", None)
            state.step_from = (
                last if last is not None and state.start - last < CONSECUTIVE_S else None
            )

    def after(module: Any, _args: Any, _output: Any) -> None:
        if not is_model(module):
            return
        state.depth -= 1
        if state.depth == 0:
            _sync(module)
            end = time.perf_counter()
            step_s = end - (state.step_from if state.step_from is not None else state.start)
            until = end + fraction * step_s
            while time.perf_counter() < until:  # a busy wait: sleep is too coarse per step
                pass
            state.last_end = time.perf_counter()

    torch.nn.modules.module.register_module_forward_pre_hook(before)
    torch.nn.modules.module.register_module_forward_hook(after)


def main(argv: Sequence[str] | None = None) -> None:
    """Install the knob, then hand the rest of the command line to `transformers serve`."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness.serve.tserve")
    parser.add_argument("--slowdown", type=float, default=0.0)
    parser.add_argument("serve_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if not 0.0 <= args.slowdown <= 1.0:
        parser.error(f"--slowdown {args.slowdown} is not a fraction from 0 to 1")
    rest = args.serve_args[1:] if args.serve_args[:1] == ["--"] else args.serve_args
    if args.slowdown > 0:
        install_slowdown(args.slowdown)
    from transformers.cli.transformers import app  # noqa: PLC0415 - transformers >= 5 only

    app(["serve", *rest])


if __name__ == "__main__":
    main(sys.argv[1:])
