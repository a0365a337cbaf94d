"""`metrics.calculate_metrics` on hand-made records with known answers (exact values)."""

from __future__ import annotations

import math

import pytest

from benchmarks.harness.serve.metrics import (
    EMPTY_STREAM,
    NO_USAGE,
    Chunk,
    RequestRecord,
    Slo,
    calculate_metrics,
    chunk_gaps,
    error_reason,
    reason_key,
    token_gaps,
)


def _record(index, scheduled, sent, times, *, tokens=None, done=None, out=None, **kw):
    tokens = tokens or [1] * len(times)
    chunks = tuple(Chunk(t, k) for t, k in zip(times, tokens, strict=True))
    total = sum(tokens) if out is None else out
    return RequestRecord(index, scheduled, sent, chunks, done or times[-1], total, 8, **kw)


def test_ttft_tpot_e2el_and_itl_follow_vllms_definitions():
    # Sent at 1.0, tokens at 1.5, 1.6, 1.8, 1.9; the body ends (usage, [DONE]) at 2.0.
    row = _record(0, 0.5, 1.0, [1.5, 1.6, 1.8, 1.9], done=2.0)
    m = calculate_metrics([row], new_tokens=4, duration_s=2.0)
    assert m["ttft_p50_s"] == pytest.approx(0.5)
    # E2EL ends at the last content chunk (1.9), vLLM's; the 0.1 s tail is reported apart.
    assert m["e2el_p50_s"] == pytest.approx(0.9)
    assert m["tail_p50_s"] == pytest.approx(0.1)
    assert m["tpot_p50_s"] == pytest.approx((0.9 - 0.5) / 3)
    assert sorted(token_gaps(row.chunks)) == pytest.approx([0.1, 0.1, 0.2])
    assert m["itl_p50_s"] == pytest.approx(0.1)
    # From the scheduled arrival (0.5): the half second the request waited to be sent counts.
    assert m["ttft_from_schedule_p50_s"] == pytest.approx(1.0)
    assert m["e2el_from_schedule_p50_s"] == pytest.approx(1.4)
    assert m["send_lag_p50_s"] == pytest.approx(0.5)
    assert m["request_throughput_req_per_s"] == pytest.approx(0.5)
    assert m["output_throughput_tok_per_s"] == pytest.approx(2.0)
    assert m["goodput_req_per_s"] == pytest.approx(0.5)  # no SLO: every complete request
    assert m["errors"] == 0


def test_a_chunk_of_k_tokens_is_k_tokens_and_chunk_gaps_are_reported_apart():
    # Two tokens at 1.0, then three more together at 1.3: gaps 0 (first chunk's second token),
    # then 0.1 three times (0.3 spread over 3 tokens); one chunk gap of 0.3.
    row = _record(0, 0.0, 0.0, [1.0, 1.3], tokens=[2, 3], done=1.3)
    assert token_gaps(row.chunks) == pytest.approx([0.0, 0.1, 0.1, 0.1])
    assert chunk_gaps(row.chunks) == pytest.approx([0.3])
    m = calculate_metrics([row], new_tokens=5, duration_s=1.3)
    assert m["itl_chunk_p50_s"] == pytest.approx(0.3)
    assert m["itl_p50_s"] == pytest.approx(0.1)
    assert m["tokens_per_chunk_mean"] == pytest.approx(2.5)
    # TPOT does not depend on how tokens were chunked: (1.3 - 1.0) / 4.
    assert m["tpot_p50_s"] == pytest.approx(0.075)


def test_short_long_failed_and_usage_less_responses_are_error_rows_never_dropped():
    good = _record(0, 0.0, 0.0, [0.1, 0.2])
    short = _record(1, 0.0, 0.0, [0.1], out=1)
    long = _record(2, 0.0, 0.0, [0.1, 0.2, 0.3])
    failed = RequestRecord(3, 0.0, 0.0, error="HTTP 422: unexpected field")
    no_usage = RequestRecord(4, 0.0, 0.0, (Chunk(0.1, 1), Chunk(0.2, 1)), 0.2, None)
    m = calculate_metrics([good, short, long, failed, no_usage], new_tokens=2, duration_s=1.0)
    assert m["requests"] == 5
    assert m["requests_completed"] == 1
    assert m["errors"] == 4
    assert m["error_reasons"] == {
        "HTTP 422": 1,
        "long response": 1,
        "no usage": 1,
        "short response": 1,
    }
    assert m["error_examples"]["HTTP 422"] == "HTTP 422: unexpected field"
    assert m["error_examples"]["short response"] == "short response: 1 tokens of the 2 asked"
    assert m["error_examples"]["no usage"] == NO_USAGE
    assert m["request_throughput_req_per_s"] == pytest.approx(1.0)
    assert m["ttft_p50_s"] == pytest.approx(0.1)  # only the complete request's


