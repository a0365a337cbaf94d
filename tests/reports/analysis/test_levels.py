"""One rule for both sides (reports.analysis.levels, noise_model, series), on seeded suites.

Realised rates over many seeds, not one draw: few rounds with preempted rounds, a machine
noisier than the prior with few baseline runs, main's recent step, a recurring state.
"""

from __future__ import annotations

import math
import random

from reports.analysis.judge import judge_suite
from reports.analysis.levels import keep_mask, recent_level_start, run_location
from reports.analysis.robustness import World, fails, make_suite
from reports.analysis.series import AnalysisConfig, MetricSeries


def test_run_location_ignores_preempted_rounds():
    assert run_location([1.0, 2.5]) == 1.0  # one of two preempted
    assert run_location([1.0, 2.0, 2.5]) == 1.0  # two of three
    assert run_location([1.0, 1.01, 0.99, 3.0, 2.0]) == 1.0  # 2nd smallest of 5
    assert run_location([float(i) for i in range(10)]) == 3.0


def test_a_recurring_state_is_kept_and_a_lone_burst_is_not():
    values = [0.0] * 17 + [0.22, 0.22, 0.22]
    values = [v + 0.001 * i for i, v in enumerate(values)]
    assert all(keep_mask([*values[:17], 0.22, 0.001, 0.22, 0.002, 0.22, 0.0]))
    lone = [0.001 * (i % 3) for i in range(20)]
    lone[5] = 0.6
    assert keep_mask(lone).count(False) == 1
    lone[5] = 0.0
    lone[-1] = 0.6  # the newest run alone far out: a burst like any other
    assert keep_mask(lone)[-1] is False
    lone[-2] = 0.6  # two of the newest far out on one side: a possible new level, kept
    assert keep_mask(lone)[-2:] == [True, True]


def test_a_short_new_level_needs_two_runs_and_one_run_alone_is_never_a_level():
    base = [0.001 * (i % 4) for i in range(18)]
    assert recent_level_start([*base, 0.14, 0.14]) == 18
    assert recent_level_start([*base, 0.14, 0.14, 0.15]) == 18
    assert recent_level_start([*base, 0.14]) is None  # the run being judged cannot decide it
    assert recent_level_start([*base, 0.14, 0.0]) is None


def _suite(rng: random.Random, k: int, cv: float) -> list[MetricSeries]:
    out = []
    for b in range(36):
        level = math.exp(rng.uniform(-6, 0))

        def run(factor: float, lv: float = level) -> tuple[float, ...]:
            e = rng.gauss(0, math.log1p(cv))
            return tuple(lv * factor * math.exp(e + rng.gauss(0, 0.01)) for _ in range(5))

        base = tuple(run(1.0) for _ in range(k))
        out.append(MetricSeries("m", f"b{b}", "time_s", "timing", base, run(1.05)))
    return out


def test_few_baseline_runs_on_a_noisier_machine_keep_the_size_at_alpha():
    """5 % run CV (the prior says 2 %), 2-5 baseline runs, a true slowdown of exactly the
    threshold: the raw one-sided p <= 1 % at most ~1 % of the time (was 2.3-3.3 %)."""
    for k in (2, 3, 5):
        rng = random.Random(k)
        hits = total = 0
        for _ in range(60):
            for v in judge_suite(_suite(rng, k, 0.05), AnalysisConfig()):
                total += 1
                hits += (v.p_value or 1.0) <= 0.01
        assert hits / total <= 0.01 + 3 * math.sqrt(0.01 * 0.99 / total)


def _rate(world: World, suites: int, seed: str, slowdown: float) -> tuple[float, float]:
    rng = random.Random(seed)
    false = caught = 0
    for _ in range(suites):
        slowed = set(rng.sample(range(world.benchmarks), 6)) if slowdown else set()
        last = world.baseline_runs
        f = fails(
            make_suite(
                rng,
                world,
                lambda b, r, s=slowed, n=last: 1.0 + slowdown if b in s and r == n else 1.0,
            )
        )
        false += any(x for b, x in enumerate(f) if b not in slowed)
        caught += sum(f[b] for b in slowed)
    return false / suites, caught / (6 * suites) if slowdown else math.nan


def test_heavy_tails_at_2_and_3_rounds_keep_unchanged_suites_green():
    """t(3) rounds, 2 % preempted 1.5-3x, 36 benchmarks, 20 baseline runs: was 14 of 20
    suites with a fail at 2 rounds; now <= 1 in 20 (40 suites each, binomial slack)."""
    for rounds in (2, 3):
        false, _ = _rate(World(rounds=rounds), 40, f"aa{rounds}", 0.0)
        assert false <= 0.05 + 0.05


