"""What one request of a load pass recorded, and the pass's figures from those records (pure).

The definitions are vLLM's (`vllm bench serve`), on the client's clock, in seconds from the
pass's start (`metrics` never reads a clock: `client` records, this module derives):

- **TTFT**: request sent -> the first chunk that carries content (a role-only chunk, which a
  chat stream sends before generating, is not a token);
- **ITL** (per token): every gap between successive tokens. A chunk that carries k tokens (a
  server that joins queued events into one write, or puts several tokens in one event) is k
  tokens: the gap since the previous chunk is spread evenly over them, and the extra tokens of
  the first chunk arrived with the first (gaps of 0). The gaps between chunks themselves are
  reported apart (`itl_chunk_*`), never as per-token figures, and so is the pass's longest one
  (`stall_max_s`): spread over the k tokens that follow it, a 200 ms stall reads as k short
  per-token gaps;
- **E2EL**: request sent -> the **last content chunk** (vLLM stops its clock there), not the
  body's end: what follows it (the usage chunk, `[DONE]`, the close) is reported apart
  (`tail_*`, last content chunk -> `done_s`). **TPOT** = (E2EL - TTFT) / (N - 1), N the output
  tokens (GenAI-Perf / AIPerf call this figure "inter-token latency"). A one-token response has
  no TPOT (no gap: it stays out of the `tpot_*` figures) but counts TPOT 0 against a TPOT SLO,
  as vLLM's goodput does, so it can meet one;
- the same TTFT and E2EL from each request's **scheduled** arrival (`*_from_schedule_*`): a
  request kept waiting by the concurrency cap or a late client is late for its user, and a
  latency measured from the send alone hides that (coordinated omission);
- request and output-token **throughput** = completed requests (tokens) / the pass's duration;
  **goodput** = completed requests that meet every SLO given (TTFT, TPOT, E2EL, from the send,
  as vLLM's) / the duration; without SLOs, every completed request counts. `slo_met_share` is
  the same count over every request of the pass (an error row never meets an SLO): the figure
  a capacity search holds to a target; `offered_rate_req_per_s` is the schedule's own rate
  ((requests - 1) / the first to last scheduled arrival).

Tokens are the server's own count (`usage.completion_tokens`), never the text re-tokenized. A
request is an **error row** when it failed (HTTP status, connection, timeout, an error event) or
its usage is missing or differs from the N asked of it (`new_tokens`, one N or one per request;
the record's own `asked_tokens` wins): counted by reason, never dropped, never in the latency
figures. An error reads "reason: detail", the reason short and stable (`reason_key`):
`error_reasons` counts by reason and `error_examples` keeps one detail of each. A completed
request whose chunks' token counts do not add up to its usage (the server sent tokens it did
not stream as content) keeps its TTFT, TPOT and E2EL but gives no per-token ITL
(`itl_unattributed`).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from benchmarks.harness.records import percentile

PERCENTILES = (50, 90, 99)
EXAMPLE_CHARS = 200  # one error detail kept per reason: enough to diagnose, short in a record
NO_USAGE = (
    "no usage: the stream ended without a usage chunk "
    "(the server ignores stream_options.include_usage?)"
)
EMPTY_STREAM = "empty stream: HTTP 200 but no events"


@dataclass(frozen=True)
class Chunk:
    """Content that arrived in one read: when (pass clock, s) and how many tokens it carries."""

    at_s: float
    tokens: int


@dataclass(frozen=True)
class RequestRecord:
    """What one request recorded (the request function's only output; no derived figures)."""

    index: int
    scheduled_s: float  # when the arrival schedule said to send it
    sent_s: float  # when it was sent (after waiting for a concurrency slot)
    chunks: tuple[Chunk, ...] = ()  # content-carrying reads, in arrival order
    done_s: float | None = None  # when the response's body ended (after usage and [DONE])
    output_tokens: int | None = None  # usage.completion_tokens
    prompt_tokens: int | None = None  # usage.prompt_tokens
    error: str | None = None  # "reason: detail" (module docstring), or None
    events: int = 0  # SSE data events parsed, `[DONE]` aside: 0 is an empty stream
    asked_tokens: int | None = None  # the N this request asked for (max_tokens)

    @property
    def ttft_s(self) -> float | None:
        """Sent -> first content chunk; None without content."""
        return self.chunks[0].at_s - self.sent_s if self.chunks else None

    @property
    def last_content_s(self) -> float | None:
        """When the last content chunk arrived (where E2EL ends); None without content."""
        return self.chunks[-1].at_s if self.chunks else None


@dataclass(frozen=True)
class Slo:
    """Per-request latency targets in seconds (None: no target on that figure)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2el_s: float | None = None

    def met(self, ttft_s: float, tpot_s: float | None, e2el_s: float) -> bool:
        """Whether a completed request with these figures meets every target given."""
        checks = ((self.ttft_s, ttft_s), (self.tpot_s, tpot_s), (self.e2el_s, e2el_s))
        return all(
            target is None or (value is not None and value <= target) for target, value in checks
        )


def reason_key(error: str) -> str:
    """The short, stable reason of an error ("HTTP 500: ..." -> "HTTP 500"): what rows group by."""
    return error.split(": ", 1)[0]


def asked_of(record: RequestRecord, new_tokens: int | Sequence[int]) -> int:
    """The N `record` asked for: its own `asked_tokens`, else `new_tokens` (one N for every
    request, or one per request indexed by `record.index`)."""
    if record.asked_tokens is not None:
        return record.asked_tokens
    if isinstance(new_tokens, int):
        return new_tokens
    if not 0 <= record.index < len(new_tokens):
        raise ValueError(
            f"new_tokens lists {len(new_tokens)} N, none for request index {record.index}"
        )
    return new_tokens[record.index]


def error_reason(record: RequestRecord, new_tokens: int) -> str | None:
    """Why `record` is an error row (module docstring), "reason: detail"; None when it is not.
    `new_tokens`: the N asked of this request (`asked_of`)."""
    if record.error is not None:
        return record.error
    asked = new_tokens
    if record.output_tokens is None:
        return EMPTY_STREAM if record.events == 0 and not record.chunks else NO_USAGE
    if record.output_tokens != asked:
        kind = "short" if record.output_tokens < asked else "long"
        return f"{kind} response: {record.output_tokens} tokens of the {asked} asked"
    if not record.chunks or record.done_s is None:
        return f"no content: usage says {record.output_tokens} tokens but none was streamed"
    return None


def token_gaps(chunks: Sequence[Chunk]) -> list[float]:
    """Per-token gaps of one request (module docstring): one per token after the first."""
    gaps = [0.0] * max(chunks[0].tokens - 1, 0) if chunks else []
    for previous, chunk in itertools.pairwise(chunks):
        share = (chunk.at_s - previous.at_s) / chunk.tokens
        gaps.extend([share] * chunk.tokens)
    return gaps


def chunk_gaps(chunks: Sequence[Chunk]) -> list[float]:
    """The gaps between successive content chunks of one request."""
    return [b.at_s - a.at_s for a, b in itertools.pairwise(chunks)]


def offered_rate(records: Sequence[RequestRecord]) -> float | None:
    """Requests per second the schedule offered: (n - 1) / the first to last scheduled arrival,
    n the distinct request indices (so the records of several passes of one schedule length,
    which each span the same (n - 1) / rate, give that rate); None when every request was due
    at once, or there was one."""
    count = len({record.index for record in records})
    if count < 2:
        return None
    span_s = max(r.scheduled_s for r in records) - min(r.scheduled_s for r in records)
    return (count - 1) / span_s if span_s > 0 else None


def _percentiles(name: str, values: Sequence[float]) -> dict[str, float | None]:
    return {f"{name}_p{q}_s": (percentile(values, q) if values else None) for q in PERCENTILES}


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def calculate_metrics(
    records: Iterable[RequestRecord],
    *,
    new_tokens: int | Sequence[int],
    duration_s: float,
    slo: Slo | None = None,
    prompt_len: int | None = None,
) -> dict[str, object]:
    """The pass's figures (module docstring) as extra_info fields with their units.

    `new_tokens`: the N asked, one for every request or one per request (by `record.index`).
    `duration_s`: the pass's wall time (first scheduled arrival -> last response end), > 0.
    `prompt_len`: the P asked for; completed requests whose `usage.prompt_tokens` differ are
    counted in `prompt_len_mismatches` (a `url` server with another tokenizer), not errors.
    """
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration_s {duration_s} is not a positive number of seconds")
    slo = slo or Slo()
    rows = list(records)
    reasons: Counter[str] = Counter()
    examples: dict[str, str] = {}
    ttft: list[float] = []
    tpot: list[float] = []
    e2el: list[float] = []
    tail: list[float] = []
    itl: list[float] = []
    itl_chunk: list[float] = []
    ttft_sched: list[float] = []
    e2el_sched: list[float] = []
    send_lag: list[float] = []
    tokens_per_chunk: list[float] = []
    good = good_sched = unattributed = mismatched = output = 0
    for row in rows:
        send_lag.append(row.sent_s - row.scheduled_s)
        reason = error_reason(row, asked_of(row, new_tokens))
        if reason is not None:
            key = reason_key(reason)
            reasons[key] += 1
            examples.setdefault(key, reason[:EXAMPLE_CHARS])
            continue
        assert row.done_s is not None
        assert row.output_tokens is not None
        first_s, last_s = row.chunks[0].at_s, row.chunks[-1].at_s
        first = first_s - row.sent_s
        whole = last_s - row.sent_s
        per_token = (whole - first) / (row.output_tokens - 1) if row.output_tokens > 1 else None
        ttft.append(first)
        e2el.append(whole)
        tail.append(row.done_s - last_s)
        if per_token is not None:
            tpot.append(per_token)
        ttft_sched.append(first_s - row.scheduled_s)
        e2el_sched.append(last_s - row.scheduled_s)
        output += row.output_tokens
        itl_chunk.extend(chunk_gaps(row.chunks))
        tokens_per_chunk.append(row.output_tokens / len(row.chunks))
        if sum(c.tokens for c in row.chunks) == row.output_tokens:
            itl.extend(token_gaps(row.chunks))
        else:
            unattributed += 1
        slo_tpot = 0.0 if per_token is None else per_token  # N = 1: TPOT 0 (vLLM's goodput)
        good += slo.met(first, slo_tpot, whole)
        good_sched += slo.met(ttft_sched[-1], slo_tpot, e2el_sched[-1])
        mismatched += prompt_len is not None and row.prompt_tokens != prompt_len
    completed = len(ttft)
    return {
        **_percentiles("ttft", ttft),
        **_percentiles("tpot", tpot),
        **_percentiles("itl", itl),
        **_percentiles("e2el", e2el),
        **_percentiles("tail", tail),
        **_percentiles("itl_chunk", itl_chunk),
        **_percentiles("ttft_from_schedule", ttft_sched),
        **_percentiles("e2el_from_schedule", e2el_sched),
        **_percentiles("send_lag", send_lag),
        "ttft_mean_s": _mean(ttft),
        "tpot_mean_s": _mean(tpot),
        "itl_mean_s": _mean(itl),
        "e2el_mean_s": _mean(e2el),
        "stall_max_s": max(itl_chunk, default=None),
        "tokens_per_chunk_mean": _mean(tokens_per_chunk),
        "request_throughput_req_per_s": completed / duration_s,
        "output_throughput_tok_per_s": output / duration_s,
        "goodput_req_per_s": good / duration_s,
        "goodput_from_schedule_req_per_s": good_sched / duration_s,
        "slo_met_share": good / len(rows) if rows else None,
        "slo_met_share_from_schedule": good_sched / len(rows) if rows else None,
        "offered_rate_req_per_s": offered_rate(rows),
        "pass_duration_s": duration_s,
        "requests": len(rows),
        "requests_completed": completed,
        "output_tokens": output,
        "errors": sum(reasons.values()),
        "error_reasons": dict(sorted(reasons.items())),
        "error_examples": dict(sorted(examples.items())),
        "itl_unattributed": unattributed,
        "prompt_len_mismatches": mismatched,
    }
