"""Capacity within the SLOs: the highest Poisson request rate whose load pass meets them (pure).

What vLLM's `sweep serve_sla` and guidellm's sweep search for. `search_capacity(probe, ...)`
never sends a request: it calls the caller's `probe(rate_req_per_s) -> ProbeOutcome`, which runs
one load pass at that rate and says what share of its requests met every SLO (errors count as
missing: requests meeting / requests sent) and how many it sent, with any figures to keep.

- **Met**: a pass meets when its `slo_met_share` >= `share` (default 0.9). A rate's **verdict**
  pools every pass run at it: requests meeting over requests sent, against `share`.
- **Start**: the caller's estimate. `estimated_capacity_req_per_s(single_e2el_s, concurrency)`
  is concurrency / the single-request E2EL: the rate that keeps `concurrency` streams, each as
  fast as one request alone, always busy. An upper estimate on purpose (batching slows each
  stream; Poisson bursts queue before that), because a pass of n requests lasts about
  n / min(rate, capacity): the passes above capacity are the short ones to walk down from.
- **Bracketing**: from the start, multiply the rate by `growth` (2) while every verdict met,
  divide while every verdict missed, clamped to [`min_rate_req_per_s`, `max_rate_req_per_s`]
  (default start / 128 and start x 128: seven doublings either way); then geometric bisection,
  sqrt(lo x hi), until hi / lo <= `resolution` (1.5). Each new rate lies strictly inside the
  bracket, so the verdicts stay ordered.
- **Noise**: a pass of n requests reads a binomial share, so a rate near capacity reads met or
  missed at random. A pass within `recheck_se` (1.0) standard errors, sqrt(share (1 - share) /
  n), of `share` is a close call: it is run once more at the same rate, and the rate judged on
  the two passes pooled (never a third; `recheck_se` 0 never re-runs). On the tests' worlds
  (the share falls through 0.9 at C as a logistic in log rate, 24 requests a pass, start within
  4x of C) the bracket holds C in 86 % of seeds against 81 % with single passes, and a capacity
  above C is claimed in 6 % against 11 %, for 4.2 passes against 3.5 (steeper: 93 / 91 %, 3 /
  5 %). Closer needs more requests a pass: the bracket's ends land where a pass is a coin toss.
- **The bracket over the passes taken**: hi = the lowest rate whose verdict missed, lo = the
  highest rate below it whose verdict met (`bracket_of`). A miss is believed over a met above
  it: a capacity is never claimed at or above a rate that failed. `non_monotone` says the
  passes themselves disagree with a share that falls with the rate: some pass met at or above a
  rate where a pass missed (in a search, a close call whose two passes split, or a pass missed
  below the rate that was finally claimed).

`stopped` says why the search ended: "bracketed" (both sides found, hi / lo <= resolution);
"met at the highest rate allowed" (lo = max, hi None: capacity is at least that); "missed at
the lowest rate allowed" (lo None, hi = min: `sla_rate_req_per_s` is 0.0, meaning no rate tried
met, not a measured zero); "max probes" (the budget ran out first: the bracket found so far,
maybe one-sided or wider than `resolution`). `Capacity.extra_info()` gives the record's fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from benchmarks.harness.errors import ServeError

Stopped = Literal[
    "bracketed",
    "max probes",
    "met at the highest rate allowed",
    "missed at the lowest rate allowed",
]
SHARE = 0.9
RESOLUTION = 1.5  # the bracket's hi / lo at which the search stops
GROWTH = 2.0  # the factor a rate grows or shrinks by until both sides are found
SPAN = 128.0  # the default limits' factor either side of the start: seven doublings
MAX_PROBES = 12
RECHECK_SE = 1.0
# A pass is judged with this much slack, so that 9 of 10 requests meet a share of 0.9 however
# the caller's division rounds.
_SLACK = 1e-9
_RESERVED = frozenset({"rate_req_per_s", "slo_met_share", "requests"})


class CapacityError(ServeError, ValueError):
    """A capacity search's input (a rate, a share, a limit) or a probe's outcome is invalid."""


@dataclass(frozen=True)
class ProbeOutcome:
    """What one load pass at a rate gave: the share of its requests meeting every SLO (requests
    meeting / requests sent, errors counted as missing), how many it sent, and any figures the
    caller wants kept with the probe (names with units, e.g. "ttft_p90_s"; None: not given)."""

    slo_met_share: float
    requests: int
    figures: Mapping[str, float | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.slo_met_share) and 0.0 <= self.slo_met_share <= 1.0):
            raise CapacityError(
                f"slo_met_share {self.slo_met_share} is not valid; the probe must return the "
                "share of its requests meeting every SLO, a fraction in [0, 1]"
            )
        if isinstance(self.requests, bool) or not isinstance(self.requests, int):
            raise CapacityError(f"requests {self.requests!r} is not valid; use a count (int)")
        if self.requests < 1:
            raise CapacityError(
                f"requests {self.requests} is not valid; a pass must send at least one request"
            )
        for name, value in self.figures.items():
            if name in _RESERVED:
                raise CapacityError(
                    f"figure {name!r} is the probe's own field; give it another name"
                )
            if value is not None and not math.isfinite(value):
                raise CapacityError(
                    f"figure {name!r} is {value}; use a finite number, or None where the pass "
                    "gave none"
                )
        # A copy: the caller's dict may change after the pass without changing the record.
        object.__setattr__(self, "figures", dict(self.figures))


class Probe(NamedTuple):
    """One pass of a search, in the order tried."""

    rate_req_per_s: float
    slo_met_share: float
    requests: int
    figures: Mapping[str, float | None]


@dataclass(frozen=True)
class Capacity:
    """The search's answer (module docstring)."""

    sla_rate_req_per_s: float  # lo; 0.0 when no rate met
    sla_bracket: tuple[float | None, float | None]  # (highest met, lowest missed); None: not found
    sla_probes: tuple[Probe, ...]
    stopped: Stopped
    share: float
    non_monotone: bool

    def extra_info(self) -> dict[str, object]:
        """The record's fields: `sla_*`, each probe flat with its figures."""
        probes = [
            {
                "rate_req_per_s": p.rate_req_per_s,
                "slo_met_share": p.slo_met_share,
                "requests": p.requests,
                **p.figures,
            }
            for p in self.sla_probes
        ]
        return {
            "sla_rate_req_per_s": self.sla_rate_req_per_s,
            "sla_bracket": list(self.sla_bracket),
            "sla_probes": probes,
            "sla_share": self.share,
            "sla_stopped": self.stopped,
            "sla_non_monotone": self.non_monotone,
        }


