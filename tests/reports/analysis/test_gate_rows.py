"""Issue 41's and issue 51's "Done when" rows as property tests: realised rates over seeded
synthetic suites with host probes, judged by the real gate (`reports.analysis.gate_rows`,
`worlds`, `factor_worlds`).

`SUITES` suites per issue-41 row keep the battery near a minute on the 2-core VM; each bound is
the issue's target widened by two binomial standard errors at that count (`_at_least`,
`_at_most`), so a bound that holds at 400 suites (`python -m reports simulate --only machine
--robustness-suites 400`, docs/reports.md) is not failed by the draw of 50. The issue-51 rows
are the issue's own counts of 20 suites. Every row fails on the rules before its issue (41: a
suite-wide move re-centred away, a host move judged as the code, no probes read as PASS,
pooled variance that ignored a shared host state; 51: one gain per probe kind for the whole
suite, a PASS over undecided timings, probes in the code's process).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from reports.analysis.gate_rows import (
    FACTOR_WORLDS,
    WORLDS,
    decode_generate,
    decode_only,
    host_slower,
    memory_slower,
    rates,
    six,
    slower,
)

SUITES = 50
#: The Done-when worlds: a Gaussian host and a Student t(3) host.
DONE_WHEN = ("gaussian", "t3")


def _at_least(target: float, n: int = SUITES) -> float:
    return target - 2.0 * math.sqrt(target * (1.0 - target) / n)


def _at_most(target: float, n: int = SUITES) -> float:
    return target + 2.0 * math.sqrt(target * (1.0 - target) / n)


@pytest.mark.parametrize("world", DONE_WHEN)
def test_unchanged_suites_never_fail_and_read_undecided_when_their_timings_cannot_decide(world):
    """This world's timings have an MDE near 24 % (run CV 2 %, three rounds of 3 %): most stay
    undecided, so since issue 51 an unchanged suite reads INCONCLUSIVE (undecided), not PASS;
    before, one passing metric made a PASS. It must not read a fail, a lean or a shift."""
    for probes in (True, False):
        w = replace(WORLDS[world], probes=probes)
        r = rates(w, SUITES, f"t41-aa-{world}-{probes}")
        assert r.outcome["pass"] + r.outcome["undecided"] >= _at_least(0.90), (probes, r.text())
        assert r.outcome["undecided"] >= _at_least(0.80), (probes, r.text())
        assert r.any_fail <= _at_most(0.05), (probes, r.text())


@pytest.mark.parametrize("world", DONE_WHEN)
def test_every_timing_ten_percent_slower_with_steady_probes_fails(world):
    r = rates(WORLDS[world], SUITES, f"t41-all10-{world}", code=slower(1.10))
    assert r.outcome["fail"] >= _at_least(0.90), r.text()


@pytest.mark.parametrize("world", DONE_WHEN)
def test_decode_and_generate_ten_percent_slower_with_steady_probes_fail(world):
    """Issue 51: 10 of 20 such suites failed with one gain per probe kind for the suite; each
    timing's own model leaves the decode and generate group moves decided."""
    r = rates(WORLDS[world], SUITES, f"t41-dg10-{world}", code=slower(1.10), chosen=decode_generate)
    assert r.outcome["fail"] >= _at_least(0.90), r.text()


@pytest.mark.parametrize("world", DONE_WHEN)
def test_decode_and_generate_thirty_percent_slower_are_caught_and_prefill_is_not_improved(world):
    r = rates(WORLDS[world], SUITES, f"t41-dg30-{world}", code=slower(1.30), chosen=decode_generate)
    assert r.caught >= _at_least(0.95, SUITES * 24), r.text()
    assert r.others_improved == 0.0  # nothing is improved because others got slower


@pytest.mark.parametrize("world", DONE_WHEN)
def test_a_host_ten_percent_slower_neither_fails_nor_passes(world):
    r = rates(WORLDS[world], SUITES, f"t41-host-{world}", host=host_slower(1.10))
    assert r.any_fail <= _at_most(0.05), r.text()
    assert r.outcome["pass"] <= _at_most(0.05), r.text()
    assert r.outcome["shift"] >= _at_least(0.90), r.text()  # named: machine or code


@pytest.mark.parametrize("world", DONE_WHEN)
def test_a_slower_host_does_not_hide_six_thirty_percent_regressions(world):
    r = rates(
        WORLDS[world],
        SUITES,
        f"t41-hostsix-{world}",
        code=slower(1.30),
        host=host_slower(1.10),
        chosen=six,
    )
    assert r.caught >= _at_least(0.80, SUITES * 6), r.text()


