"""When each request of a load pass is due: a seeded arrival schedule (pure, no I/O).

`arrival_offsets(num_prompts, request_rate, burstiness, seed)` gives each request's scheduled
send time in seconds after the pass starts. The gaps between arrivals are gamma-distributed with
shape `burstiness` and mean `1 / request_rate` (vLLM's `--burstiness`): burstiness 1 is a
Poisson process (exponential gaps, coefficient of variation 1), below 1 burstier (CV
`1 / sqrt(burstiness)`), above 1 more regular. `request_rate` inf sends every request at once.
The first request is due at 0.

The drawn gaps are then scaled by one factor so that the last request is due exactly at
`(num_prompts - 1) / request_rate`: every pass offers exactly the nominal rate. Unscaled, 12
Poisson arrivals at 8 req/s span anything from about 0.9 s to 2 s, so a pass's offered load,
and with it a goodput that seems to fall off, was the draw's as much as the server's. One
common factor keeps the gaps' shape: their order, their ratios and so their coefficient of
variation (the burstiness) are the drawn ones. (With two requests the one gap is the mean.)

The schedule is made before any request is sent and never waits for a response: a slow server
delays sends only through the concurrency cap, and the records keep the scheduled time apart
from the send time (coordinated omission, `metrics`). It deliberately does not sleep or send.
"""

from __future__ import annotations

import itertools
import math
import random

from benchmarks.harness.errors import ServeError


def arrival_offsets(
    num_prompts: int, request_rate: float, burstiness: float = 1.0, seed: int = 0
) -> list[float]:
    """Seconds after the pass starts at which each of `num_prompts` requests is due (module
    docstring); non-decreasing, the first 0.0. ServeError on a count, rate or burstiness out of
    range."""
    if num_prompts < 1:
        raise ServeError(f"num_prompts {num_prompts} is not valid; send at least one request")
    if math.isnan(request_rate) or request_rate <= 0:
        raise ServeError(
            f"request_rate {request_rate} is not valid; use requests per second > 0, or inf"
        )
    if not (math.isfinite(burstiness) and burstiness > 0):
        raise ServeError(
            f"burstiness {burstiness} is not valid; use a number > 0 (1 is a Poisson process)"
        )
    if math.isinf(request_rate):
        return [0.0] * num_prompts
    rng = random.Random(seed)
    scale = 1.0 / (request_rate * burstiness)  # mean gap = shape * scale = 1 / rate
    gaps = [rng.gammavariate(burstiness, scale) for _ in range(num_prompts - 1)]
    drawn_s = sum(gaps)
    if gaps and drawn_s <= 0:  # every gap underflowed to 0 (a tiny burstiness): regular gaps
        gaps, drawn_s = [1.0] * len(gaps), float(len(gaps))
    span_s = (num_prompts - 1) / request_rate
    offsets = list(itertools.accumulate((gap * span_s / drawn_s for gap in gaps), initial=0.0))
    offsets[-1] = span_s  # exactly, whatever the running sum's rounding
    return [min(offset, span_s) for offset in offsets]