def meets(slo_met_share: float, share: float) -> bool:
    """Whether a pass (or pooled passes) with this share meets `share`."""
    return slo_met_share >= share - _SLACK


def rate_verdicts(probes: Iterable[Probe], share: float) -> dict[float, bool]:
    """Each rate's verdict over its passes pooled (requests meeting / requests sent)."""
    pooled: dict[float, list[float]] = {}
    for p in probes:
        met_sent = pooled.setdefault(p.rate_req_per_s, [0.0, 0.0])
        met_sent[0] += p.slo_met_share * p.requests
        met_sent[1] += p.requests
    return {rate: meets(met / sent, share) for rate, (met, sent) in pooled.items()}


def bracket_of(probes: Iterable[Probe], share: float) -> tuple[float | None, float | None]:
    """(lo, hi): the highest rate whose verdict met below the lowest whose verdict missed, and
    that lowest missed rate; None on a side not found. lo < hi whenever both are given."""
    verdicts = rate_verdicts(probes, share)
    hi = min((rate for rate, met in verdicts.items() if not met), default=None)
    lo = max(
        (rate for rate, met in verdicts.items() if met and (hi is None or rate < hi)),
        default=None,
    )
    return lo, hi


def passes_disagree(probes: Iterable[Probe], share: float) -> bool:
    """Whether some pass met at or above a rate where a pass missed (`non_monotone`)."""
    every = list(probes)
    top_met = max((p.rate_req_per_s for p in every if meets(p.slo_met_share, share)), default=None)
    low_missed = min(
        (p.rate_req_per_s for p in every if not meets(p.slo_met_share, share)), default=None
    )
    return top_met is not None and low_missed is not None and top_met >= low_missed


def estimated_capacity_req_per_s(single_e2el_s: float, concurrency: int = 1) -> float:
    """A start rate: `concurrency` / the single-request E2EL (module docstring)."""
    if not (math.isfinite(single_e2el_s) and single_e2el_s > 0):
        raise CapacityError(
            f"single_e2el_s {single_e2el_s} is not valid; use one request's E2EL in seconds > 0"
        )
    if concurrency < 1:
        raise CapacityError(
            f"concurrency {concurrency} is not valid; use the streams the server runs at once, >= 1"
        )
    return concurrency / single_e2el_s


def _positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise CapacityError(f"{name} {value} is not valid; use requests per second > 0, finite")


