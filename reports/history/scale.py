"""Write a large synthetic phasebench history, for `python -m reports bench-scale`.

The files have the shape of pytest-benchmark 5.3.1 autosaves with phasebench's `extra_info`
(raw rounds, KV and memory bytes, roofline fields, and per-step decode latencies for the
`generate` group) and host-probe records (a point before each benchmark, each benchmark's
`session_window_s` between two of them, so the gate fits every timing's own model), one file
per run, one machine, all on `main` but the last (a PR branch).
The tests have their own, fuller generator (tests/data/reports/make_history.py); this one only
has to be realistic in size and shape.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

_GROUPS = ("prefill", "decode", "generate", "kv")


def _probes(rng: random.Random, points: int, memory: float, compute: float) -> list[dict[str, Any]]:
    """The run's host-probe records (`benchmarks/suite/hostprobe.py`'s shape): one point
    before each benchmark and one at the end, a second apart."""
    out = []
    for kind, level in (("memory", memory), ("compute", compute)):
        values = [0.005 * math.exp(level + rng.gauss(0, 0.01)) for _ in range(points)]
        out.append(
            {
                "group": "host_probe",
                "name": f"host_probe[{kind}]",
                "fullname": f"host_probe::host_probe[{kind}]",
                "params": {"kind": kind, "device": "cpu"},
                "extra_info": {
                    "schema": 1,
                    "host_probe": kind,
                    "process": "own",
                    "others_cpus": 2,
                    "points": [
                        {"at": "", "session_s": float(i), "calls_s": [v] * 5, "others_cores": 0.0}
                        for i, v in enumerate(values)
                    ],
                },
                "stats": {"data": values, "median": statistics.median(values), "rounds": points},
            }
        )
    return out


def _bench(rng: random.Random, index: int, run_effect: float) -> dict[str, Any]:
    group = _GROUPS[index % len(_GROUPS)]
    prompt = 128 * (1 + index // len(_GROUPS) % 8)
    cell = f"tiny-llama-cpu-float32-b1-p{prompt}-n32-v{index // 32}"
    level = 1e-3 * (1 + index % 7)
    data = [level * math.exp(run_effect + rng.gauss(0, 0.03)) for _ in range(5)]
    kv_tok = 512
    extra: dict[str, Any] = {
        "schema": 1,
        "cell_id": cell,
        "measurement": group,
        "warmup": 2,
        "rounds": 5,
        "timer": "perf_counter",
        "sync": "none (cpu)",
        "kv_bytes_per_token": kv_tok,
        "kv_analytic_after_prefill_bytes": kv_tok * prompt,
        "kv_measured_after_prefill_bytes": kv_tok * prompt,
        "kv_analytic_final_bytes": kv_tok * (prompt + 31),
        "kv_measured_final_bytes": kv_tok * (prompt + 31),
        "weights_bytes": 1_318_912,
        "peak_rss_bytes": 400_000_000 + rng.randrange(1_000_000),
        "memory_labels": {"allocated": "n/a on cpu", "reserved": "n/a on cpu"},
        "session_window_s": [index + 0.2, index + 0.8],
    }
    median = statistics.median(data)
    peaks = {
        "peak_flop_per_s": 1.2e12,
        "peak_bandwidth_bytes_per_s": 2e10,
        "peak_source": "measured:copy/matmul",
    }
    if group == "prefill":  # the counts behind the roofline chart (current run only)
        flop = 2.6e6 * prompt
        extra |= peaks | {"prefill_flop": flop, "prefill_flop_per_s": flop / median}
        extra["prefill_bytes"] = 1_318_912 + kv_tok * prompt
    elif group == "decode":
        extra |= peaks | {"decode_flop": 2.6e6, "decode_step_s": median}
        extra["decode_bytes"] = 1_318_912 + kv_tok * (prompt + 1)
    if group == "generate":
        extra["step_s"] = [level * 0.03 * (1 + 0.001 * i) for i in range(31)]
        extra["ttft_s"] = level * 0.2 * math.exp(run_effect)
        extra["tpot_s"] = level * 0.03 * math.exp(run_effect)
    name = f"test_{group}[{cell}]"
    mean = statistics.fmean(data)
    return {
        "group": group,
        "name": name,
        "fullname": f"benchmarks/test_{group}.py::{name}",
        "params": {"model": "tiny-llama", "device": "cpu", "prompt_len": prompt},
        "param": cell,
        "extra_info": extra,
        "options": {"timer": "perf_counter", "min_rounds": 5},
        "stats": {
            "min": min(data),
            "max": max(data),
            "mean": mean,
            "median": statistics.median(data),
            "stddev": statistics.stdev(data),
            "rounds": len(data),
            "ops": 1 / mean,
            "data": data,
        },
    }


def write_synthetic_history(out: Path, runs: int = 1000, benchmarks: int = 100) -> None:
    """Write `runs` files of `benchmarks` benchmarks each under `out/`."""
    folder = out / "Linux-CPython-3.11-64bit"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    for r in range(runs):
        when = (start + timedelta(hours=6 * r)).isoformat()
        commit = f"{r:040x}"
        memory, compute = rng.gauss(0, 0.05), rng.gauss(0, 0.02)
        # the host's two factors, as the probes see them, plus a step in the code halfway
        run_effect = 0.6 * memory + 0.4 * compute + rng.gauss(0, 0.01)
        run_effect += 0.08 if r > runs // 2 else 0.0
        doc = {
            "machine_info": {
                "node": "runner",
                "system": "Linux",
                "release": "6.1",
                "machine": "x86_64",
                "python_version": "3.11.2",
                "cpu": {"brand_raw": "AMD EPYC"},
                "phasebench": {
                    "schema": 1,
                    "fingerprint": {"os": "Linux", "cpu": "AMD EPYC", "torch": "2.13.0"},
                    "fingerprint_id": "scale001",
                },
            },
            "commit_info": {
                "id": commit,
                "time": when,
                "branch": "main" if r < runs - 1 else "pr-branch",
                "dirty": False,
            },
            "benchmarks": [_bench(rng, i, run_effect) for i in range(benchmarks)]
            + _probes(rng, benchmarks + 1, memory, compute),
            "datetime": when,
            "version": "5.3.1",
        }
        path = folder / f"{r + 1:04d}_{commit[:12]}_{when[:10]}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