def test_tokens_the_chunks_do_not_account_for_give_no_per_token_itl():
    # usage says 4 tokens; the stream carried content for 3 (one token had no text).
    row = _record(0, 0.0, 0.0, [0.1, 0.2, 0.4], out=4, done=0.4)
    m = calculate_metrics([row], new_tokens=4, duration_s=1.0)
    assert m["itl_unattributed"] == 1
    assert m["itl_p50_s"] is None
    assert m["tpot_p50_s"] == pytest.approx(0.1)  # (0.4 - 0.1) / 3 from usage's count


def test_goodput_counts_requests_meeting_every_slo_from_the_send():
    fast = _record(0, 0.0, 0.0, [0.1, 0.2])  # ttft 0.1, tpot 0.1
    slow_first = _record(1, 0.0, 0.0, [0.5, 0.6])  # ttft 0.5
    late_sent = _record(2, 0.0, 1.0, [1.1, 1.2])  # ttft 0.1 from the send, 1.1 from schedule
    m = calculate_metrics(
        [fast, slow_first, late_sent], new_tokens=2, duration_s=2.0, slo=Slo(ttft_s=0.2)
    )
    assert m["goodput_req_per_s"] == pytest.approx(1.0)  # fast and late_sent: 2 / 2 s
    assert m["goodput_from_schedule_req_per_s"] == pytest.approx(0.5)  # fast only
    tight = calculate_metrics([fast], new_tokens=2, duration_s=1.0, slo=Slo(tpot_s=0.05))
    assert tight["goodput_req_per_s"] == 0.0


def test_one_token_outputs_have_no_tpot_but_meet_a_tpot_slo_and_prompt_mismatches_count():
    row = _record(0, 0.0, 0.0, [0.2])
    m = calculate_metrics([row], new_tokens=1, duration_s=1.0, prompt_len=9, slo=Slo(tpot_s=0.01))
    assert m["tpot_p50_s"] is None  # no gap: out of the TPOT figures
    assert m["goodput_req_per_s"] == pytest.approx(1.0)  # TPOT 0 against the SLO (vLLM's)
    assert m["slo_met_share"] == pytest.approx(1.0)
    assert m["ttft_p50_s"] == pytest.approx(0.2)
    assert m["prompt_len_mismatches"] == 1  # usage said 8 prompt tokens


def test_no_complete_request_leaves_percentiles_none_and_a_bad_duration_raises():
    m = calculate_metrics([RequestRecord(0, 0.0, 0.0, error="timeout")], new_tokens=2, duration_s=1)
    assert m["ttft_p50_s"] is None
    assert m["goodput_req_per_s"] == 0.0
    with pytest.raises(ValueError, match="duration_s"):
        calculate_metrics([], new_tokens=2, duration_s=0.0)
    with pytest.raises(ValueError, match="duration_s"):
        calculate_metrics([], new_tokens=2, duration_s=math.nan)


def test_a_stall_hidden_by_the_per_token_spread_shows_in_stall_max():
    # 0.2 s of silence, then 10 tokens in one chunk: ten 20 ms per-token gaps, one 0.2 s stall.
    row = _record(0, 0.0, 0.0, [0.1, 0.12, 0.32], tokens=[1, 1, 10])
    m = calculate_metrics([row], new_tokens=12, duration_s=1.0)
    assert m["itl_p99_s"] == pytest.approx(0.02)
    assert m["stall_max_s"] == pytest.approx(0.2)
    assert m["itl_chunk_p99_s"] == pytest.approx(0.02 + 0.99 * 0.18)
    alone = calculate_metrics([_record(0, 0.0, 0.0, [0.1])], new_tokens=1, duration_s=1.0)
    assert alone["stall_max_s"] is None  # one chunk: no gap


