"""Each way a server can let the client down becomes error rows with a stable reason, never a
traceback that ends the pass; `list_models` says what is wrong in one line.

The fake server scripts each failure (`fake`'s failure flags); the crash runs the real fake
process under `launcher.Server`. Every test finishes in a few seconds: the timeouts are short.
"""

from __future__ import annotations

import asyncio
import socket

import psutil
import pytest
from aiohttp import web

from benchmarks.harness.errors import ServeError
from benchmarks.harness.serve import client
from benchmarks.harness.serve.client import LoadSpec, request_once, run_load
from benchmarks.harness.serve.fake import MODEL_ID, Script, script_from_args
from benchmarks.harness.serve.launcher import Server, fake_command, free_port
from benchmarks.harness.serve.metrics import RequestRecord, calculate_metrics, reason_key
from benchmarks.harness.serve.models import list_models
from tests.harness.serve.fakes import fake_server, serve_app

FAST = Script(ttft_s=0.01, itl_s=0.005)


def _spec(url, n=4, prompts=2, **kw):
    return LoadSpec(url, MODEL_ID, tuple(f"w{i}" for i in range(prompts)), n, **kw)


def _reasons(result):
    return [reason_key(r.error) if r.error else None for r in result.records]


def test_a_refused_port_is_a_connection_error_row_and_list_models_says_so():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = run_load(_spec(url, request_timeout_s=5.0))
    assert _reasons(result) == ["connection error"] * 2
    assert result.all_refused
    assert not result.all_timed_out
    with pytest.raises(ServeError, match=r"nothing answers at http://127\.0\.0\.1:\d+/v1/models "):
        list_models(url)
    with pytest.raises(ServeError, match=r"connection refused.*--serve-url"):
        list_models(url)


def test_a_server_that_never_answers_times_out_with_no_response():
    with fake_server(Script(never_answer=True)) as url:
        result = run_load(_spec(url, request_timeout_s=1.0))
    assert _reasons(result) == ["timeout"] * 2
    assert all("no response within 1 s" in str(r.error) for r in result.records)
    assert result.all_timed_out
    assert result.duration_s < 3


def test_a_stall_after_the_headers_times_out_on_the_read_timeout_not_the_request_timeout():
    with fake_server(Script(ttft_s=0.01, stall_after_headers=True)) as url:
        result = run_load(_spec(url, prompts=1, request_timeout_s=30.0, read_timeout_s=0.5))
        whole = run_load(_spec(url, prompts=1, request_timeout_s=0.5))  # no read timeout
    record = result.records[0]
    assert record.error == "timeout: no bytes for 0.5 s after the response began"
    assert [c.tokens for c in record.chunks] == [1]  # the first token came, then nothing
    assert result.duration_s < 3
    assert whole.records[0].error == "timeout: the response did not end within 0.5 s"


def test_a_200_that_is_not_an_event_stream_says_so():
    with fake_server(Script(non_sse=True)) as url:
        result = run_load(_spec(url, prompts=1))
    error = str(result.records[0].error)
    assert error.startswith(
        "not an event stream: HTTP 200 with Content-Type application/json; charset=utf-8;"
    )
    assert "`stream: true`" in error
    assert '"choices"' in error  # the body's start, to see what the server sent


def test_a_connection_dropped_mid_stream_is_a_broken_stream():
    with fake_server(Script(ttft_s=0.01, itl_s=0.005, drop_after=3)) as url:
        result = run_load(_spec(url, n=8, prompts=2))
    assert _reasons(result) == ["stream broken"] * 2
    record = result.records[0]
    assert "after 3 tokens" in str(record.error)
    assert sum(c.tokens for c in record.chunks) == 3


def test_an_error_event_after_some_tokens_is_an_error_event_row():
    with fake_server(Script(ttft_s=0.01, itl_s=0.005, error_event_after=2)) as url:
        result = run_load(_spec(url, n=6, prompts=1, api="chat"))
    assert result.records[0].error == "error event: scripted error event"
    m = calculate_metrics(result.records, new_tokens=6, duration_s=result.duration_s)
    assert m["error_reasons"] == {"error event": 1}
    assert m["requests_completed"] == 0


def test_a_stream_without_usage_is_a_no_usage_row():
    with fake_server(Script(ttft_s=0.01, itl_s=0.005, usage="none")) as url:
        result = run_load(_spec(url, n=3, prompts=2))
    assert all(r.error is None and r.events == 3 for r in result.records)
    m = calculate_metrics(result.records, new_tokens=3, duration_s=result.duration_s)
    assert m["error_reasons"] == {"no usage": 2}
    assert "stream_options.include_usage" in m["error_examples"]["no usage"]


