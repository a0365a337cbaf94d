"""The load generator against the fake server's scripted token times.

The fake emits each token no earlier than its scripted time after the request arrives, so every
client figure is at least the scripted one; the bounds above allow for the loopback and this
(shared, loaded) machine's scheduling. Exact token counts and chunking are asserted exactly.
"""

from __future__ import annotations

import math

import pytest

from benchmarks.harness.errors import ServeError
from benchmarks.harness.serve.client import LoadSpec, request_body, run_load
from benchmarks.harness.serve.fake import MODEL_ID, Script
from benchmarks.harness.serve.metrics import calculate_metrics
from benchmarks.harness.serve.models import list_models
from tests.harness.serve.fakes import fake_server

SLACK_S = 0.04  # loopback + event loops on a busy 2-core machine


def _spec(url, n=5, prompts=2, **kw):
    return LoadSpec(url, MODEL_ID, tuple(f"w{i} w{i + 1}" for i in range(prompts)), n, **kw)


def test_ttft_itl_tpot_and_e2el_match_the_scripted_times():
    script = Script(ttft_s=0.10, itl_s=0.03)
    with fake_server(script) as url:
        assert list_models(url) == [MODEL_ID]
        result = run_load(_spec(url, max_concurrency=1))
    m = calculate_metrics(result.records, new_tokens=5, duration_s=result.duration_s)
    assert m["errors"] == 0
    assert m["requests_completed"] == 2
    assert 0.10 <= m["ttft_p50_s"] <= 0.10 + SLACK_S
    assert 0.03 - SLACK_S / 4 <= m["itl_p50_s"] <= 0.03 + SLACK_S / 4
    assert 0.03 - SLACK_S / 4 <= m["tpot_p50_s"] <= 0.03 + SLACK_S / 4
    assert 0.22 <= m["e2el_p50_s"] <= 0.22 + SLACK_S
    # max_concurrency 1 and both due at 0: the second waited one whole response to be sent.
    second = result.records[1]
    assert second.sent_s - second.scheduled_s >= 0.22
    assert m["ttft_from_schedule_p90_s"] >= 0.10 + 0.22 * 0.8


def test_the_role_only_chunk_of_a_chat_stream_is_not_the_first_token():
    with fake_server(Script(ttft_s=0.15, itl_s=0.01)) as url:
        result = run_load(_spec(url, n=3, prompts=1, api="chat"))
    m = calculate_metrics(result.records, new_tokens=3, duration_s=result.duration_s)
    assert m["errors"] == 0
    assert m["ttft_p50_s"] >= 0.15  # the role chunk came at once; the first token at 0.15


def test_joined_events_make_a_chunk_of_k_tokens_with_its_gap_spread_over_them():
    # 6 tokens, 3 events per write: two writes, at 0.05 + 2 * 0.02 and 0.05 + 5 * 0.02.
    with fake_server(Script(ttft_s=0.05, itl_s=0.02, events_per_write=3)) as url:
        result = run_load(_spec(url, n=6, prompts=1))
    record = result.records[0]
    assert [c.tokens for c in record.chunks] == [3, 3]
    m = calculate_metrics(result.records, new_tokens=6, duration_s=result.duration_s)
    assert m["itl_chunk_p50_s"] == pytest.approx(0.06, abs=SLACK_S / 2)
    # per token: 0, 0 (the first chunk's own) and 0.02 three times: the median is 0.02, never 0.06
    assert m["itl_p50_s"] == pytest.approx(0.02, abs=SLACK_S / 4)
    assert m["itl_unattributed"] == 0


def test_continuous_usage_counts_several_tokens_in_one_event_from_the_servers_usage():
    script = Script(ttft_s=0.02, itl_s=0.01, tokens_per_event=2, usage="continuous")
    with fake_server(script) as url:
        result = run_load(_spec(url, n=6, prompts=1, continuous_usage=True))
        plain = run_load(_spec(url, n=6, prompts=1))  # without asking: one token per event
    assert [c.tokens for c in result.records[0].chunks] == [2, 2, 2]
    assert result.records[0].output_tokens == 6
    m = calculate_metrics(plain.records, new_tokens=6, duration_s=plain.duration_s)
    assert m["itl_unattributed"] == 1  # 3 content events, 6 tokens by usage: not attributable
    assert m["errors"] == 0


def test_short_responses_and_http_errors_are_counted_as_error_rows():
    with fake_server(Script(short=2)) as url:
        short = run_load(_spec(url, n=4, prompts=3))
    with fake_server(Script(fail_status=422)) as url:
        failed = run_load(_spec(url, n=4, prompts=2))
    m = calculate_metrics(short.records, new_tokens=4, duration_s=short.duration_s)
    assert m["error_reasons"] == {"short response": 3}
    assert m["error_examples"]["short response"] == "short response: 2 tokens of the 4 asked"
    f = calculate_metrics(failed.records, new_tokens=4, duration_s=failed.duration_s)
    assert f["errors"] == 2
    assert next(iter(f["error_reasons"])).startswith("HTTP 422")