def test_slo_met_share_counts_error_rows_as_not_met_from_the_send_and_from_the_schedule():
    fast = _record(0, 0.0, 0.0, [0.1, 0.2])
    late_sent = _record(1, 0.0, 1.0, [1.1, 1.2])  # ttft 0.1 from the send, 1.1 from schedule
    slow = _record(2, 0.0, 0.0, [0.5, 0.6])
    failed = RequestRecord(3, 0.0, 0.0, error="timeout: no response within 1 s")
    rows = [fast, late_sent, slow, failed]
    m = calculate_metrics(rows, new_tokens=2, duration_s=2.0, slo=Slo(ttft_s=0.2))
    assert m["slo_met_share"] == pytest.approx(2 / 4)
    assert m["slo_met_share_from_schedule"] == pytest.approx(1 / 4)
    assert calculate_metrics([], new_tokens=2, duration_s=1.0)["slo_met_share"] is None


def test_the_offered_rate_is_the_schedules_own():
    rows = [RequestRecord(i, t, t, error="not sent: x") for i, t in enumerate([0.0, 0.1, 1.5])]
    m = calculate_metrics(rows, new_tokens=2, duration_s=2.0)
    assert m["offered_rate_req_per_s"] == pytest.approx(2 / 1.5)
    # Two passes of one schedule length pooled: still that rate, not twice it.
    again = [RequestRecord(i, t, t) for i, t in enumerate([0.0, 1.2, 1.5])]
    pooled = calculate_metrics(rows + again, new_tokens=2, duration_s=4.0)
    assert pooled["offered_rate_req_per_s"] == pytest.approx(2 / 1.5)
    at_once = [RequestRecord(i, 0.0, 0.0) for i in range(3)]
    assert calculate_metrics(at_once, new_tokens=2, duration_s=1)["offered_rate_req_per_s"] is None


def test_each_request_is_checked_against_its_own_n():
    two = _record(0, 0.0, 0.0, [0.1, 0.2])
    three = _record(1, 0.0, 0.0, [0.1, 0.2, 0.3])
    m = calculate_metrics([two, three], new_tokens=[2, 3], duration_s=1.0)
    assert m["errors"] == 0
    assert m["tpot_p50_s"] == pytest.approx(0.1)
    swapped = calculate_metrics([two, three], new_tokens=[3, 2], duration_s=1.0)
    assert swapped["error_reasons"] == {"long response": 1, "short response": 1}
    # The N the record says it asked wins over the one given.
    own = _record(1, 0.0, 0.0, [0.1, 0.2, 0.3], asked_tokens=3)
    assert calculate_metrics([own], new_tokens=5, duration_s=1.0)["errors"] == 0
    with pytest.raises(ValueError, match="index 1"):
        calculate_metrics([three], new_tokens=[3], duration_s=1.0)


def test_an_empty_stream_and_a_stream_without_usage_are_told_apart():
    empty = RequestRecord(0, 0.0, 0.0, done_s=0.1)
    no_usage = RequestRecord(1, 0.0, 0.0, (Chunk(0.05, 1),), 0.1, None, events=2)
    assert error_reason(empty, 2) == EMPTY_STREAM
    assert error_reason(no_usage, 2) == NO_USAGE
    m = calculate_metrics([empty, no_usage], new_tokens=2, duration_s=1.0)
    assert m["error_reasons"] == {"empty stream": 1, "no usage": 1}


def test_reasons_group_by_their_key_and_keep_one_short_example():
    long_detail = "x" * 500
    rows = [
        RequestRecord(0, 0.0, 0.0, error=f"HTTP 500: {long_detail}"),
        RequestRecord(1, 0.0, 0.0, error="HTTP 500: other"),
        RequestRecord(2, 0.0, 0.0, error="stream broken: ClientPayloadError: a: b"),
    ]
    m = calculate_metrics(rows, new_tokens=2, duration_s=1.0)
    assert m["error_reasons"] == {"HTTP 500": 2, "stream broken": 1}
    assert m["error_examples"]["HTTP 500"] == f"HTTP 500: {long_detail}"[:200]
    assert reason_key("stream broken: ClientPayloadError: a: b") == "stream broken"
    assert reason_key("timeout") == "timeout"
