"""Interleaved comparison groups: which cells are variants of one comparison, where their items
sort, when a group is skipped (alone here, or too big to hold at once), how many rounds."""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness.device.freemem import FreeMemory
from benchmarks.harness.matrix.cells import Cell, Matrix
from benchmarks.harness.model.models import MODELS_DIR
from benchmarks.harness.plan import build_order
from benchmarks.suite.groups import group_fit_reason, group_ranks, interleaved_reason
from benchmarks.suite.interleave import MIN_PAIRS, comparison_key, is_dense, pairs_for
from benchmarks.suite.rounds import MATRIX


def cell(quant=None, kv_quant=None, *, compile=None, rounds=3, min_timed_s=0):
    return Cell("tiny-llama", "cpu", "bfloat16", 1, 8, 4, 1, rounds, 0, min_timed_s=min_timed_s,
                quant=quant, kv_quant=kv_quant, compile=compile)  # fmt: skip


class FakeConfig:
    """What `interleaved_reason` reads of a pytest config: the matrix and `--models-dir`."""

    def __init__(self, cells):
        self.stash = {MATRIX: Matrix(Path("m.yaml"), tuple(cells), 1, 3, 0, 0)}

    def getoption(self, _name):
        return None


def test_variants_differ_only_in_their_quantization():
    dense, int8, kv = cell("none"), cell("int8wo"), cell("none", kv_quant="hqq4")
    assert comparison_key(dense) == comparison_key(int8) == comparison_key(kv)
    assert comparison_key(cell("none", compile="default")) != comparison_key(dense)
    assert is_dense(dense)
    assert is_dense(cell())
    assert not is_dense(int8)
    assert not is_dense(kv)


def test_a_groups_items_sort_after_its_last_cell():
    cells = [cell("none"), cell("none", compile="default"), cell("int8wo")]
    rank = build_order(cells)
    ranks = group_ranks(cells, rank)
    assert ranks[cells[0].id] == ranks[cells[2].id] == max(rank[cells[0].id], rank[cells[2].id])
    assert ranks[cells[1].id] == rank[cells[1].id]  # alone in its group


def test_a_cell_alone_here_or_a_group_too_big_is_skipped_with_the_reason():
    cells = [cell("none"), cell("int8wo"), cell("none", compile="default")]
    config = FakeConfig(cells)
    roomy = lambda device: FreeMemory(device, 10**12, "test")  # noqa: E731
    reasons = dict.fromkeys((c.id for c in cells), None)
    assert interleaved_reason(config, cells[0], reasons, roomy) is None
    alone = interleaved_reason(config, cells[2], reasons, roomy)
    assert alone is not None
    assert "nothing to time it in turn with" in alone
    # int8wo cannot run here: the dense cell is left alone
    only = interleaved_reason(config, cells[0], reasons | {cells[1].id: "no torchao"}, roomy)
    assert only is not None
    # the group's variants are held at once: two builds of weights plus their caches
    tight = lambda device: FreeMemory(device, 10**5, "test")  # noqa: E731
    found = group_fit_reason(cells[:2], MODELS_DIR, tight)
    assert found is not None
    assert "held at once" in found
    assert group_fit_reason(cells[:2], MODELS_DIR, roomy) is None


def test_rounds_per_variant():
    assert pairs_for([cell("none", rounds=3), cell("int8wo", rounds=5)]) == MIN_PAIRS
    assert pairs_for([cell("none", rounds=40)]) == 40
    assert pairs_for([cell("none", min_timed_s=100)]) == MIN_PAIRS  # pairing cancels the level
    assert pairs_for([cell("none", rounds=500)]) == 200  # at most MAX_PAIRS
