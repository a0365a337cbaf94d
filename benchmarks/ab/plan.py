"""The A/B command line: its options, their defaults, and the checked `Plan` they make.

`parse_plan(argv)` turns `python -m benchmarks.ab ...` into a `Plan`; every option it
does not know is passed to both pytest runs unchanged. Bad values are `ABError`s (one line,
exit 2). It deliberately runs nothing (`run` does).
"""

from __future__ import annotations

import argparse
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.ab.coordinator import PairBudget
from benchmarks.ab.cpus import choose_cpus, default_threads, given_threads
from benchmarks.ab.sides import ABError, parse_assignments

DEFAULT_MATRIX = Path("matrix/cpu.yaml")
DEFAULT_OUT = Path("out/ab")
# The most pairs a benchmark gets, and when it has enough sooner (coordinator.PairBudget): at
# least MIN_PAIRS and BUDGET_S of paired rounds, then as soon as the pairs' 95 % half-width is
# TARGET_HALF_WIDTH or MAX_S is spent. A real model's 0.3 s rounds stop at MIN_PAIRS; on the
# 2-core development VM tiny models' 2-5 ms rounds scatter ~13 % per pair (host noise: no page
# faults, GC or context switches in them), so ±1.5 % takes ~300 pairs, 2-3 s; on a quieter
# machine (4-5 % per pair) ~40 pairs within BUDGET_S (docs/ab.md).
DEFAULT_PAIRS = 400
LEGACY_PAIRS = 100  # an apparatus without the stop message runs every pair it is given
MIN_PAIRS = 20
BUDGET_S = 0.5
TARGET_HALF_WIDTH = 0.015
MAX_S = 4.0


@dataclass(frozen=True)
class Plan:
    """Everything one A/B run needs, checked."""

    base_ref: str
    head_ref: str | None
    matrix: Path
    out: Path
    pairs: int | None
    apparatus: str
    base_env: Mapping[str, str]
    head_env: Mapping[str, str]
    report_args: tuple[str, ...]
    pytest_args: tuple[str, ...]
    seed: int
    interleave: str
    cpus: frozenset[int] | None = None
    argv: tuple[str, ...] = ()
    budget: PairBudget | None = None
    threads_from: str = "--threads"  # or the default's reason (cpus.default_threads)
    # A tree that measures both sides instead of the base's or the head's: a bisection keeps
    # one apparatus for every step while its sides change (benchmarks/bisect).
    apparatus_tree: Path | None = None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.ab",
        description="A/B: two software stacks on this machine, rounds interleaved, paired verdicts",
        allow_abbrev=False,  # unknown options go to pytest whole, never matched as abbreviations
    )
    p.add_argument("--base", required=True, metavar="REF", help="git ref of the base side")
    p.add_argument("--head", metavar="REF", help="git ref of the head side (default: working tree)")
    p.add_argument("--matrix", default=str(DEFAULT_MATRIX), help="matrix file (default cpu.yaml)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (default out/ab)")
    p.add_argument(
        "--pairs",
        type=int,
        help=f"the most paired rounds per benchmark (default: max(matrix rounds, {DEFAULT_PAIRS}))",
    )
    p.add_argument(
        "--min-pairs",
        type=int,
        default=MIN_PAIRS,
        help=f"pairs every benchmark gets before the time budget may end it (default {MIN_PAIRS})",
    )
    p.add_argument(
        "--pair-budget-s",
        type=float,
        default=BUDGET_S,
        help="seconds of paired rounds after which a benchmark with --min-pairs pairs stops "
        f"(default {BUDGET_S:g}; 0: always --min-pairs; inf: always --pairs)",
    )
    p.add_argument(
        "--pair-target",
        type=float,
        default=TARGET_HALF_WIDTH,
        help="after that, stop a benchmark once its pairs' 95 %% half-width is this fraction "
        f"(default {TARGET_HALF_WIDTH:g}; 0: stop at --pair-budget-s)",
    )
    p.add_argument(
        "--pair-max-s",
        type=float,
        default=MAX_S,
        help=f"... or once its paired rounds took this many seconds (default {MAX_S:g})",
    )
    p.add_argument("--apparatus", choices=("base", "head"), default="base")
    p.add_argument("--base-env", action="append", default=[], metavar="K=V")
    p.add_argument("--head-env", action="append", default=[], metavar="K=V")
    p.add_argument("--threshold", action="append", default=[], help="as the gate's (5%% default)")
    p.add_argument("--alpha", help="suite-level false-alarm level (the gate's default)")
    p.add_argument("--process-cv", help="between-process spread (reports/analysis/paired.py, 0.01)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the starting sides (default: a random one, recorded in context.json, so "
        "an order effect is not the same fixed bias in every run)",
    )
    p.add_argument(
        "--cpus",
        metavar="LIST",
        default="auto",
        help="pin both sides' timed rounds to these same CPUs, e.g. 1 or 0-3 (Linux): a core "
        "busy with other work then slows both sides alike; auto (default): the last N CPUs for "
        "--threads N (default N: one fewer than the CPUs); none: no pinning (docs/ab.md)",
    )
    p.add_argument(
        "--interleave",
        choices=("auto", "rounds", "process"),
        default="auto",
        help="rounds (alternate every round), process (one side after the other), or auto: "
        "rounds when both sides' models fit in memory at once",
    )
    return p