def _validate(
    *, start: float, lo_limit: float, hi_limit: float, share: float, resolution: float,
    growth: float, max_probes: int, recheck_se: float,
) -> None:  # fmt: skip
    _positive("start_rate_req_per_s", start)
    _positive("min_rate_req_per_s", lo_limit)
    _positive("max_rate_req_per_s", hi_limit)
    if not lo_limit <= start <= hi_limit:
        raise CapacityError(
            f"start_rate_req_per_s {start:g} is outside [min_rate_req_per_s {lo_limit:g}, "
            f"max_rate_req_per_s {hi_limit:g}]; start within the limits or widen them"
        )
    if not (math.isfinite(share) and 0.0 < share <= 1.0):
        raise CapacityError(f"share {share} is not valid; use a fraction in (0, 1], e.g. 0.9")
    if not (math.isfinite(resolution) and resolution > 1.0):
        raise CapacityError(
            f"resolution {resolution} is not valid; use the bracket's hi / lo to stop at, > 1 "
            "(e.g. 1.5)"
        )
    if not (math.isfinite(growth) and growth > 1.0):
        raise CapacityError(f"growth {growth} is not valid; use a factor > 1 (e.g. 2)")
    if isinstance(max_probes, bool) or not isinstance(max_probes, int) or max_probes < 1:
        raise CapacityError(f"max_probes {max_probes!r} is not valid; use a count >= 1")
    if not (math.isfinite(recheck_se) and recheck_se >= 0.0):
        raise CapacityError(
            f"recheck_se {recheck_se} is not valid; use standard errors >= 0 (0: never re-run)"
        )


def _close_call(probes: list[Probe], share: float, recheck_se: float) -> bool:
    """Whether the last pass is a close call at a rate run once (module docstring)."""
    last = probes[-1]
    if sum(p.rate_req_per_s == last.rate_req_per_s for p in probes) > 1:
        return False
    standard_error = math.sqrt(share * (1.0 - share) / last.requests)
    return abs(last.slo_met_share - share) < recheck_se * standard_error


def search_capacity(
    probe: Callable[[float], ProbeOutcome],
    *,
    start_rate_req_per_s: float,
    share: float = SHARE,
    resolution: float = RESOLUTION,
    max_probes: int = MAX_PROBES,
    min_rate_req_per_s: float | None = None,
    max_rate_req_per_s: float | None = None,
    growth: float = GROWTH,
    recheck_se: float = RECHECK_SE,
) -> Capacity:
    """The highest rate whose passes meet `share` (module docstring); at most `max_probes`
    calls of `probe`. CapacityError (a ValueError) on an input out of range."""
    start = start_rate_req_per_s
    lo_limit = start / SPAN if min_rate_req_per_s is None else min_rate_req_per_s
    hi_limit = start * SPAN if max_rate_req_per_s is None else max_rate_req_per_s
    _validate(
        start=start, lo_limit=lo_limit, hi_limit=hi_limit, share=share, resolution=resolution,
        growth=growth, max_probes=max_probes, recheck_se=recheck_se,
    )  # fmt: skip
    probes: list[Probe] = []
    stopped: Stopped
    while True:
        budget_left = len(probes) < max_probes
        if probes and budget_left and _close_call(probes, share, recheck_se):
            # Re-run before judging: the bracket must not move on a coin toss.
            rate = probes[-1].rate_req_per_s
        else:
            lo, hi = bracket_of(probes, share)
            if hi is None:
                if lo is None:
                    rate = start
                elif lo >= hi_limit:
                    stopped = "met at the highest rate allowed"
                    break
                else:
                    rate = min(lo * growth, hi_limit)
            elif lo is None:
                if hi <= lo_limit:
                    stopped = "missed at the lowest rate allowed"
                    break
                rate = max(hi / growth, lo_limit)
            elif hi / lo <= resolution:
                stopped = "bracketed"
                break
            else:
                rate = math.sqrt(lo * hi)
            # Checked after the stops: a search that ends on its last allowed pass says why.
            if not budget_left:
                stopped = "max probes"
                break
        outcome = probe(rate)
        probes.append(Probe(rate, outcome.slo_met_share, outcome.requests, outcome.figures))
    lo, hi = bracket_of(probes, share)
    return Capacity(
        sla_rate_req_per_s=0.0 if lo is None else lo,
        sla_bracket=(lo, hi),
        sla_probes=tuple(probes),
        stopped=stopped,
        share=share,
        non_monotone=passes_disagree(probes, share),
    )