@pytest.mark.parametrize("world", DONE_WHEN)
def test_three_reruns_of_an_unchanged_commit_do_not_fail(world):
    """Pooled re-runs decide more timings than one run (most suites PASS with their own host
    states), and never fail."""
    base = WORLDS[world]
    for shared in (True, False):
        w = replace(base, reruns=3, shared_host=shared)
        r = rates(w, SUITES, f"t41-rr-{world}-{shared}")
        assert r.outcome["pass"] + r.outcome["undecided"] >= _at_least(0.85), (shared, r.text())
        assert r.any_fail <= _at_most(0.05), (shared, r.text())


@pytest.mark.parametrize("world", DONE_WHEN)
def test_reruns_sharing_a_host_state_at_the_threshold_rarely_fail(world):
    """Pooling re-runs that share one host state divided its variance by n: 5 % false fails at
    exactly the threshold (issue 41)."""
    base = WORLDS[world]
    w = replace(base, reruns=3, shared_host=True)
    r = rates(w, SUITES, f"t41-rr5-{world}", code=slower(1.05))
    assert r.any_fail <= _at_most(0.05), r.text()


@pytest.mark.parametrize("world", DONE_WHEN)
def test_without_probes_a_suite_wide_thirty_percent_is_never_pass(world):
    r = rates(replace(WORLDS[world], probes=False), SUITES, f"t41-bare-{world}", code=slower(1.30))
    assert r.outcome["pass"] == 0.0, r.text()
    assert r.outcome["shift"] >= _at_least(0.95), r.text()  # machine or code, named


@pytest.mark.parametrize("world", DONE_WHEN)
def test_six_undecided_ten_percent_slowdowns_lean_and_unchanged_suites_lean_at_its_size(world):
    r = rates(WORLDS[world], SUITES, f"t41-lean6-{world}", code=slower(1.10), chosen=six)
    assert r.outcome["pass"] <= _at_most(0.10), r.text()
    aa = rates(WORLDS[world], SUITES, f"t41-leanaa-{world}")
    assert aa.outcome["lean"] <= _at_most(0.05), aa.text()


# Issue 51's two-factor host (`FACTOR_WORLDS`): each benchmark follows a memory and a compute
# factor by its own sensitivities, the host drifts inside a run, and the probes read their own
# factor within 1 % per point. `FACTOR_SUITES` per row (20: the rows are "of 20").
FACTOR_SUITES = 20
TWO = FACTOR_WORLDS["two-factor"]


def test_two_factor_unchanged_suites_pass():
    """Issue 51: PASS 15 of 20 with one gain per kind for the whole suite; >= 16 of 20 now."""
    r = rates(TWO, FACTOR_SUITES, "t51-aa")
    assert r.outcome["pass"] >= 16 / 20, r.text()
    assert r.any_fail <= 1 / 20, r.text()


def test_two_factor_memory_twelve_percent_slower_in_the_pr_run_is_not_a_fail():
    r = rates(TWO, FACTOR_SUITES, "t51-mem12", host=memory_slower(1.12))
    assert r.any_fail <= 1 / 20, r.text()


def test_two_factor_the_twelve_decode_benchmarks_ten_percent_slower_fail():
    """Issue 51: 3 of 20 failed, 0 of 240 timings caught, though the memory probe said how far
    each run's decode should have moved. One by one the timings stay near their MDE (~15 % at
    a 2 % residual): the decode group move carries the verdict (docs/reports.md)."""
    r = rates(TWO, FACTOR_SUITES, "t51-dec10", code=slower(1.10), chosen=decode_only)
    assert r.outcome["fail"] >= 18 / 20, r.text()


def test_probes_in_the_code_s_process_would_hide_a_process_wide_slowdown():
    """Why the probes run in their own process: a setting that slows every timing 10 % and the
    in-process probes with it reads as the host's (not FAIL); probes of their own see nothing
    move, and the suite fails."""
    own = rates(TWO, FACTOR_SUITES, "t51-leak0", code=slower(1.10))
    leaked = rates(replace(TWO, leak=1.0), FACTOR_SUITES, "t51-leak1", code=slower(1.10))
    assert own.outcome["fail"] >= 18 / 20, own.text()
    assert leaked.outcome["fail"] <= 2 / 20, leaked.text()
