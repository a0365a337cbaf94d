"""Generate realistic phasebench history files (pytest-benchmark 5.3.1 shape) for the tests.

The files follow the contract in DESIGN §5 / INTERFACES.md: `machine_info` with a `phasebench`
fingerprint, `commit_info` with branch and id, and one benchmark per (measurement, cell) in the
groups prefill / decode / generate / kv, with raw rounds in `stats.data` and phasebench's
`extra_info` (schema 1). Timings are log-normal with a per-run effect (run-to-run noise) and
per-round noise; byte counts are exact and derived from a tiny architecture.

`python tests/data/reports/make_history.py OUT_DIR [--runs 20] [--seed 1]` writes a history;
tests call `write_history` directly. The checked-in `small_history/` was made with
`write_history(DIR, 5, seed=7, cells=(Cell(prompt_len=64, new_tokens=8),),
current=current_spec(days_after=6, slowdown={"decode": 0.25}))`: five `main` runs and a PR run
whose decode step is 25 % slower. `foreign_pytest_benchmark.json` is the same shape without
phasebench's additions (no `machine_info.phasebench`, empty `extra_info`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

MEASUREMENTS = ("prefill", "decode", "generate", "kv")
# tiny llama-like architecture: 2 layers, 2 KV heads, head dim 16, float32
LAYERS, KV_HEADS, HEAD_DIM, ELEM_BYTES = 2, 2, 16, 4
KV_PER_TOKEN = 2 * LAYERS * KV_HEADS * HEAD_DIM * ELEM_BYTES
WEIGHTS_BYTES = 1_318_912
FLOP_PER_TOKEN = 2 * WEIGHTS_BYTES // ELEM_BYTES  # 2 FLOPs per float32 weight
ATTENTION_FLOP_PER_KEY = 2 * 2 * 4 * HEAD_DIM * LAYERS  # 4 query heads, scores + values
PEAK_FLOP_PER_S, PEAK_BANDWIDTH_BYTES_PER_S = 1.2e12, 2e10


@dataclass(frozen=True)
class Cell:
    """One matrix cell of the synthetic suite."""

    model: str = "tiny-llama"
    device: str = "cpu"
    dtype: str = "float32"
    batch: int = 1
    prompt_len: int = 128
    new_tokens: int = 16

    @property
    def id(self) -> str:
        return (
            f"{self.model}-{self.device}-{self.dtype}-b{self.batch}"
            f"-p{self.prompt_len}-n{self.new_tokens}"
        )

    def params(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "device": self.device,
            "dtype": self.dtype,
            "batch": self.batch,
            "prompt_len": self.prompt_len,
            "new_tokens": self.new_tokens,
        }


DEFAULT_CELLS = (Cell(prompt_len=128), Cell(prompt_len=512), Cell(batch=4, prompt_len=128))


@dataclass(frozen=True)
class RunSpec:
    """What one synthetic run looks like."""

    commit: str
    when: datetime
    branch: str = "main"
    fingerprint_id: str = "ab12cd34"
    torch: str = "2.13.0"
    transformers: str = "5.24.0"
    slowdown: Mapping[str, float] = field(default_factory=dict)  # measurement -> factor - 1
    kv_extra_bytes: int = 0
    rounds: int = 5
    round_cv: float = 0.03
    run_cv: float = 0.02
    hardware_id: str | None = None  # set: write hardware_id, stack and planned (issue 13)


def _stats(data: Sequence[float]) -> dict[str, Any]:
    ordered = sorted(data)
    q = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
    mean = statistics.fmean(ordered)
    return {
        "min": ordered[0],
        "max": ordered[-1],
        "mean": mean,
        "stddev": statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
        "rounds": len(ordered),
        "median": statistics.median(ordered),
        "iqr": q[2] - q[0],
        "q1": q[0],
        "q3": q[2],
        "iqr_outliers": 0,
        "stddev_outliers": 0,
        "outliers": "0;0",
        "ld15iqr": ordered[0],
        "hd15iqr": ordered[-1],
        "ops": 1.0 / mean,
        "total": sum(ordered),
        "data": list(data),
        "iterations": 1,
    }


def _base_time_s(measurement: str, cell: Cell) -> float:
    if measurement == "prefill":
        return 2e-5 * cell.batch * cell.prompt_len + 1e-3
    if measurement == "decode":
        return 1.2e-3 + 1e-6 * cell.prompt_len * cell.batch
    if measurement == "generate":
        return _base_time_s("prefill", cell) + (cell.new_tokens - 1) * _base_time_s("decode", cell)
    return 5e-4


def _benchmark(rng: random.Random, spec: RunSpec, measurement: str, cell: Cell) -> dict[str, Any]:
    factor = 1.0 + spec.slowdown.get(measurement, 0.0)
    level = _base_time_s(measurement, cell) * factor
    run_effect = rng.gauss(0.0, math.log1p(spec.run_cv))
    data = [
        level * math.exp(run_effect + rng.gauss(0.0, math.log1p(spec.round_cv)))
        for _ in range(spec.rounds)
    ]
    median = statistics.median(data)
    p, n, b = cell.prompt_len, cell.new_tokens, cell.batch
    kv_tok = KV_PER_TOKEN * b
    extra: dict[str, Any] = {
        "schema": 1,
        "cell_id": cell.id,
        "measurement": measurement,
        "warmup": 2,
        "rounds": spec.rounds,
        "timer": "perf_counter",
        "sync": "none (cpu)",
        "kv_bytes_per_token": kv_tok,
        "kv_analytic_after_prefill_bytes": kv_tok * p,
        "kv_measured_after_prefill_bytes": kv_tok * p + spec.kv_extra_bytes,
        "kv_analytic_final_bytes": kv_tok * (p + n - 1),
        "kv_measured_final_bytes": kv_tok * (p + n - 1) + spec.kv_extra_bytes,
        "kv_storage_final_bytes": kv_tok * (p + n - 1),
        "weights_bytes": WEIGHTS_BYTES,
        "peak_allocated_bytes": None,
        "peak_reserved_bytes": None,
        "peak_rss_bytes": 400_000_000 + rng.randrange(0, 2_000_000),
        "memory_labels": {
            "allocated": "n/a on cpu",
            "reserved": "n/a on cpu",
            "rss": "process RSS",
        },
    }
    # roofline fields as benchmarks/harness/roofline/roofline.py records them: every key, the phase
    # not
    # timed null, the counts behind the rates (prefill bytes: weights + KV written for P
    # positions; decode bytes: weights + KV read + one position written)
    roofline: dict[str, Any] = {
        "prefill_flop": None,
        "prefill_bytes": None,
        "prefill_flop_per_s": None,
        "prefill_pct_of_peak_flops": None,
        "decode_flop": None,
        "decode_bytes": None,
        "decode_bytes_per_s": None,
        "decode_pct_of_peak_bandwidth": None,
        "peak_flop_per_s": PEAK_FLOP_PER_S,
        "peak_bandwidth_bytes_per_s": PEAK_BANDWIDTH_BYTES_PER_S,
        "peak_source": "table: generic x86 2-core",
    }
    if measurement == "prefill":
        flop = b * p * FLOP_PER_TOKEN + b * p * p * ATTENTION_FLOP_PER_KEY
        extra |= roofline | {
            "prefill_s": median,
            "prefill_tok_per_s": b * p / median,
            "ttft_s": median * 1.05,
            "prefill_flop": flop,
            "prefill_bytes": WEIGHTS_BYTES + kv_tok * p,
            "prefill_flop_per_s": flop / median,
            "prefill_pct_of_peak_flops": 100 * flop / median / PEAK_FLOP_PER_S,
        }
    elif measurement == "decode":
        moved = WEIGHTS_BYTES + kv_tok * p + kv_tok
        extra |= roofline | {
            "decode_step_s": median,
            "decode_tok_per_s": b / median,
            "decode_flop": b * FLOP_PER_TOKEN + b * (p + 1) * ATTENTION_FLOP_PER_KEY,
            "decode_bytes": moved,
            "decode_bytes_per_s": moved / median,
            "decode_pct_of_peak_bandwidth": 100 * moved / median / PEAK_BANDWIDTH_BYTES_PER_S,
        }
    elif measurement == "generate":
        step0 = _base_time_s("decode", cell) * factor
        step_s = [step0 * (1 + 0.0004 * i) * math.exp(rng.gauss(0, 0.03)) for i in range(n - 1)]
        ttft = _base_time_s("prefill", cell) * factor * 1.05
        gaps = sorted(s * 1.02 for s in step_s)
        # Its own generator, so existing histories keep their draws (tests pin their verdicts).
        sub = random.Random(f"{cell.id}-{median}")
        prefill_rounds = [
            _base_time_s("prefill", cell) * factor * math.exp(sub.gauss(0, spec.round_cv))
            for _ in range(spec.rounds)
        ]
        extra |= {
            "generate_prefill_rounds_s": prefill_rounds,
            "generate_prefill_s": statistics.median(prefill_rounds),
            "e2e_s": median,
            "ttft_s": ttft * math.exp(run_effect + rng.gauss(0, 0.02)),
            "tpot_s": (median - ttft) / (n - 1),
            "itl_p50_s": gaps[len(gaps) // 2],
            "itl_p90_s": gaps[int(len(gaps) * 0.9)],
            "itl_p99_s": gaps[-1],
            "decode_slope_s_per_ktok": step0 * 0.4,
            "step_s": step_s,
            "gap_s": [s * 1.02 for s in step_s],
            "kv_bytes_per_step": [kv_tok * (p + i + 1) for i in range(n - 1)],
            "resource_samples": [],
        }
    name = f"test_{measurement}[{cell.id}]"
    return {
        "group": measurement,
        "name": name,
        "fullname": f"benchmarks/test_{measurement}.py::{name}",
        "params": cell.params(),
        "param": cell.id,
        "extra_info": extra,
        "options": {
            "disable_gc": False,
            "timer": "perf_counter",
            "min_rounds": 5,
            "max_time": 1.0,
            "min_time": 5e-06,
            "warmup": False,
        },
        "stats": _stats(data),
    }


def make_run(spec: RunSpec, cells: Sequence[Cell] = DEFAULT_CELLS, seed: int = 0) -> dict[str, Any]:
    """One pytest-benchmark 5.3.1 JSON document for `spec`."""
    rng = random.Random(f"{seed}-{spec.commit}-{spec.when.isoformat()}-{spec.fingerprint_id}")
    fingerprint = {
        "os": "Linux-6.1.0-x86_64-with-glibc2.36",
        "cpu": "AMD EPYC 7B13",
        "accelerator": "none",
        "accelerator_memory": "n/a",
        "driver": "n/a",
        "torch": spec.torch,
        "transformers": spec.transformers,
        "python": "3.11.2",
    }
    phasebench: dict[str, Any] = {
        "schema": 1,
        "fingerprint": fingerprint,
        "fingerprint_id": spec.fingerprint_id,
    }
    benchmarks = [_benchmark(rng, spec, m, c) for c in cells for m in MEASUREMENTS]
    if spec.hardware_id is not None:
        phasebench["hardware_id"] = spec.hardware_id
        phasebench["stack"] = {
            "torch": spec.torch,
            "transformers": spec.transformers,
            "python": "3.11.2",
            "driver": "n/a",
        }
        phasebench["planned"] = sorted(b["fullname"] for b in benchmarks)
    return {
        "machine_info": {
            "node": "runner-1",
            "processor": "",
            "machine": "x86_64",
            "python_compiler": "GCC 12.2.0",
            "python_implementation": "CPython",
            "python_implementation_version": "3.11.2",
            "python_version": "3.11.2",
            "python_build": ["main", "Mar 13 2023 12:18:29"],
            "release": "6.1.0-26-cloud-amd64",
            "system": "Linux",
            "cpu": {"brand_raw": "AMD EPYC 7B13", "count": 2, "arch": "X86_64"},
            "phasebench": phasebench,
        },
        "commit_info": {
            "id": spec.commit,
            "time": spec.when.isoformat(),
            "author_time": spec.when.isoformat(),
            "dirty": False,
            "project": "phasebench",
            "branch": spec.branch,
        },
        "benchmarks": benchmarks,
        "datetime": spec.when.isoformat(),
        "version": "5.3.1",
    }


def commit_id(i: int, salt: str = "") -> str:
    """A stable 40-hex fake commit id."""
    return hashlib.sha1(f"{salt}{i}".encode()).hexdigest()


def write_history(
    out: Path,
    runs: int = 20,
    *,
    seed: int = 1,
    cells: Sequence[Cell] = DEFAULT_CELLS,
    current: RunSpec | None = None,
    base: RunSpec | None = None,
) -> list[Path]:
    """Write `runs` main-branch runs (one per commit, a day apart) and optionally a current run.

    Files go to `out/Linux-CPython-3.11-64bit/NNNN_<commit>_<date>.json` like pytest-benchmark's
    autosave. `base` sets the baseline runs' fields other than commit and time.
    """
    folder = out / "Linux-CPython-3.11-64bit"
    folder.mkdir(parents=True, exist_ok=True)
    start = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    template = base or RunSpec(commit="", when=start)
    specs = [
        RunSpec(**{**template.__dict__, "commit": commit_id(i), "when": start + timedelta(days=i)})
        for i in range(runs)
    ]
    if current is not None:
        specs.append(current)
    paths = []
    for n, spec in enumerate(specs, start=1):
        stamp = spec.when.strftime("%Y%m%d_%H%M%S")
        path = folder / f"{n:04d}_{spec.commit[:12]}_{stamp}.json"
        path.write_text(json.dumps(make_run(spec, cells, seed), indent=1), encoding="utf-8")
        paths.append(path)
    return paths


def current_spec(days_after: int = 30, branch: str = "feature", **changes: Any) -> RunSpec:
    """The PR run: a new commit on `branch`, `days_after` days after the first baseline run."""
    when = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc) + timedelta(days=days_after)
    return RunSpec(commit=commit_id(999, "pr"), when=when, branch=branch, **changes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slow", action="append", default=[], help="measurement=fraction")
    args = parser.parse_args()
    slow = {k: float(v) for k, v in (s.split("=", 1) for s in args.slow)}
    write_history(
        args.out,
        args.runs,
        seed=args.seed,
        current=current_spec(days_after=args.runs + 1, slowdown=slow),
    )


if __name__ == "__main__":
    main()
