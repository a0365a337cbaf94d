"""The issue-13 scenarios: synthetic histories with known answers, judged by the real gate.

Each scenario writes pytest-benchmark JSON files (phasebench `machine_info`: `hardware_id`,
`stack`, `planned`) of a 36-benchmark suite (3 models x 3 prompt lengths x 2 dtypes x
prefill/decode) into a temporary folder, runs `python -m reports gate --history DIR --json F`
in-process through `reports.cli.main`, and scores the exit code and the JSON verdicts against
what a user expects. It talks to the gate only through that command line and its JSON (fields
present since the first version), so the same file also measures an older checkout:
`python -m reports.scenarios` run from it (docs/reports.md shows the table before and after).

Noise: every round is `level * exp(e_run + u_run_bench + round noise)` with a suite-wide run
effect of CV `SUITE_RUN_CV`, a per-benchmark run effect of CV `RUN_CV` and round noise of CV
`ROUND_CV` (about 1 % in all, as in the issue). Deterministic for a given seed.

Deliberately not here: the statistics (`reports.analysis.series`), the generic A/A and slowdown grid
(`reports.analysis.simulate`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import random
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from reports.cli import main as reports_cli

ROUND_CV, RUN_CV, SUITE_RUN_CV = 0.01, 0.008, 0.005
ROUNDS, BASELINE_RUNS = 5, 20
MODELS = ("tiny-llama", "tiny-gpt2", "tiny-qwen")
PROMPTS = (32, 128, 512)
DTYPES = ("float32", "bfloat16")
MEASUREMENTS = ("prefill", "decode")
STACK = {"torch": "2.13.0", "transformers": "5.24.0", "python": "3.11.2", "driver": "n/a"}
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Cell:
    """One benchmark of the synthetic suite."""

    model: str
    prompt_len: int
    dtype: str
    measurement: str

    @property
    def cell_id(self) -> str:
        """The matrix cell id."""
        return f"{self.model}-cpu-{self.dtype}-b1-p{self.prompt_len}-n16"

    @property
    def fullname(self) -> str:
        """pytest's node id, as pytest-benchmark records it."""
        return f"benchmarks/test_{self.measurement}.py::test_{self.measurement}[{self.cell_id}]"

    @property
    def level_s(self) -> float:
        """The true median seconds (deterministic per cell)."""
        size = 1.0 + MODELS.index(self.model)
        if self.measurement == "prefill":
            return 1e-3 * size * self.prompt_len / 32
        return 2e-3 * size * (1.0 + self.prompt_len / 2048)


CELLS = tuple(
    Cell(m, p, d, s) for m in MODELS for p in PROMPTS for d in DTYPES for s in MEASUREMENTS
)


@dataclass(frozen=True)
class RunSpec:
    """One synthetic history file."""

    commit: str
    when: datetime
    branch: str = "main"
    stack: Mapping[str, str] = field(default_factory=lambda: dict(STACK))
    slow: Mapping[str, float] = field(default_factory=dict)  # fullname -> factor
    factor: float = 1.0  # the whole run (a load burst)
    cells: tuple[Cell, ...] = CELLS
    shard: str | None = None  # "I/N" as --shard records it
    rounds: int = ROUNDS
    other_cpu_pct: float | None = None  # extra_info.other_cpu_pct of every benchmark (busy)


def _commit(i: int, salt: str = "") -> str:
    return hashlib.sha1(f"{salt}{i}".encode()).hexdigest()


