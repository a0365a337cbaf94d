"""The issue-41 and issue-51 rows: does the gate tell the machine from the code? Realised rates,
many seeds.

Each row judges seeded suites with the real judgement (`judge.judge`, the probes' evidence from
`probes.host_evidence`, each timing's own model from `timing_model`) and counts what the
headline says (`SuiteJudgement.outcome`) or how many slowed benchmarks fail.

- Issue 41 (`worlds.HostWorld`: 36 benchmarks, 12 prefill, 12 decode, 12 generate; 20 baseline
  runs of 3 rounds; one host factor seen by both probes): `gaussian`, `t3` (the host's and the
  unseen suite-wide run effects Student t(3)) and `t3-all` (every noise t(3); a stress world).
- Issue 51 (`factor_worlds.FactorWorld`: two host factors felt by each benchmark by its own
  sensitivities, drift inside a run, a leak from the code into in-process probes):
  `two-factor` and `two-factor-t3`.

`python -m reports simulate --only machine --robustness-suites 400` prints the tables;
`tests/reports/analysis/test_gate_rows.py` asserts the same rows on fewer seeds.

Deliberately not here: the rules (`judge`, `attribution`, `timing_model`, `lean`, `probes`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from reports.analysis.factor_worlds import (
    Factor,
    FactorHost,
    FactorWorld,
    make_factor_suite,
    usual,
)
from reports.analysis.judge import judge
from reports.analysis.robustness import Row
from reports.analysis.series import AnalysisConfig
from reports.analysis.worlds import Code, Host, HostWorld, make_suite, steady, unchanged

CONFIG = AnalysisConfig()
LAST = HostWorld().baseline_runs  # the current run's index (re-runs follow it)
WORLDS = {
    "gaussian": HostWorld(),
    "t3": HostWorld(host_tail_df=3.0),
    "t3-all": HostWorld(host_tail_df=3.0, run_tail_df=3.0, round_tail_df=3.0),
}
DECODE_GENERATE = frozenset(range(12, 36))
#: The worlds in a line, for the table's header.
WORLD = (
    "36 benchmarks (12 prefill, 12 decode, 12 generate), 20 baseline runs x 3 rounds; round CV "
    "3 %, 2 % of rounds preempted 1.5-3x; run CV 2 % per benchmark; host CV 1 % (probes see it: "
    "memory fully, compute half; 24 points of 2 % each per run) + 0.3 % suite-wide unseen; "
    "gaussian: normal; t3: host and unseen run effects t(3); t3-all: rounds, run effects, host "
    "t(3)"
)


@dataclass(frozen=True)
class Rates:
    """What `suites` seeded suites read: the headline's outcomes (shares), the share of suites
    with any fail, the share of the chosen benchmarks that failed (or were improved), and the
    share of the others that were improved."""

    suites: int
    outcome: dict[str, float]
    any_fail: float
    caught: float
    improved: float
    others_improved: float

    def text(self) -> str:
        """ "PASS 95 %, FAIL 0 %, INCONCLUSIVE 5 % (shift 1 %, lean 4 %); any fail 0 %" """
        o = self.outcome
        inconclusive = o["shift"] + o["lean"] + o["undecided"]
        return (
            f"PASS {o['pass']:.1%}, FAIL {o['fail']:.1%}, INCONCLUSIVE {inconclusive:.1%} "
            f"(shift {o['shift']:.1%}, lean {o['lean']:.1%}); any fail {self.any_fail:.1%}"
        )


def rates(
    world: HostWorld | FactorWorld,
    suites: int,
    seed: str,
    *,
    code: Code = unchanged,
    host: Host | FactorHost | None = None,
    chosen: Callable[[random.Random], frozenset[int]] | None = None,
) -> Rates:
    """Judge `suites` suites of either world; `chosen(rng)` picks the benchmarks whose fails
    (and improvements) are counted and to which `code` applies (all of them when None); `host`
    is `worlds.Host` (run -> factor) for a `HostWorld`, `factor_worlds.FactorHost` (factor,
    run -> factor) for a `FactorWorld`."""
    rng = random.Random(seed)
    counts = dict.fromkeys(("fail", "shift", "lean", "undecided", "pass"), 0)
    any_fail = caught = improved = total = others_improved = others = 0
    for _ in range(suites):
        picked = chosen(rng) if chosen else frozenset(range(world.benchmarks))

        def factor(b: int, r: int, p: frozenset[int] = picked) -> float:
            return code(b, r) if b in p else 1.0

        if isinstance(world, FactorWorld):
            suite = make_factor_suite(rng, world, factor, host or usual)  # type: ignore[arg-type]
        else:
            suite = make_suite(rng, world, factor, host or steady)  # type: ignore[arg-type]
        judged = judge(suite.series, CONFIG, suite.hosts)
        counts[judged.outcome(CONFIG.threshold)] += 1
        groups = [g for a in judged.shifts.values() for g in a.groups]
        any_fail += any(v.verdict == "fail" for v in (*judged.verdicts, *groups))
        if chosen:
            caught += sum(judged.verdicts[b].verdict == "fail" for b in picked)
            improved += sum(judged.verdicts[b].verdict == "improved" for b in picked)
            total += len(picked)
            rest = [v for b, v in enumerate(judged.verdicts) if b not in picked]
            others_improved += sum(v.verdict == "improved" for v in rest)
            others += len(rest)
    return Rates(
        suites,
        {k: v / suites for k, v in counts.items()},
        any_fail / suites,
        caught / total if total else math.nan,
        improved / total if total else math.nan,
        others_improved / others if others else math.nan,
    )


def slower(factor: float, runs_from: int = LAST) -> Code:
    """The code `factor` slower in the current run (and its re-runs)."""
    return lambda b, r: factor if r >= runs_from else 1.0


def host_slower(factor: float) -> Host:
    """The host `factor` slower in the current run (the probes see it)."""
    return lambda r: factor if r >= LAST else 1.0


def decode_generate(rng: random.Random) -> frozenset[int]:
    """The 24 decode and generate benchmarks."""
    del rng
    return DECODE_GENERATE


def six(rng: random.Random) -> frozenset[int]:
    """Six random benchmarks."""
    return frozenset(rng.sample(range(36), 6))


def world_rows(name: str, world: HostWorld, suites: int, seed: int) -> list[Row]:
    """Every row of one world (module docstring)."""
    s = f"{seed}-{name}"
    bare = replace(world, probes=False)
    aa = rates(world, suites, f"{s}-aa")
    aa_bare = rates(bare, suites, f"{s}-aa-bare")
    all10 = rates(world, suites, f"{s}-all10", code=slower(1.10))
    dg = rates(world, suites, f"{s}-dg30", code=slower(1.30), chosen=decode_generate)
    host10 = rates(world, suites, f"{s}-host10", host=host_slower(1.10))
    host_six = rates(
        world, suites, f"{s}-host-six", code=slower(1.30), host=host_slower(1.10), chosen=six
    )
    reruns = rates(replace(world, reruns=3, shared_host=True), suites, f"{s}-rr-shared")
    reruns_own = rates(replace(world, reruns=3), suites, f"{s}-rr-own")
    shared = replace(world, reruns=3, shared_host=True)
    rerun5 = rates(shared, suites, f"{s}-rr5", code=slower(1.05))
    bare30 = rates(bare, suites, f"{s}-bare30", code=slower(1.30))
    lean6 = rates(world, suites, f"{s}-lean6", code=slower(1.10), chosen=six)
    dg10 = rates(world, suites, f"{s}-dg10", code=slower(1.10), chosen=decode_generate)
    tag = f"[{name}]"
    # This world's timings have an MDE near 24 % (run CV 2 %, three rounds of 3 %): most stay
    # undecided, and since issue 51 such a suite reads INCONCLUSIVE, never PASS.
    quiet = "no FAIL (any fail <= 5 %); PASS only with most timings decided"
    return [
        Row(f"{tag} unchanged, probes", quiet, aa.text()),
        Row(f"{tag} unchanged, no probes", quiet, aa_bare.text()),
        Row(f"{tag} every timing +10 %, probes steady", "FAIL >= 90 %", all10.text()),
        Row(
            f"{tag} decode+generate +10 %, prefill unchanged, probes steady",
            "FAIL >= 90 % (issue 51: >= 18 of 20)",
            f"{dg10.text()}; {dg10.caught:.1%} of the 24 caught one by one",
        ),
        Row(
            f"{tag} decode+generate +30 %, prefill unchanged, probes",
            ">= 95 % of the 24 caught; no prefill improved",
            f"{dg.caught:.1%} caught; prefill improved {dg.others_improved:.1%}; {dg.text()}",
        ),
        Row(f"{tag} the host +10 % (probes too)", "fail <= 5 %, PASS <= 5 %", host10.text()),
        Row(
            f"{tag} the host +10 %, six benchmarks +30 % by the code",
            ">= 80 % of the six caught",
            f"{host_six.caught:.1%} caught; {host_six.text()}",
        ),
        Row(
            f"{tag} three re-runs of one unchanged commit (one host state / their own)",
            quiet,
            f"{reruns.text()} / {reruns_own.text()}",
        ),
        Row(
            f"{tag} three re-runs sharing a host state, every timing +5 % (the threshold)",
            "any fail <= 5 %",
            rerun5.text(),
        ),
        Row(f"{tag} no probes, every timing +30 %", "PASS never", bare30.text()),
        Row(
            f"{tag} six benchmarks +10 % (the lean), probes",
            "PASS <= 10 %; unchanged suites LEAN about 5 %",
            f"{lean6.text()}; unchanged: lean {aa.outcome['lean']:.1%}",
        ),
    ]


def rows(suites: int = 100, seed: int = 1) -> list[Row]:
    """Every world's rows, `suites` seeded suites each."""
    return [r for name, world in WORLDS.items() for r in world_rows(name, world, suites, seed)]


