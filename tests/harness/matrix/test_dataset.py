"""A serving dataset file: rows read in order, every mistake named by file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.harness.errors import MatrixError
from benchmarks.harness.matrix.dataset import DatasetRow, read_dataset


def test_rows_are_read_in_order_with_comments_and_blank_lines_skipped(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        '# a sample of chat traffic\n{"prompt": "hello there", "output_len": 3}\n\n'
        '{"prompt_len": 12, "output_len": 5}\n'
    )
    assert read_dataset(path) == (
        DatasetRow(3, prompt="hello there"),
        DatasetRow(5, prompt_len=12),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no rows; add one JSON object per line"),
        ("{oops\n", "line 1: not JSON"),
        ('{"prompt_len": 3}\n', "line 1: missing output_len"),
        ('{"prompt_len": 3, "output_len": 0}\n', "line 1: output_len 0 is not valid"),
        ('{"output_len": 2}\n', "give exactly one of prompt (text) and prompt_len"),
        ('{"prompt": "a", "prompt_len": 1, "output_len": 2}\n', "give exactly one of prompt"),
        ('{"prompt": " ", "output_len": 2}\n', "prompt must be non-empty text"),
        ('\n{"prompt_len": 2, "output_len": 2, "temp": 1}\n', "line 2: unknown field(s) temp"),
        ("[1, 2]\n", "expected a JSON object"),
    ],
)
def test_a_broken_dataset_names_the_file_line_and_fix(tmp_path, text, message):
    path = tmp_path / "d.jsonl"
    path.write_text(text)
    with pytest.raises(MatrixError) as error:
        read_dataset(path)
    assert str(path) in str(error.value)
    assert message in str(error.value)


def test_a_missing_file_says_where_relative_paths_are_read_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MatrixError, match="relative paths are read from"):
        read_dataset(tmp_path / "nope.jsonl")


def test_the_shipped_sample_dataset_reads():
    rows = read_dataset(Path(__file__).resolve().parents[3] / "matrix/datasets/chat-sample.jsonl")
    assert len(rows) == 32
    assert all(r.prompt_len and r.output_len for r in rows)


def test_a_file_is_parsed_once_and_again_when_it_changes(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt_len": 3, "output_len": 2}\n')
    first = read_dataset(path)
    assert read_dataset(path) is first  # the matrix, the sizing and each cell share one parse
    path.write_text('{"prompt_len": 3, "output_len": 2}\n{"prompt_len": 5, "output_len": 1}\n')
    assert len(read_dataset(path)) == 2
