"""The consistency line: one computation timed by two modules agrees within the noise, or is named.

Synthetic runs with known answers, over many seeds: the realised rate of "outside the noise"
when both modules time the same thing, and of detection when one of them is 25 % off.
"""

from __future__ import annotations

import math
import random

import pytest

from reports.analysis.consistency import consistency_rows, summarize_consistency
from reports.history.load import Run
from reports.history.runfile import BenchmarkResult

CELLS = 8


def bench(cell: str, measurement: str, rounds: list[float], extra: dict[str, object]):
    return BenchmarkResult(
        fullname=f"benchmarks/test_{measurement}.py::test_{measurement}[{cell}]",
        name=f"test_{measurement}[{cell}]",
        group=measurement,
        params={"model": cell},
        rounds_s=tuple(rounds),
        extra={"cell_id": cell, "measurement": measurement, **extra},
    )


def noisy(rng: random.Random, center: float, n: int, sd: float) -> list[float]:
    return [center * math.exp(rng.gauss(0.0, sd)) for _ in range(n)]


def make_run(
    seed: int,
    *,
    prefill_bias: float = 1.0,
    decode_bias: float = 1.0,
    rounds: int = 3,
    sd: float = 0.02,
    slope_s_per_ktok: float = 0.0,
    drift_sd: float = 0.0,
    cell0_bias: float = 1.0,
) -> Run:
    """Every cell runs prefill, decode and generate; `*_bias` scales generate's inside figure
    (`cell0_bias`: cell m0's only, both phases). `drift_sd`: each module's window runs at its own
    host level, exp(N(0, drift_sd)), shared by all its rounds (a shared host between modules)."""
    rng = random.Random(seed)
    benches = []

    def level() -> float:
        # No draw without drift: the other tests keep the random stream they were written on.
        return math.exp(rng.gauss(0.0, drift_sd)) if drift_sd else 1.0

    for c in range(CELLS):
        cell = f"m{c}"
        prefill_s = 0.1 * (1 + c)
        step_s = 0.01 * (1 + c)
        own = cell0_bias if c == 0 else 1.0
        benches.append(bench(cell, "prefill", noisy(rng, prefill_s * level(), rounds, sd), {}))
        benches.append(bench(cell, "decode", noisy(rng, step_s * level(), rounds, sd), {}))
        generate_level = level()
        prefill_bias_here = prefill_bias * own * generate_level
        steps = [
            s + slope_s_per_ktok * i / 1000.0
            for i, s in enumerate(noisy(rng, step_s * decode_bias * own * generate_level, 15, sd))
        ]
        benches.append(
            bench(
                cell,
                "generate",
                noisy(rng, 1.0, rounds, sd),
                {
                    "generate_prefill_rounds_s": noisy(
                        rng, prefill_s * prefill_bias_here, rounds, sd
                    ),
                    "step_s": steps,
                    "decode_slope_s_per_ktok": slope_s_per_ktok,
                },
            )
        )
    return Run(
        machine_id="m",
        machine_label="m",
        commit_id="c",
        branch="main",
        dirty=False,
        datetime="2026-12-01T00:00:00",
        env={},
        paths=(),
        benchmarks={b.fullname: b for b in benches},
        mtime_s=0.0,
    )


@pytest.mark.parametrize("rounds", [2, 3, 10])
def test_the_same_computation_is_rarely_called_inconsistent(rounds):
    outside = total = 0
    for seed in range(200):
        rows = consistency_rows(make_run(seed, rounds=rounds))
        assert len(rows) == 2 * CELLS
        outside += sum(not r.within_noise for r in rows)
        total += len(rows)
    # A 1 % two-sided test per pair: the realised rate stays near it (binomial slack).
    assert outside / total <= 0.025, (outside, total)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_a_quarter_off_is_caught_in_almost_every_cell(phase):
    caught = total = 0
    for seed in range(100):
        run = make_run(seed, **{f"{phase}_bias": 1.25})
        rows = [r for r in consistency_rows(run) if r.phase == phase]
        caught += sum(not r.within_noise and not r.within_band for r in rows)
        total += len(rows)
    assert caught / total >= 0.95, (caught, total)


def test_the_decode_slope_is_not_read_as_a_disagreement():
    # 15 steps that grow 40 % of a step per 1,000 tokens... scaled so the last is ~8 % slower.
    run = make_run(1, sd=0.005, slope_s_per_ktok=0.01 * 6.0)
    decode = next(r for r in consistency_rows(run) if r.phase == "decode" and r.cell_id == "m0")
    assert decode.within_noise, decode
    assert decode.ratio == pytest.approx(1.0, abs=0.02)


def test_an_old_file_with_only_the_generate_median_is_still_compared():
    run = make_run(3)
    for b in run.benchmarks.values():
        if b.group == "generate":
            extra = dict(b.extra)
            rounds = extra.pop("generate_prefill_rounds_s")
            extra["generate_prefill_s"] = sorted(rounds)[len(rounds) // 2]
            object.__setattr__(b, "extra", extra)
    rows = [r for r in consistency_rows(run) if r.phase == "prefill"]
    assert len(rows) == CELLS
    assert all(r.generate_samples == 1 for r in rows)


def test_cells_without_generate_have_no_row_and_the_summary_names_the_furthest():
    run = make_run(5, prefill_bias=1.3)
    only = {k: b for k, b in run.benchmarks.items() if b.group != "generate" or b.cell_id == "m2"}
    object.__setattr__(run, "benchmarks", only)
    rows = consistency_rows(run)
    assert {r.cell_id for r in rows} == {"m2"}
    summary = summarize_consistency(rows)
    assert summary.rows == 2
    assert "m2 prefill \u00d71.3" in summary.text
    assert summarize_consistency([]).text == ""


@pytest.mark.parametrize("rounds", [3, 40])
def test_host_drift_between_the_modules_windows_is_noise_and_is_named(rounds):
    # Each module's window at its own level (8 % SD, as this VM's memory bandwidth moves), the
    # rounds inside it tight: the rounds' spread alone called 84-94 % of these rows inconsistent.
    outside = total = 0
    named = []
    for seed in range(200):
        rows = consistency_rows(make_run(seed, rounds=rounds, sd=0.01, drift_sd=0.08))
        outside += sum(not r.within_noise for r in rows)
        total += len(rows)
        named.append(summarize_consistency(rows).window_sd)
    assert outside / total <= 0.04, (outside, total)
    # Two windows per ratio: the scatter of log ratios is ~0.08 * sqrt(2) = 0.11.
    assert 0.07 <= sorted(named)[len(named) // 2] <= 0.15
    assert "the host's level moved ~" in summarize_consistency(rows).text


def test_one_cell_twice_as_slow_stands_out_of_the_host_drift():
    caught = 0
    for seed in range(200):
        rows = consistency_rows(make_run(seed, sd=0.01, drift_sd=0.08, cell0_bias=2.0))
        caught += sum(not r.within_noise for r in rows if r.cell_id == "m0")
    assert caught / 400 >= 0.95, caught


def test_a_quiet_host_has_no_between_window_term_to_speak_of():
    rows = consistency_rows(make_run(4, sd=0.02))
    summary = summarize_consistency(rows)
    assert summary.window_sd < 0.03
