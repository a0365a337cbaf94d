"""When each request of a load pass is due: a seeded arrival schedule (pure, no I/O).

`arrival_offsets(num_prompts, request_rate, burstiness, seed)` gives each request's scheduled
send time in seconds after the pass starts. The gaps between arrivals are gamma-distributed with
shape `burstiness` and mean `1 / request_rate` (vLLM's `--burstiness`): burstiness 1 is a
Poisson process (exponential gaps, coefficient of variation 1), below 1 burstier (CV
`1 / sqrt(burstiness)`), above 1 more regular. `request_rate` inf sends every request at once.
The first request is due at 0.

The schedule is made before any request is sent and never waits for a response: a slow server
delays sends only through the concurrency cap, and the records keep the scheduled time apart
from the send time (coordinated omission, `metrics`). It deliberately does not sleep or send.
"""

from __future__ import annotations

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
    offsets = [0.0]
    for _ in range(num_prompts - 1):
        offsets.append(offsets[-1] + rng.gammavariate(burstiness, scale))
    return offsets
