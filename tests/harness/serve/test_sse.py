"""SSE events out of reads that join several events or split one."""

from __future__ import annotations

from benchmarks.harness.serve.sse import SseParser


def test_joined_events_in_one_read_come_out_one_by_one():
    parser = SseParser()
    assert parser.feed(b'data: {"a":1}\n\ndata: {"a":2}\n\n: comment\n\ndata: [DONE]\n\n') == [
        '{"a":1}',
        '{"a":2}',
        "[DONE]",
    ]


def test_an_event_split_across_reads_waits_for_its_end_even_inside_a_character_or_crlf():
    parser = SseParser()
    text = 'data: {"t":"é"}\r\n\r\n'.encode()
    cut = text.index("é".encode()) + 1  # inside the two-byte character
    assert parser.feed(text[:cut]) == []
    assert parser.feed(text[cut:-3]) == []  # ends with "\r" of the blank line's "\r\n"
    assert parser.feed(text[-3:]) == ['{"t":"é"}']


def test_multi_line_data_is_joined_and_other_fields_ignored_and_close_flushes():
    parser = SseParser()
    assert parser.feed(b"event: x\nid: 3\ndata: one\ndata:two\n\n") == ["one\ntwo"]
    assert parser.feed(b"data: tail") == []
    assert parser.close() == ["tail"]