def parse_plan(argv: Sequence[str]) -> Plan:
    """Parse the command line; unknown options go to both pytest runs."""
    args, rest = _parser().parse_known_args(argv)
    if args.pairs is not None and args.pairs < 2:
        raise ABError(f"--pairs {args.pairs}: paired statistics need at least 2 pairs (10+ useful)")
    if args.min_pairs < 2:
        raise ABError(
            f"--min-pairs {args.min_pairs}: paired statistics need at least 2 pairs; "
            f"use --min-pairs 2 or more (default {MIN_PAIRS})"
        )
    if not args.pair_budget_s >= 0:  # also refuses nan
        raise ABError(f"--pair-budget-s {args.pair_budget_s}: use seconds >= 0 (inf: no budget)")
    if not 0 <= args.pair_target < 1:
        raise ABError(f"--pair-target {args.pair_target}: use a fraction, e.g. 0.015 (0: none)")
    if not args.pair_max_s >= 0:
        raise ABError(f"--pair-max-s {args.pair_max_s}: use seconds >= 0 (inf: no limit)")
    threads_from = "--threads"
    if not given_threads(rest):
        # The sides must not share every core (cpus.default_threads); recorded in context.json.
        rest = [*rest, "--threads", str(default_threads())]
        threads_from = "default: one core fewer than the machine's"
    cpus = choose_cpus(args.cpus, tuple(rest))
    report_args: list[str] = []
    for item in args.threshold:
        report_args += ["--threshold", item]
    if args.alpha is not None:
        report_args += ["--alpha", args.alpha]
    if args.process_cv is not None:
        report_args += ["--process-cv", args.process_cv]
    elif cpus is not None:
        # Pinned to the same CPUs, A/A runs here showed no spread between the two processes
        # beyond the paired errors (docs/ab.md): the between-process term is not needed.
        report_args += ["--process-cv", "0"]
    return Plan(
        base_ref=args.base,
        head_ref=args.head,
        matrix=Path(args.matrix).resolve(),
        out=Path(args.out).resolve(),
        pairs=args.pairs,
        apparatus=args.apparatus,
        base_env=parse_assignments(args.base_env, "--base-env"),
        head_env=parse_assignments(args.head_env, "--head-env"),
        report_args=tuple(report_args),
        pytest_args=tuple(rest),
        seed=args.seed if args.seed is not None else secrets.randbelow(2**31),
        interleave=args.interleave,
        cpus=cpus,
        argv=tuple(argv),
        budget=PairBudget(
            args.min_pairs,
            args.pair_budget_s,
            args.pair_target,
            max(args.pair_max_s, args.pair_budget_s),  # --pair-budget-s inf: every pair runs
        ),
        threads_from=threads_from,
    )
