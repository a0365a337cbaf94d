"""A quantized cell's speed-up over its dense cell from interleaved rounds, with its interval.

`benchmarks/test_interleaved.py` times the cells of one comparison group in turn: round r of a
variant and round r of the dense cell were timed seconds apart, so whatever the host did moves
both. The speed-up is dense time / variant time (above 1: the variant is faster), estimated from
the pairs exactly as an A/B run's ratio is (`reports.analysis.paired`): per pair the log-ratio
log(variant_r / dense_r), Yuen's 20 % trimmed mean with its error inflated for lag-1
correlation between neighbouring pairs (`correlated_estimate`), plus a run-level term, and a
two-sided `CI_LEVEL` interval (`decision.interval`, Student t on the Welch-Satterthwaite degrees
of freedom). The interval is of the speed-up, so its bounds are inverted.

The run-level term is what pairing cannot cancel: each run is a new process that builds its
variants anew (allocation, layout, thread placement against whatever else holds the cores), so
two runs' ratios differ by more than their pairs' own error. Between two runs of
matrix/cpu-quant.yaml on the 2-core development VM (40 ratios, pairs' own error 0.6 %), that
spread was 1.3-1.5 % per run, with three ratios 5-6 % apart: the term is `paired`'s
`PROCESS_INTERLEAVE_CV` (3 %), the run-level term of an A/B run whose sides are two processes,
which the same measurement supports.

`paired_speedup(dense_s, variant_s)` is pure; fewer than `paired.MIN_PAIRS` pairs give None.

Deliberately not here: reading records (`reports.render.quant`), judging (the gate judges each
record's own timing against history, as any other).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from reports.analysis.decision import interval
from reports.analysis.paired import (
    MIN_PAIRS,
    PROCESS_INTERLEAVE_CV,
    correlated_estimate,
    log_ratios,
)

CI_LEVEL = 0.95


@dataclass(frozen=True)
class Speedup:
    """dense / variant from paired rounds, its `CI_LEVEL` interval, how many pairs."""

    ratio: float
    ci_low: float
    ci_high: float
    pairs: int

    def contains(self, other: Speedup) -> bool:
        """Whether the two intervals overlap (two runs agree within their uncertainty)."""
        return self.ci_low <= other.ci_high and other.ci_low <= self.ci_high


def paired_speedup(
    dense_s: Sequence[float],
    variant_s: Sequence[float],
    *,
    process_cv: float = PROCESS_INTERLEAVE_CV,
    ci_level: float = CI_LEVEL,
) -> Speedup | None:
    """The variant's speed-up over the dense cell from rounds paired by index (module
    docstring); None with fewer than `MIN_PAIRS` pairs. Round times must be positive."""
    diffs = log_ratios(dense_s, variant_s)  # log(variant / dense) per pair
    if len(diffs) < MIN_PAIRS:
        return None
    estimate = correlated_estimate(diffs)
    evidence = estimate.evidence(threshold=0.0, process_cv=process_cv)
    low, high = interval(evidence.log_ratio, evidence.se, evidence.df, ci_level)
    return Speedup(
        ratio=math.exp(-estimate.log_ratio), ci_low=1.0 / high, ci_high=1.0 / low, pairs=len(diffs)
    )
