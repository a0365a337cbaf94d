"""What this machine runs of a matrix (skip reasons) and in which order (one build per model)."""

from __future__ import annotations

from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.plan import build_order, skip_reason


def cell(model="tiny-llama", device="cpu", dtype="float32", *, prompt_len=16, new_tokens=4):
    return Cell(model, device, dtype, 1, prompt_len, new_tokens, warmup=0, rounds=1, seed=0)


def test_a_cell_this_machine_can_run_has_no_skip_reason():
    assert skip_reason(cell()) is None


def test_positions_beyond_the_model_are_a_skip_reason_at_exactly_p_plus_n_minus_1():
    # tiny-llama has 1024 positions: the final cache holds P + N - 1.
    assert skip_reason(cell(prompt_len=1020, new_tokens=5)) is None
    reason = skip_reason(cell(prompt_len=1020, new_tokens=6))
    assert reason == (
        "P + N - 1 = 1025 positions exceed tiny-llama's 1024 (max_position_embeddings)"
    )


def test_an_absent_device_is_a_skip_reason():
    assert "cuda:7 unavailable" in str(skip_reason(cell(device="cuda:7")))


def test_build_order_groups_each_model_device_dtype_in_first_appearance_order():
    cells = [
        cell(dtype="float32", prompt_len=8),
        cell(dtype="bfloat16", prompt_len=8),
        cell(dtype="float32", prompt_len=16),
        cell(model="tiny-qwen2", prompt_len=8),
        cell(dtype="bfloat16", prompt_len=16),
    ]
    rank = build_order(cells)
    ordered = sorted(cells, key=lambda c: rank[c.id])
    assert [c.build_key for c in ordered] == [
        ("tiny-llama", "cpu", "float32"),
        ("tiny-llama", "cpu", "float32"),
        ("tiny-llama", "cpu", "bfloat16"),
        ("tiny-llama", "cpu", "bfloat16"),
        ("tiny-qwen2", "cpu", "float32"),
    ]
    assert [c.prompt_len for c in ordered[:2]] == [8, 16]