#: Issue 51's hosts: two factors felt by each benchmark by its own sensitivities, drift inside
#: a run, and the same with every factor and run effect Student t(3).
FACTOR_WORLDS = {
    "two-factor": FactorWorld(),
    "two-factor-t3": FactorWorld(factors=(Factor(0.08, 3.0), Factor(0.03, 3.0)), run_tail_df=3.0),
}
DECODE = frozenset(range(12, 24))
FACTOR_WORLD = (
    "36 benchmarks (12 prefill, 12 decode, 12 generate), 20 baseline runs x 5 rounds (CV 2 %), "
    "run CV 1 % per benchmark; a memory factor (CV 8 %) and a compute factor (CV 3 %), each "
    "benchmark's sensitivities drawn per suite (decode 0.8-1.0 memory, prefill 0.7-1.0 "
    "compute, generate both), drifting 2 % across a run; probes follow their factor within "
    "1 % per point, 10 points a run; t3: factors and run effects t(3)"
)


def decode_only(rng: random.Random) -> frozenset[int]:
    """The 12 decode benchmarks."""
    del rng
    return DECODE


def memory_slower(factor: float) -> FactorHost:
    """The memory factor `factor` slower in the current run (the probes see it)."""
    return lambda f, r: factor if f == 0 and r >= LAST else 1.0


