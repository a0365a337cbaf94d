"""`python -m benchmarks.calibration` (`nox -s calibrate`): parse the options, run, print.

History mode is `run.calibrate`, A/B mode (`--ab`) is `ab.calibrate_ab`; this module only
chooses between them, so neither imports the other's caller.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence

from benchmarks.calibration.ab import calibrate_ab
from benchmarks.calibration.run import (
    DEFAULT_MATRIX,
    DEFAULT_OUT,
    THREAD_VARIABLES,
    Plan,
    calibrate,
    say,
)
from benchmarks.harness.errors import PhasebenchError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.calibration",
        description="A/A calibration: the gate's false-alarm rate, detection power and MDE here",
    )
    p.add_argument("--matrix", default=str(DEFAULT_MATRIX), help="matrix file (default smoke)")
    p.add_argument("--aa-runs", type=int, default=8, help="unchanged runs (default 8)")
    p.add_argument("--slow-runs", type=int, default=4, help="runs per slowdown (default 4)")
    p.add_argument(
        "--slowdowns", default="0.05,0.10", help="injected slowdowns, comma-separated (0.05,10%%)"
    )
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (default out/calibrate)")
    p.add_argument(
        "--reuse", action="store_true", help="reuse runs already saved under the same labels"
    )
    p.add_argument("--threshold", help="passed to the gate (default: the gate's 5%%)")
    p.add_argument("--alpha", type=float, help="passed to the gate (default: the gate's 0.01)")
    p.add_argument("--pytest-args", default="", help='extra pytest arguments, e.g. "-k llama"')
    p.add_argument(
        "--ab",
        action="store_true",
        help="A/B runs instead (head slowed, base not), judged both paired and as history; "
        "see docs/calibration.md",
    )
    p.add_argument(
        "--pairs", type=int, help="with --ab: the most pairs per benchmark (default: the A/B one)"
    )
    p.add_argument("--base", default="HEAD", help="with --ab: the base ref of every run (HEAD)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the calibration; 0 when done, 2 on bad input (one line on stderr)."""
    args = _parser().parse_args(argv)
    # Thread settings change every timing: the reproduce line carries them.
    threads = [f"{k}={os.environ[k]}" for k in THREAD_VARIABLES if k in os.environ]
    command = shlex.join(
        [
            *threads,
            "python",
            "-m",
            "benchmarks.calibration",
            *(sys.argv[1:] if argv is None else argv),
        ]
    )
    if args.ab and args.out == str(DEFAULT_OUT):
        args.out = str(DEFAULT_OUT.with_name(DEFAULT_OUT.name + "-ab"))
    try:
        plan = Plan.from_args(args)
        if args.ab:
            calibrate_ab(plan, args.pairs, args.base, command)
        else:
            calibrate(plan, command)
    except PhasebenchError as error:
        print(str(error).replace("\n", " "), file=sys.stderr)
        return 2
    print((plan.out / "calibration.md").read_text(encoding="utf-8"), end="")
    say(f"wrote {plan.out / 'calibration.json'} and {plan.out / 'calibration.md'}")
    return 0