def make_doc(spec: RunSpec, rng: random.Random) -> dict[str, Any]:
    """One pytest-benchmark JSON document with phasebench's machine_info."""
    stack = dict(spec.stack)
    fp_id = hashlib.sha256(json.dumps(stack, sort_keys=True).encode()).hexdigest()[:8]
    suite_effect = rng.gauss(0.0, math.log1p(SUITE_RUN_CV))
    benchmarks = []
    for cell in spec.cells:
        level = cell.level_s * spec.factor * spec.slow.get(cell.fullname, 1.0)
        effect = suite_effect + rng.gauss(0.0, math.log1p(RUN_CV))
        data = [
            level * math.exp(effect + rng.gauss(0.0, math.log1p(ROUND_CV)))
            for _ in range(spec.rounds)
        ]
        extra: dict[str, Any] = {
            "schema": 1,
            "cell_id": cell.cell_id,
            "measurement": cell.measurement,
        }
        if spec.other_cpu_pct is not None:
            extra["other_cpu_pct"] = spec.other_cpu_pct
        benchmarks.append(
            {
                "group": cell.measurement,
                "name": cell.fullname.split("::")[-1],
                "fullname": cell.fullname,
                "params": {"model": cell.model, "prompt_len": cell.prompt_len, "dtype": cell.dtype},
                "extra_info": extra,
                "stats": {"data": data, "median": sorted(data)[spec.rounds // 2]},
            }
        )
    return {
        "machine_info": {
            "node": "runner",
            "system": "Linux",
            "release": "6.1.0",
            "machine": "x86_64",
            "python_implementation": "CPython",
            "python_version": stack["python"],
            "phasebench": {
                "schema": 1,
                "fingerprint": {"os": "Linux 6.1", "cpu": "AMD EPYC 7B13", **stack},
                "fingerprint_id": fp_id,
                "hardware_id": "hw0c0ffe",
                "stack": stack,
                "planned": sorted(c.fullname for c in spec.cells),
                "shard": spec.shard,
            },
        },
        "commit_info": {
            "id": spec.commit,
            "time": spec.when.isoformat(),
            "dirty": False,
            "branch": spec.branch,
        },
        "benchmarks": benchmarks,
        "datetime": spec.when.isoformat(),
        "version": "5.3.1",
    }


def baseline_specs(n: int = BASELINE_RUNS, **changes: Any) -> list[RunSpec]:
    """`n` main runs a day apart, one commit each."""
    return [RunSpec(_commit(i), T0 + timedelta(days=i), **changes) for i in range(n)]


def pr_spec(**changes: Any) -> RunSpec:
    """The PR's run, a day after 20 baseline runs."""
    return RunSpec(_commit(999, "pr"), T0 + timedelta(days=BASELINE_RUNS + 1), "feature", **changes)


@dataclass(frozen=True)
class GateResult:
    """What the gate said: exit code, status, console text and verdict per (fullname, metric)."""

    code: int
    status: str
    output: str
    verdicts: Mapping[tuple[str, str], str]


def run_gate(specs: Sequence[RunSpec], seed: int) -> GateResult:
    """Write `specs` as history files and run the real gate on them."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "Linux-CPython-3.11-64bit"
        folder.mkdir()
        for n, spec in enumerate(specs, start=1):
            doc = make_doc(spec, rng)
            path = folder / f"{n:04d}_{spec.commit[:12]}_{spec.when:%Y%m%d_%H%M%S}.json"
            path.write_text(json.dumps(doc), encoding="utf-8")
        out = Path(tmp) / "gate.json"
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
            code = reports_cli(["gate", "--history", str(folder), "--json", str(out)])
        doc = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    verdicts = {(b["fullname"], b["metric"]): b["verdict"] for b in doc.get("benchmarks", [])}
    return GateResult(code, str(doc.get("status", "?")), buffer.getvalue(), verdicts)


def _fails(result: GateResult) -> set[str]:
    return {name for (name, _), v in result.verdicts.items() if v == "fail"}


@dataclass(frozen=True)
class Scenario:
    """One row: what it simulates, what a user expects, and how one trial is scored (0..1)."""

    name: str
    expected: str
    trial: Callable[[random.Random, int], dict[str, float]]


def _aa(rng: random.Random, seed: int) -> dict[str, float]:
    r = run_gate([*baseline_specs(), pr_spec()], seed)
    return {"suites with a false fail": float(bool(_fails(r))), "exit 0": float(r.code == 0)}


def _torch_bump(rng: random.Random, seed: int) -> dict[str, float]:
    slowed = {c.fullname: 1.5 for c in rng.sample(CELLS, 3)}
    bumped = {**STACK, "torch": "2.14.1"}
    r = run_gate([*baseline_specs(), pr_spec(stack=bumped, slow=slowed)], seed)
    fails = _fails(r)
    return {
        "slowed caught": len(fails & set(slowed)) / 3,
        "suites with a false fail": float(bool(fails - set(slowed))),
        "exit 1": float(r.code == 1),
        "names torch 2.13.0 → 2.14.1": float("torch 2.13.0 → 2.14.1" in r.output),
    }


def _below_threshold(rng: random.Random, seed: int) -> dict[str, float]:
    slowed = {c.fullname: 1.045 for c in CELLS}
    r = run_gate([*baseline_specs(), pr_spec(slow=slowed)], seed)
    return {
        "verdicts fail": len(_fails(r)) / len(CELLS),
        "exit 0 or 3 (pass or inconclusive, never fail)": float(r.code in (0, 3)),
    }


def _burst(rng: random.Random, seed: int) -> dict[str, float]:
    base = baseline_specs()
    k = rng.randrange(len(base))
    base[k] = RunSpec(base[k].commit, base[k].when, factor=1.8)
    slowed = {c.fullname: 1.15 for c in rng.sample(CELLS, 10)}
    r = run_gate([*base, pr_spec(slow=slowed)], seed)
    fails = _fails(r)
    return {
        "15 % slowdowns caught": len(fails & set(slowed)) / len(slowed),
        "suites with a false fail": float(bool(fails - set(slowed))),
    }


def _shards(rng: random.Random, seed: int) -> dict[str, float]:
    half = len(CELLS) // 2
    shard1, shard2 = CELLS[:half], CELLS[half:]
    slowed = {c.fullname: 2.0 for c in rng.sample(shard2, 3)}
    pr = pr_spec()
    files = [
        RunSpec(pr.commit, pr.when, pr.branch, cells=shard1, shard="1/2"),
        RunSpec(
            pr.commit,
            pr.when + timedelta(minutes=1),
            pr.branch,
            slow=slowed,
            cells=shard2,
            shard="2/2",
        ),
        RunSpec(pr.commit, pr.when + timedelta(minutes=30), pr.branch, cells=shard1, shard="1/2"),
    ]
    r = run_gate([*baseline_specs(), *files], seed)
    return {
        "exit 1": float(r.code == 1),
        "2x regressions caught": len(_fails(r) & set(slowed)) / len(slowed),
    }


def _twice(rng: random.Random, seed: int) -> dict[str, float]:
    commit = _commit(5, "local")
    first = RunSpec(commit, T0, "main")
    second = RunSpec(commit, T0 + timedelta(minutes=20), "main")
    one = run_gate([first], seed)
    two = run_gate([first, second], seed)
    compared = sum(v not in {"new", "missing"} for v in two.verdicts.values())
    return {
        "second run compared": float(compared == len(CELLS)),
        "second run: false fail": float(bool(_fails(two))),
        "one run: no-baseline, not PASS": float(one.status == "no-baseline"),
    }


def _twice_slow(rng: random.Random, seed: int) -> dict[str, float]:
    commit = _commit(6, "local")
    slowed = {c.fullname: 1.5 for c in rng.sample(CELLS, 3)}
    first = RunSpec(commit, T0, "main", rounds=10)
    second = RunSpec(commit, T0 + timedelta(minutes=20), "main", rounds=10, slow=slowed)
    r = run_gate([first, second], seed)
    fails = _fails(r)
    return {
        "1.5x slowdowns caught": len(fails & set(slowed)) / len(slowed),
        "suites with a false fail": float(bool(fails - set(slowed))),
        "never PASS when nothing decided": float(
            r.status != "pass" or any(v in {"pass", "fail"} for v in r.verdicts.values())
        ),
    }


def _busy(rng: random.Random, seed: int) -> dict[str, float]:
    slowed = {c.fullname: 3.0 for c in CELLS}  # a neighbour: every timing 3x slower
    r = run_gate([*baseline_specs(), pr_spec(slow=slowed, other_cpu_pct=45.0)], seed)
    return {
        "false fails": float(bool(_fails(r))),
        "status inconclusive, says busy": float(
            r.status == "inconclusive" and "machine busy" in r.output
        ),
    }


SCENARIOS = (
    Scenario(
        "A/A: nothing changed",
        "no suite with a false fail (<= 1 %); exit 0 but for the lean test's 5 %",
        _aa,
    ),
    Scenario(
        "torch 2.13.0 → 2.14.1, 3 benchmarks 1.5x slower",
        "those 3 fail against the same hardware; the output names the torch change",
        _torch_bump,
    ),
    Scenario("every benchmark +4.5 % (threshold 5 %)", "<= 1 % of verdicts fail", _below_threshold),
    Scenario(
        "one 1.8x burst run among 20 baseline runs, 10 benchmarks 15 % slower",
        ">= 90 % of the slowdowns caught",
        _burst,
    ),
    Scenario(
        "shard 2 holds a 2x regression, shard 1 retried later",
        "exit 1: the commit's run is the union of its shards",
        _shards,
    ),
    Scenario(
        "`nox -s bench-cpu` twice on one commit",
        "the second run is compared with the first; one run alone is no-baseline",
        _twice,
    ),
    Scenario(
        "`bench-cpu` twice on one commit, 10 rounds, 3 benchmarks 1.5x slower",
        "the 1.5x slowdowns fail; nothing decided is never PASS",
        _twice_slow,
    ),
    Scenario(
        "the PR's run on a busy machine (other processes 45 % of the CPU), timings 3x slower",
        "no fail; the status is INCONCLUSIVE and names the busy machine",
        _busy,
    ),
)


def run_scenarios(trials: int, seed: int) -> list[tuple[Scenario, dict[str, float]]]:
    """Mean of every score of every scenario over `trials` seeded trials."""
    results = []
    for n, scenario in enumerate(SCENARIOS):
        totals: dict[str, float] = {}
        for t in range(trials):
            rng = random.Random(f"{seed}-{n}-{t}")
            for key, value in scenario.trial(rng, rng.randrange(1 << 30)).items():
                totals[key] = totals.get(key, 0.0) + value
        results.append((scenario, {k: v / trials for k, v in totals.items()}))
    return results


def format_scenarios(results: Sequence[tuple[Scenario, Mapping[str, float]]], trials: int) -> str:
    """A Markdown table: scenario, expectation, measured shares."""
    lines = [
        f"{trials} trials per scenario; 36 benchmarks, {BASELINE_RUNS} baseline runs x {ROUNDS} "
        f"rounds; round CV {ROUND_CV:.0%}, run CV {RUN_CV:.1%} per benchmark + "
        f"{SUITE_RUN_CV:.1%} suite-wide",
        "",
        "| scenario | a user expects | measured |",
        "| --- | --- | --- |",
    ]
    for scenario, scores in results:
        measured = "; ".join(f"{k}: {v:.1%}" for k, v in scores.items())
        lines.append(f"| {scenario.name} | {scenario.expected} | {measured} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m reports.scenarios [--trials N] [--seed S]`: print the table."""
    parser = argparse.ArgumentParser(prog="python -m reports.scenarios")
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(format_scenarios(run_scenarios(args.trials, args.seed), args.trials))
    return 0


if __name__ == "__main__":
    sys.exit(main())