def factor_world_rows(name: str, world: FactorWorld, suites: int, seed: int) -> list[Row]:
    """Issue 51's rows on one factor world."""
    s = f"{seed}-{name}"
    aa = rates(world, suites, f"{s}-aa")
    memory = rates(world, suites, f"{s}-mem12", host=memory_slower(1.12))
    decode = rates(world, suites, f"{s}-dec10", code=slower(1.10), chosen=decode_only)
    leak = replace(world, leak=1.0)
    own = rates(world, suites, f"{s}-all10", code=slower(1.10))
    leaked = rates(leak, suites, f"{s}-all10-leak", code=slower(1.10))
    tag = f"[{name}]"
    return [
        Row(f"{tag} unchanged", "PASS >= 80 %, any fail <= 5 %", aa.text()),
        Row(
            f"{tag} memory +12 % in the current run, code unchanged",
            "any fail <= 5 %",
            memory.text(),
        ),
        Row(
            f"{tag} the 12 decode benchmarks +10 % by the code",
            "FAIL >= 90 %; >= 80 % of the 12 caught one by one",
            f"{decode.text()}; {decode.caught:.1%} of the 12 caught one by one",
        ),
        Row(
            f"{tag} every timing +10 % by a process-wide setting: probes in their own process "
            "/ in the code's (the probes feel it too)",
            "FAIL >= 90 % / the gate cannot tell",
            f"{own.text()} / {leaked.text()}",
        ),
    ]


def factor_rows(suites: int = 100, seed: int = 1) -> list[Row]:
    """Every factor world's rows, `suites` seeded suites each."""
    return [
        r
        for name, world in FACTOR_WORLDS.items()
        for r in factor_world_rows(name, world, suites, seed)
    ]


#: The tables `python -m reports simulate --only machine` prints: (title, rows, world line).
TABLES = (
    ("Issue-41 rows (machine or code: host probes, heavy tails, re-runs)", rows, WORLD),
    (
        "Issue-51 rows (two host factors, each benchmark's own loadings, drift in a run)",
        factor_rows,
        FACTOR_WORLD,
    ),
)