def test_a_server_failing_one_request_in_four_gives_exactly_that_share_of_http_500():
    with fake_server(Script(ttft_s=0.01, itl_s=0.005, fail_every=4)) as url:
        result = run_load(_spec(url, n=3, prompts=8))
    m = calculate_metrics(result.records, new_tokens=3, duration_s=result.duration_s)
    assert m["error_reasons"] == {"HTTP 500": 2}
    assert m["requests_completed"] == 6
    assert m["slo_met_share"] == pytest.approx(6 / 8)


def test_a_server_that_crashes_after_a_round_leaves_connection_errors(tmp_path):
    with Server(fake_command(["--crash-after-requests", "2"]), tmp_path / "fake.log") as server:
        first = run_load(_spec(server.base_url, n=3, prompts=2, request_timeout_s=5.0))
        second = run_load(_spec(server.base_url, n=3, prompts=3, request_timeout_s=5.0))
        guard = psutil.Process(server.pids[0])  # exits with the server's own exit code
        assert guard.wait(timeout=5) == 3
    assert _reasons(first) == [None, None]
    assert _reasons(second) == ["connection error"] * 3
    assert second.all_refused


def test_an_exception_inside_one_request_is_its_row_and_the_pass_goes_on(monkeypatch):
    feed = client.SseParser.feed
    raised = []

    def feed_once_broken(self, data):
        if not raised:
            raised.append(True)
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
        return feed(self, data)

    monkeypatch.setattr(client.SseParser, "feed", feed_once_broken)
    with fake_server(FAST) as url:
        result = run_load(_spec(url, n=3, prompts=4))
    reasons = _reasons(result)
    assert reasons.count("exception") == 1
    assert reasons.count(None) == 3
    broken = next(r for r in result.records if r.error)
    assert broken.error.startswith("exception: UnicodeDecodeError: 'utf-8' codec can't decode")


def test_a_bad_payload_for_one_prompt_is_an_exception_row(monkeypatch):
    body = client.request_body

    def refuse_w1(spec, prompt, new_tokens=None):
        if prompt == "w1":
            raise ValueError("prompt w1 cannot be sent")
        return body(spec, prompt, new_tokens)

    monkeypatch.setattr(client, "request_body", refuse_w1)
    with fake_server(FAST) as url:
        result = run_load(_spec(url, n=2, prompts=3))
    assert [r.error for r in result.records] == [
        None,
        "exception: ValueError: prompt w1 cannot be sent",
        None,
    ]


class _Session:
    """A session whose `post` raises `error` at once (request_once's own handling)."""

    def __init__(self, error):
        self.error = error

    def post(self, *args, **kwargs):
        raise self.error


def _once(error):
    spec = _spec("http://127.0.0.1:1", prompts=1)
    return asyncio.run(
        request_once(_Session(error), spec, 0, scheduled_s=0.0, clock=lambda: 0.0, timeout_s=2.0)
    )


def test_a_cancellation_propagates_and_asyncio_timeout_error_is_a_timeout_row():
    with pytest.raises(asyncio.CancelledError):
        _once(asyncio.CancelledError())
    record = _once(asyncio.TimeoutError())  # its own class before Python 3.11
    assert record == RequestRecord(
        0, 0.0, 0.0, error="timeout: no response within 2 s", asked_tokens=4
    )
    assert _once(RuntimeError("boom")).error == "exception: RuntimeError: boom"


def test_list_models_says_in_one_line_when_the_answer_is_late_or_not_a_model_list():
    with socket.socket() as listener:  # accepts connections (backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(ServeError, match=r"/v1/models did not answer within 0\.5 s"):
            list_models(url, timeout_s=0.5)

    async def html(_):
        return web.Response(text="<html>hello</html>", content_type="text/html")

    async def other_json(_):
        return web.json_response({"models": ["a"]})

    app = web.Application()
    app.router.add_get("/html/v1/models", html)
    app.router.add_get("/json/v1/models", other_json)
    with serve_app(app) as url:
        with pytest.raises(ServeError, match=r"not answer an OpenAI model list.*<html>"):
            list_models(url + "/html")
        with pytest.raises(ServeError, match="OpenAI-compatible server"):
            list_models(url + "/json")
    with pytest.raises(ServeError, match=r"nothing answers at http://no-such-host\.invalid"):
        list_models("http://no-such-host.invalid:8000")


def test_the_fakes_failure_flags_reach_its_script():
    argv = ["--port", "1", "--never-answer", "--stall-after-headers", "--non-sse"]
    argv += ["--drop-after", "3", "--error-event-after", "4", "--fail-every", "5"]
    script, port = script_from_args([*argv, "--crash-after-requests", "6"])
    assert port == 1
    assert (script.never_answer, script.stall_after_headers, script.non_sse) == (True,) * 3
    assert (script.drop_after, script.error_event_after) == (3, 4)
    assert (script.fail_every, script.crash_after_requests) == (5, 6)
    assert script_from_args(["--port", "1"])[0] == Script()
    assert Script(error_event_after=2).cut == 2
    assert Script(stall_after_headers=True).cut == 1
