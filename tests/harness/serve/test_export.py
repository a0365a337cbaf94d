"""The per-request export: rows from records, a JSON Lines file written atomically, read back,
and refused when it is of another kind or schema."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.harness.errors import ServeError
from benchmarks.harness.serve.export import KIND, read_export, request_rows, write_export
from benchmarks.harness.serve.metrics import Chunk, RequestRecord

DONE = RequestRecord(
    index=0,
    scheduled_s=0.5,
    sent_s=0.6,
    chunks=(Chunk(0.8, 1), Chunk(0.9, 2)),
    done_s=1.0,
    output_tokens=3,
    prompt_tokens=8,
    events=4,
    asked_tokens=3,
)
FAILED = RequestRecord(1, 0.7, 0.7, error="timeout: no response within 1 s", asked_tokens=3)


def test_a_row_holds_what_the_request_recorded():
    done, failed = request_rows([DONE, FAILED], round_index=2, warmup=False)
    assert done == {
        "index": 0,
        "round": 2,
        "warmup": False,
        "scheduled_s": 0.5,
        "sent_s": 0.6,
        "first_token_s": 0.8,
        "chunks": [[0.8, 1], [0.9, 2]],
        "last_content_s": 0.9,
        "done_s": 1.0,
        "events": 4,
        "asked_tokens": 3,
        "output_tokens": 3,
        "prompt_tokens": 8,
        "error": None,
    }
    assert failed["first_token_s"] is None
    assert failed["chunks"] == []
    assert failed["error"] == "timeout: no response within 1 s"


def test_the_export_round_trips_with_its_header_first(tmp_path):
    path = tmp_path / "sub" / "requests.jsonl"
    rows = request_rows([DONE], round_index=0, warmup=True)
    rows += request_rows([FAILED], round_index=1, warmup=False)
    write_export(path, {"cell": "c1", "request_rate": math.inf}, rows)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    assert json.loads(lines[0]) == {
        "schema": 1,
        "kind": KIND,
        "cell": "c1",
        "request_rate": "inf",  # standard JSON: a non-finite float as its string
    }
    header, back = read_export(path)
    assert header["cell"] == "c1"
    assert back == rows
    assert [p.name for p in path.parent.iterdir()] == ["requests.jsonl"]  # no temp file left
    with pytest.raises(ValueError, match="schema"):
        write_export(path, {"schema": 2}, rows)


def test_a_failed_write_leaves_the_old_export_whole(tmp_path):
    path = tmp_path / "requests.jsonl"
    write_export(path, {"cell": "old"}, [])
    with pytest.raises(TypeError):
        write_export(path, {"cell": "new"}, [{"bad": object()}])
    assert read_export(path)[0]["cell"] == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["requests.jsonl"]


@pytest.mark.parametrize(
    ("first_line", "match"),
    [
        ({"schema": 2, "kind": KIND}, r"requests\.jsonl: field `schema` is 2;"),
        ({"kind": KIND}, r"requests\.jsonl: field `schema` is None;"),
        ({"schema": 1, "kind": "other"}, r"requests\.jsonl: field `kind` is 'other'"),
    ],
)
def test_another_schema_or_kind_is_refused_naming_the_file_and_field(tmp_path, first_line, match):
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps(first_line) + "\n", encoding="utf-8")
    with pytest.raises(ServeError, match=match):
        read_export(path)


def test_a_file_that_is_not_json_lines_is_refused_with_its_line(tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps({"schema": 1, "kind": KIND}) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(ServeError, match=r"requests\.jsonl: line 2 is not JSON"):
        read_export(path)
    path.write_text("", encoding="utf-8")
    with pytest.raises(ServeError, match="empty"):
        read_export(path)