def test_a_dead_server_is_a_connection_error_row_and_the_pass_is_bounded():
    # Nothing listens on port 9 (discard) of the loopback.
    result = run_load(_spec("http://127.0.0.1:9", prompts=2, request_timeout_s=2.0))
    m = calculate_metrics(result.records, new_tokens=5, duration_s=result.duration_s)
    assert m["error_reasons"] == {"connection error": 2}
    assert result.duration_s < 5


def test_the_request_body_holds_openai_fields_only_and_extra_body_last():
    spec = _spec("http://x", extra_body={"ignore_eos": True}, continuous_usage=True)
    body = request_body(spec, "w1 w2")
    assert body["max_tokens"] == 5
    assert body["stream"] is True
    assert body["prompt"] == "w1 w2"
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["ignore_eos"] is True
    plain = request_body(_spec("http://x", api="chat"), "w1")
    assert "ignore_eos" not in plain
    assert plain["messages"][0]["content"] == "w1"


def test_a_poisson_pass_sends_on_schedule_not_when_responses_come_back():
    with fake_server(Script(ttft_s=0.01, itl_s=0.05)) as url:
        spec = _spec(url, n=4, prompts=8, request_rate=20.0, seed=3)
        result = run_load(spec)
    lags = [r.sent_s - r.scheduled_s for r in result.records]
    assert max(lags) < 0.03  # no cap: each sent on time although responses take 0.16 s
    assert result.records[-1].scheduled_s > 0
    assert not math.isclose(result.records[1].scheduled_s, result.records[2].scheduled_s)


def test_each_request_asks_its_own_n_and_records_it():
    with fake_server(Script(ttft_s=0.01, itl_s=0.005)) as url:
        result = run_load(_spec(url, n=9, prompts=3, new_tokens_each=(2, 5, 3)))
    assert [r.asked_tokens for r in result.records] == [2, 5, 3]
    assert [r.output_tokens for r in result.records] == [2, 5, 3]
    m = calculate_metrics(result.records, new_tokens=9, duration_s=result.duration_s)
    assert m["errors"] == 0  # each checked against its own N, not the 9
    assert request_body(_spec("http://x"), "w1", 7)["max_tokens"] == 7
    with pytest.raises(ServeError, match="new_tokens_each has 2 N for 3 prompts"):
        run_load(_spec(url, prompts=3, new_tokens_each=(2, 5)))


def test_e2el_ends_at_the_last_content_chunk_and_the_tail_is_apart():
    with fake_server(Script(ttft_s=0.05, itl_s=0.02)) as url:
        result = run_load(_spec(url, n=4, prompts=1))
    record = result.records[0]
    assert record.events == 5  # 4 tokens and the usage event ([DONE] aside)
    assert record.done_s is not None
    assert record.last_content_s is not None
    assert record.done_s >= record.last_content_s
    m = calculate_metrics(result.records, new_tokens=4, duration_s=result.duration_s)
    assert m["e2el_p50_s"] == pytest.approx(record.last_content_s - record.sent_s)
    assert 0.11 <= m["e2el_p50_s"] <= 0.11 + SLACK_S
    assert 0 <= m["tail_p50_s"] <= SLACK_S


def test_a_read_timeout_never_fires_on_a_kept_alive_connection_between_requests():
    # One connection, reused: the requests are 0.4 s apart, the read timeout 0.2 s. A timer
    # left running after a response would fail the connection's next request.
    with fake_server(Script(ttft_s=0.01, itl_s=0.01)) as url:
        spec = _spec(url, n=3, prompts=3, max_concurrency=1, read_timeout_s=0.2)
        result = run_load(spec, offsets=[0.0, 0.4, 0.8])
    assert [r.error for r in result.records] == [None, None, None]


def test_the_all_at_once_schedule_offers_no_rate_and_a_poisson_one_the_nominal_rate():
    with fake_server(Script(ttft_s=0.01, itl_s=0.005)) as url:
        result = run_load(_spec(url, n=2, prompts=5, request_rate=25.0, seed=1))
        at_once = run_load(_spec(url, n=2, prompts=3))
    m = calculate_metrics(result.records, new_tokens=2, duration_s=result.duration_s)
    assert m["offered_rate_req_per_s"] == pytest.approx(25.0)
    a = calculate_metrics(at_once.records, new_tokens=2, duration_s=at_once.duration_s)
    assert a["offered_rate_req_per_s"] is None
    assert not result.all_timed_out
    assert not result.all_refused