def test_25_percent_slowdowns_are_caught_at_3_rounds():
    _, caught = _rate(World(rounds=3), 25, "slow25", 0.25)
    assert caught >= 0.75  # 150 slowed benchmarks; ~83 % over 600 (python -m reports simulate)


def test_a_step_on_main_one_to_four_runs_ago_is_the_baseline_not_a_fail():
    rng = random.Random(11)
    world, failed = World(), 0
    for t in range(24):
        start = world.baseline_runs - (1 + t % 4)
        stepped = set(rng.sample(range(world.benchmarks), 6))
        failed += any(
            fails(
                make_suite(
                    rng, world, lambda b, r, s=stepped, a=start: 1.15 if b in s and r >= a else 1.0
                )
            )
        )
    assert failed <= 2


def test_a_current_run_in_a_recurring_state_is_rarely_a_fail():
    """1.25x in 15 % of runs (and in the PR's): was 25 of 30. Where the baseline saw the state
    at least twice, the fails are the windows that start with a cluster of it (indistinguishable
    from main's step down): ~1.5 %; overall the floor is the ~18 % of windows that saw it less."""
    rng = random.Random(12)
    world = World(rounds=5, tail_df=math.inf)
    failed = seen = failed_seen = 0
    trials = 200
    for _ in range(trials):
        states = [rng.random() < 0.15 for _ in range(world.baseline_runs)] + [True]
        f = fails(
            make_suite(rng, world, lambda b, r, st=states: 1.25 if b == 0 and st[r] else 1.0)
        )[0]
        failed += f
        if sum(states[:-1]) >= 2:
            seen += 1
            failed_seen += f
    assert failed / trials <= 0.10
    assert failed_seen / seen <= 0.035


def test_a_burst_between_runs_at_todays_level_does_not_cut_the_baseline():
    """Segmentation sees ....SSS...... as two steps; the medians see one level with a state."""
    from reports.analysis.changepoints import detect_steps  # noqa: PLC0415
    from reports.analysis.levels import level_start  # noqa: PLC0415

    burst = [0.0] * 4 + [0.22] * 3 + [0.0] * 13
    rng = random.Random(3)
    logs = [v + rng.gauss(0, 0.01) for v in burst]
    steps = detect_steps(logs, min_rel_step=0.025)
    assert len(steps) == 2  # what the segmentation alone would cut at
    assert level_start(logs, steps) is None
    # a real step (main got 20 % faster 8 runs ago) still cuts
    stepped = [0.2] * 12 + [0.0] * 8
    logs = [v + rng.gauss(0, 0.01) for v in stepped]
    cut = level_start(logs, detect_steps(logs, min_rel_step=0.025))
    assert cut is not None
    assert cut.index == 12
    # a regression on main that was fixed, then a state: back at the old level after the
    # excursion, 5 of 17 runs off it: still one level (the excursion is in the spread)
    fixed = [0.0] * 8 + [0.15] * 5 + [0.0] * 4
    logs = [v + rng.gauss(0, 0.01) for v in fixed]
    assert level_start(logs, detect_steps(logs, min_rel_step=0.025)) is None


def test_pooled_reruns_keep_the_tests_size_when_run_to_run_noise_dominates():
    """Issue 17: `--rerun` pooling divided the pooled rounds' variance by R, too small when the
    run-to-run term dominates (2.1-2.5 % fails at the threshold). The run is the unit: each
    rerun is summarised like a baseline run and their mean carries tau^2 / R when the re-runs
    are independent, as here (issue 41: re-runs that share one host state carry
    tau^2 (rho + (1 - rho) / R), `test_series.py` and `test_gate_rows.py`'s shared re-runs at
    the threshold)."""
    from dataclasses import replace  # noqa: PLC0415

    from reports.analysis.series import AnalysisConfig, MetricSeries, judge_noisy  # noqa: PLC0415
    from reports.analysis.simulate import draw_run  # noqa: PLC0415

    config = AnalysisConfig()
    sim = replace(World(rounds=3, tail_df=math.inf).sim(), run_cv=0.05)
    at_threshold = 1.0 + config.threshold
    for reruns in (1, 3):
        rng = random.Random(reruns)
        trials, failed = 1500, 0
        for _ in range(trials):
            base = tuple(draw_run(rng, 1.0, sim, 0.0) for _ in range(20))
            cur = [draw_run(rng, at_threshold, sim, 0.0) for _ in range(reruns)]
            series = MetricSeries(
                "m", "b", "time_s", "timing", base, cur[-1], current_repeats=tuple(cur[:-1])
            )
            verdict = judge_noisy(series, config)
            failed += verdict.p_value is not None and verdict.p_value <= config.alpha
        assert failed / trials <= 0.02, (reruns, failed / trials)
