"""No shipped matrix holds a cell that no machine can run.

A cell skipped by a rule that does not depend on the machine (FlashAttention-2 on a static cache,
CUDA graphs on a dynamic cache, `reduce-overhead` off CUDA, a quantized KV cache that is also
static, a run mode the tensor-parallel worker does not run) is a line in every report that never
turns into a figure: the matrix should not hold it. Issue 42 found 16 such cells in
matrix/cuda-compile.yaml (FlashAttention-2 x static cache, every compile mode).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.matrix.parse import load_matrix
from benchmarks.harness.runmode.compiled import uses_cuda_graphs
from benchmarks.harness.runmode.decide import attention_cache_reason
from benchmarks.suite.tp.cells import run_mode_reason

ROOT = Path(__file__).resolve().parents[3]
MATRICES = sorted((ROOT / "matrix").glob("*.yaml"))


def never_runs_reason(cell: Cell) -> str | None:
    """Why `cell` is skipped on every machine (rules that read only the cell), or None."""
    device = cell.device.split(":")[0]
    if cell.compile == "reduce-overhead" and device != "cuda":
        return "reduce-overhead off CUDA"
    if uses_cuda_graphs(cell.compile, device) and cell.cache != "static":
        return "CUDA graphs without a static cache"
    if cell.kv_quantized and cell.cache == "static":
        return "a quantized KV cache that is also static"
    if cell.tp_size > 1 and (reason := run_mode_reason(cell)):
        return reason
    return attention_cache_reason(cell.attention, cell.cache)


def test_the_rule_sees_the_cells_issue_42_found():
    fa2_static = Cell(
        "llama-3.2-1b", "cuda", "bfloat16", 1, 512, 128, 2, 5, 0,
        attention="flash_attention_2", cache="static", compile="none",
    )  # fmt: skip
    assert "flash_attention_2 with a static cache" in (never_runs_reason(fa2_static) or "")
    fa2_dynamic = Cell(
        "llama-3.2-1b", "cuda", "bfloat16", 1, 512, 128, 2, 5, 0,
        attention="flash_attention_2", cache="dynamic", compile="default",
    )  # fmt: skip
    assert never_runs_reason(fa2_dynamic) is None


@pytest.mark.parametrize("path", MATRICES, ids=[p.name for p in MATRICES])
def test_no_shipped_cell_is_skipped_on_every_machine(path: Path):
    never = {c.id: r for c in load_matrix(path).cells if (r := never_runs_reason(c))}
    assert never == {}, f"{path.name}: cells no machine runs; drop them from the matrix"


def test_the_compile_matrix_compares_flash_attention_2_with_sdpa_where_both_run():
    cells = load_matrix(ROOT / "matrix" / "cuda-compile.yaml").cells
    fa2 = [c for c in cells if c.attention == "flash_attention_2"]
    assert fa2
    assert {c.cache for c in fa2} == {"dynamic"}
    twins = {
        (c.model, c.prompt_len, c.compile)
        for c in cells
        if c.cache == "dynamic" and c.attention == "sdpa"
    }
    assert {(c.model, c.prompt_len, c.compile) for c in fa2} <= twins  # an sdpa twin each
    # Every compile mode still runs on the static cache (CUDA graphs need it).
    static = {c.compile for c in cells if c.cache == "static" and c.attention == "sdpa"}
    assert static == {"none", "default", "reduce-overhead", "max-autotune"}
