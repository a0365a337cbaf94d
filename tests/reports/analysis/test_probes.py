"""Host probes on the reports side (issue 41): read apart from the benchmarks, turned into the
host's move with its uncertainty, trusted only when quiet, and used by the consistency line.

Pure functions on synthetic runs with known answers; the realised rates of the gate that uses
them are `test_gate_rows.py`.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from reports.analysis.consistency import consistency_rows, summarize_consistency
from reports.analysis.metrics import run_probes
from reports.analysis.probes import (
    MIN_PROBE_RUNS,
    HostEvidence,
    ProbeRun,
    host_evidence,
    host_move,
    probe_run,
)
from reports.analysis.timeline import timeline
from reports.history.load import Run, load_history
from reports.history.runfile import BenchmarkResult


def _probe(kind: str, values: list[float], extra: dict | None = None) -> dict:
    return {
        "group": "host_probe",
        "name": f"host_probe[{kind}]",
        "fullname": f"host_probe::host_probe[{kind}]",
        "extra_info": {"host_probe": kind, **(extra or {})},
        "stats": {"data": values, "median": sorted(values)[len(values) // 2]},
    }


def _bench(name: str, values: list[float]) -> dict:
    return {
        "group": "decode",
        "name": name,
        "fullname": f"benchmarks/test_decode.py::{name}",
        "extra_info": {"measurement": "decode"},
        "stats": {"data": values, "median": sorted(values)[len(values) // 2]},
    }


def test_probe_records_are_read_apart_and_need_only_name_field_and_stats(tmp_path: Path):
    """A file written by another tool: plain pytest-benchmark machine_info, probe records with
    nothing but `extra_info.host_probe` and `stats`; they are never benchmarks of the run."""
    doc = {
        "machine_info": {"node": "n", "system": "Linux", "machine": "x86_64"},
        "commit_info": {"id": "a" * 40, "branch": "main"},
        "datetime": "2026-01-01T00:00:00+00:00",
        "benchmarks": [_bench("test_decode[a]", [1.0, 1.1]), _probe("memory", [0.02, 0.03])],
    }
    (tmp_path / "run.json").write_text(json.dumps(doc), encoding="utf-8")
    ((run,),) = load_history([tmp_path]).machines.values()
    assert list(run.benchmarks) == ["benchmarks/test_decode.py::test_decode[a]"]
    assert [p.host_probe for p in run.probes] == ["memory"]
    assert run_probes(run)["memory"].values_s == (0.02, 0.03)


def test_busy_probe_points_are_left_out_and_unknown_ones_kept():
    kept = probe_run([1.0, 2.0, 3.0, 4.0], [0.0, 0.5, None, 0.24])
    assert kept.values_s == (1.0, 3.0, 4.0)
    assert kept.busy_points == 1
    assert probe_run([1.0], [0.9]).level is None  # every point busy: no level


def _baseline(rng: random.Random, runs: int, gain: float) -> tuple[list[ProbeRun], list[float]]:
    """Baseline runs whose host state h moves the probe fully and the run effect by `gain`."""
    probes, effects = [], []
    for _ in range(runs):
        h = rng.gauss(0.0, 0.03)
        probes.append(ProbeRun(tuple(math.exp(h + rng.gauss(0, 0.005)) for _ in range(20))))
        effects.append(gain * h + rng.gauss(0.0, 0.003))
    return probes, effects


def test_the_gain_and_the_unexplained_run_effect_come_from_the_baseline():
    rng = random.Random(1)
    probes, effects = _baseline(rng, 20, gain=1.0)
    current = [ProbeRun(tuple(1.10 * math.exp(rng.gauss(0, 0.005)) for _ in range(20)))]
    move = host_move("memory", probes, effects, current)
    assert move is not None
    assert move.ratio == pytest.approx(1.10, rel=0.03)
    assert move.gain == pytest.approx(1.0, abs=0.1)
    assert move.gain_known
    assert math.sqrt(move.residual_var) < 0.5 * math.sqrt(move.run_effect_var)
    followed_not = host_move("memory", *_baseline(random.Random(2), 20, gain=0.0), current)
    assert followed_not is not None
    assert followed_not.gain == pytest.approx(0.0, abs=0.1)


def test_a_probe_without_enough_history_is_no_evidence_and_says_why():
    rng = random.Random(3)
    probes, effects = _baseline(rng, MIN_PROBE_RUNS - 1, gain=1.0)
    now = [{"memory": ProbeRun((1.0, 1.0))}]
    evidence = host_evidence([{"memory": p} for p in probes], effects, now)
    assert not evidence.usable
    assert f"{MIN_PROBE_RUNS} needed" in evidence.notes[0]


def test_unknown_run_effects_leave_the_gain_unknown_and_the_move_fully_creditable():
    """Fewer than 8 benchmarks: no run effect is estimated (all 0). The gain cannot be told,
    so a timing is judged for the whole probe move and none of it (not for none alone)."""
    rng = random.Random(4)
    probes, _ = _baseline(rng, 12, gain=1.0)
    move = host_move("memory", probes, [0.0] * 12, [ProbeRun((1.2, 1.2, 1.2))])
    assert move is not None
    assert not move.gain_known
    assert move.gain_high == 1.0
    evidence = HostEvidence((move,))
    assert evidence.banded(2.58)


def test_the_host_moved_only_beyond_its_usual_spread():
    rng = random.Random(5)
    probes, effects = _baseline(rng, 20, gain=1.0)
    usual = host_move("memory", probes, effects, [ProbeRun(tuple([math.exp(0.02)] * 20))])
    far = host_move("memory", probes, effects, [ProbeRun(tuple([math.exp(0.20)] * 20))])
    assert usual is not None
    assert far is not None
    assert not HostEvidence((usual,)).named(2.58)
    assert HostEvidence((far,)).named(2.58)


def _cell_run(rng: random.Random, probe_levels: list[float], gen_bias: float) -> Run:
    """Eight cells, prefill then generate per cell, one test a second; the probe read before
    each test and at the end at `probe_levels[i]` (the host's level then), each test at the
    host's level midway between its two points, generate's inside prefill `gen_bias` times the
    module's."""
    benches: dict[str, BenchmarkResult] = {}
    points, values = [], []
    t, level_i = 0.0, 0
    for c in range(8):
        for measurement in ("prefill", "generate"):
            level = math.sqrt(probe_levels[level_i] * probe_levels[level_i + 1])
            points.append({"at": "x", "session_s": t, "others_cores": 0.0})
            values.append(0.02 * probe_levels[level_i] * math.exp(rng.gauss(0, 0.003)))
            level_i += 1
            rounds = tuple(0.1 * level * math.exp(rng.gauss(0, 0.01)) for _ in range(3))
            extra: dict[str, object] = {
                "cell_id": f"m{c}",
                "measurement": measurement,
                "session_window_s": [t + 0.1, t + 0.9],
            }
            if measurement == "generate":
                extra["generate_prefill_rounds_s"] = [r * gen_bias for r in rounds]
            name = f"test_{measurement}[m{c}]"
            benches[name] = BenchmarkResult(name, name, measurement, {}, rounds, extra)
            t += 1.0
    points.append({"at": "end", "session_s": t, "others_cores": 0.0})
    values.append(0.02 * probe_levels[-1])
    probe = BenchmarkResult(
        "host_probe::host_probe[memory]",
        "host_probe[memory]",
        "host_probe",
        {},
        tuple(values),
        {"host_probe": "memory", "points": points, "others_cpus": 2},
    )
    return Run("m", "m", "c", "main", False, "", {}, (), benches, 0.0, probes=(probe,))


def test_the_consistency_line_allows_what_the_probes_measured_between_the_two_figures():
    rng = random.Random(6)
    # the host slows 15 % from one test to the next: each cell's generate ran on a host 15 %
    # slower than its prefill did, and the probes around them saw it
    levels = [math.exp(0.14 * i) for i in range(17)]
    host = consistency_rows(_cell_run(rng, levels, 1.0))
    prefill = [r for r in host if r.phase == "prefill"]
    assert all(r.host_moved for r in prefill)
    assert all(r.within_noise for r in prefill)  # x1.15: what the host did
    assert all(r.ratio > 1.1 for r in prefill)
    # the probes held, generate's prefill 30 % slower: ours to explain, outside the noise
    steady = consistency_rows(_cell_run(rng, [1.0] * 17, 1.3))
    prefill = [r for r in steady if r.phase == "prefill"]
    assert not any(r.host_moved for r in prefill)
    assert not any(r.within_noise for r in prefill)
    text = summarize_consistency(steady).text
    assert "the host held, so it is ours to explain" in text
    assert "(probes)" in prefill[0].allowed_text


def test_a_timeline_needs_two_quiet_points_with_times():
    rng = random.Random(7)
    run = _cell_run(rng, [1.0] * 17, 1.0)
    found = timeline(run)
    assert found is not None
    assert len(found.points["memory"]) == 17


def test_a_benchmark_reads_the_probe_level_of_its_own_window():
    """Issue 51: the level at a window is the line between the points around its middle (with
    that reading's error), the nearest point outside them; not the run's median point."""
    from reports.analysis.timeline import Timeline  # noqa: PLC0415

    line = Timeline({"memory": ((0.0, 0.0), (10.0, 0.2), (20.0, 0.1))}, {"memory": 0.01})
    level, var = line.at("memory", (4.0, 6.0)) or (math.nan, math.nan)
    assert level == pytest.approx(0.1)
    assert var == pytest.approx(0.5 * 0.01**2)  # halfway: each point weighs a half
    level, var = line.at("memory", (12.0, 13.0)) or (math.nan, math.nan)
    assert level == pytest.approx(0.2 - 0.25 * 0.1)
    assert line.at("memory", (25.0, 30.0)) == (0.1, 0.01**2)
    assert line.at("compute", (0.0, 1.0)) is None


def test_each_shard_s_benchmarks_read_the_probes_of_their_own_file(tmp_path: Path):
    """A run merged from two shard files has two clocks: a benchmark's window is read against
    the probe points of its own file, never the other shard's points at the same seconds."""
    from reports.analysis.metrics import window_levels  # noqa: PLC0415

    def shard(i: int, probe_s: float) -> dict:
        points = [{"session_s": t, "calls_s": [probe_s] * 3} for t in (0.0, 10.0)]
        bench = _bench(f"test_decode[c{i}]", [1.0, 1.1])
        bench["extra_info"] |= {"session_window_s": [4.0, 6.0]}
        probe = _probe("memory", [probe_s, probe_s], {"points": points})
        return {
            "machine_info": {"node": "n", "system": "Linux", "machine": "x86_64"},
            "commit_info": {"id": "a" * 40, "branch": "main"},
            "datetime": "2026-01-01T00:00:00+00:00",
            "benchmarks": [bench, probe],
        }

    for i, probe_s in ((1, 0.02), (2, 0.04)):
        (tmp_path / f"shard{i}.json").write_text(json.dumps(shard(i, probe_s)), encoding="utf-8")
    ((run,),) = load_history([tmp_path]).machines.values()
    levels = window_levels(run)
    for i, probe_s in ((1, 0.02), (2, 0.04)):
        bench = run.benchmarks[f"benchmarks/test_decode.py::test_decode[c{i}]"]
        assert levels(bench)["memory"][0] == pytest.approx(math.log(probe_s))


def test_a_new_machine_image_inside_the_baseline_is_a_level_not_a_host_move():
    """Issue 51: probe levels were centred on the whole baseline while run effects were centred
    per segment: after a step (+10 %, a new VM image) the probes reported a move of about half
    of it that the benchmarks did not see. Centred on the newest segment, the move is none."""
    rng = random.Random(51)

    def run(level: float) -> ProbeRun:
        return ProbeRun(tuple(0.05 * math.exp(level + rng.gauss(0, 0.004)) for _ in range(8)))

    baseline = [run(0.0) for _ in range(10)] + [run(math.log(1.10)) for _ in range(10)]
    effects = [rng.gauss(0, 0.01) for _ in baseline]
    move = host_move("memory", baseline, effects, [run(math.log(1.10))])
    assert move is not None
    assert abs(move.log_move) < 0.01
    assert math.sqrt(move.spread_var) < 0.01  # the step is not the host's usual spread either
