"""A capacity cell's rounds (`request_rate: sla`, DESIGN §13): each round one search for the
highest Poisson rate at which `sla_share` of the requests meet every SLO given.

A round is `capacity.search_capacity` with each probe one load pass at the probe's rate
(`passes.CellPasses.run`: checked like any pass) of `num_prompts` requests or `PROBE_S` seconds
of arrivals, whichever is more (at most `PROBE_MAX_FACTOR` x num_prompts): a burst of 12
requests meets a TTFT SLO at 1.1x a server's throughput because its queue never builds, so the
probes last long enough for a backlog to show. A request meets the SLOs
from its **scheduled arrival** (`slo_met_share_from_schedule`): with a concurrency cap a request
waits in the client, and a share from the send alone would meet at any rate. The search starts
at `capacity.estimated_capacity_req_per_s(E2EL alone, streams)`: one stream without continuous
batching or where the matrix does not say (`url`), else the cell's concurrency cap.

The record: `sla_rate_req_per_s` (the rounds' median), `sla_bracket` and `sla_probes` (the
round whose rate is that median: [highest met, lowest missed], each probe's rate, share and
figures), `sla_rounds` (every round's search), `round_series.sla_rate_req_per_s` (the rounds,
judged: higher is better; `rounds_statistic` names it) and the pooled request counts of every
probe (`requests`, `errors`, `error_reasons`: a probe's failed request fails the cell as any
pass's does).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.serve.capacity import (
    Capacity,
    ProbeOutcome,
    estimated_capacity_req_per_s,
    search_capacity,
)
from benchmarks.harness.serve.client import PassResult
from benchmarks.harness.serve.metrics import calculate_metrics
from benchmarks.suite.serve.load import round_seed
from benchmarks.suite.serve.passes import CellPasses

STATISTIC = "sla_rate_req_per_s"
PROBE_S = 5.0
PROBE_MAX_FACTOR = 10
#: What each probe keeps for the report (latency against offered rate, the Pareto view).
PROBE_FIGURES = (
    "ttft_p50_s",
    "ttft_p90_s",
    "tpot_p50_s",
    "e2el_p50_s",
    "ttft_from_schedule_p90_s",  # what the share is judged on, and the report draws
    "e2el_from_schedule_p90_s",
    "request_throughput_req_per_s",
    "output_throughput_tok_per_s",
    "offered_rate_req_per_s",
)


def _streams(cell: Cell) -> int:
    """Requests the server runs at once, as far as the matrix says: its cap with continuous
    batching on; one without, or for a server whose batching is not known (`url`, whose start
    from below costs a doubling or two, where one from far above costs long overloaded
    probes)."""
    if cell.continuous_batching:
        return cell.max_concurrency or 1
    return 1


def probe_requests(rate_req_per_s: float, num_prompts: int) -> int:
    """A probe's requests (module docstring)."""
    wanted = math.ceil(rate_req_per_s * PROBE_S)
    return max(num_prompts, min(wanted, PROBE_MAX_FACTOR * num_prompts))


def capacity_rounds(benchmark: Any, passes: CellPasses, cell: Cell) -> dict[str, Any]:
    """`cell.rounds` searches through `benchmark.pedantic` (module docstring); the record."""
    load = passes.load
    assert passes.single_e2el_s is not None, "the first request runs before the rounds"
    start = estimated_capacity_req_per_s(passes.single_e2el_s, _streams(cell))
    searches: list[Capacity] = []
    every: list[PassResult] = []
    kwargs: dict[str, Any] = {
        "new_tokens": load.new_tokens,
        "slo": load.slo,
        "prompt_len": load.prompt_len if load.workload.uniform_prompts else None,
    }

    def one_search() -> None:
        k = len(searches)
        done: list[PassResult] = []

        def probe(rate: float) -> ProbeOutcome:
            seed = round_seed(cell, k) * 100 + len(done)
            count = probe_requests(rate, load.num_prompts)
            result = passes.run(seed, label=f"round {k} probe {len(done)}", rate=rate, count=count)
            done.append(result)
            figures = calculate_metrics(result.records, duration_s=result.duration_s, **kwargs)
            share = figures.get("slo_met_share_from_schedule")
            return ProbeOutcome(
                slo_met_share=float(share) if isinstance(share, float) else 0.0,
                requests=len(result.records),
                figures={name: _float(figures.get(name)) for name in PROBE_FIGURES},
            )

        searches.append(search_capacity(probe, start_rate_req_per_s=start, share=load.sla_share))
        every.extend(done)

    benchmark.pedantic(one_search, rounds=cell.rounds, warmup_rounds=0, iterations=1)
    rates = [s.sla_rate_req_per_s for s in searches]
    middle = statistics.median_low(rates)
    chosen = next(s for s in searches if s.sla_rate_req_per_s == middle)
    pooled = calculate_metrics(
        [r for p in every for r in p.records],
        duration_s=sum(p.duration_s for p in every),
        **kwargs,
    )
    out: dict[str, Any] = {
        **{k: pooled[k] for k in ("requests", "requests_completed", "errors", "error_reasons")},
        "error_examples": pooled.get("error_examples", {}),
        **chosen.extra_info(),
        STATISTIC: statistics.median(rates),
        "sla_start_rate_req_per_s": start,
        "sla_probe_s": PROBE_S,
        "sla_rounds": [s.extra_info() for s in searches],
        "round_series": {STATISTIC: rates},
        "rounds_statistic": STATISTIC,
    }
    return out


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
