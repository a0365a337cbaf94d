"""`--interleave process` judged on synthetic runs: the run-level term is the run's own spread.

The 2-core VM's A/A process runs scattered 29-41 % between the two processes' levels; with the
fixed 3 % term such runs failed (the issue: 1 of 2 failed, the other a false `improved`).
"""

from __future__ import annotations

import random

from reports.analysis.robustness import process_run


def test_a_a_process_runs_rarely_fail_with_the_runs_own_term():
    rng = random.Random(7)
    runs = 30
    own = sum("fail" in process_run(rng, 0.30, [0.0] * 49) for _ in range(runs))
    fixed = sum("fail" in process_run(rng, 0.30, [0.0] * 49, term=0.03) for _ in range(10))
    assert own <= 3  # <= 1 in 20 promised; 1 in 30 expected
    assert fixed >= 8  # the fixed 3 % term failed nearly every such run


def test_on_a_quiet_machine_the_term_stays_small_and_slowdowns_are_caught():
    rng = random.Random(8)
    caught = false = 0
    runs = 15
    for _ in range(runs):
        verdicts = process_run(rng, 0.02, [0.25] * 6 + [0.0] * 43)
        caught += verdicts[:6].count("fail")
        false += "fail" in verdicts[6:]
    assert caught / (6 * runs) >= 0.9
    assert false <= 1
