"""Interleaved: a cell's prefill and decode step timed in turn with the other cells of its
comparison group (its quantized and dense variants), so its ratio to the dense cell holds on a
drifting host (`benchmarks/suite/interleave.py`).

Opt-in (`measurements: [..., interleaved]`). The group is timed once, at its first item, after
every other measurement of its cells (`benchmarks/suite/groups.py`); each cell's records then
replay that cell's own rounds (`tp.record.replay_rounds`: the benchmark statistic is exactly
the interleaved rounds), and carry the dense cell's rounds of the same group, paired by index:
round r of both was timed seconds apart. The ratio to dense and its interval are computed where
they are shown (`reports.analysis.speedup`), from those pairs.

Recorded (`interleaved_prefill` / `interleaved_decode`): the benchmark statistic; `prefill_s`
and `prefill_tok_per_s`, or `decode_step_s`, `decode_tok_per_s` and `decode_bytes_per_s`
(`decode_bytes`, the roofline's compulsory bytes of one step, per second); `interleaved_order`
(the group's cell ids in timed order), `interleaved_dense_cell_id` and
`interleaved_dense_rounds_s`, `interleaved_pairs`; the weights' stored bytes, the KV bytes per
token (dense, and packed for a quantized cache) and, for a quantized cell, its quant and accuracy
fields; `decode_top_ops` (the operators a few untimed, profiled
decode steps spent their own time in) and `decode_kernel_note` (whether the kernel the method is
known for ran, `suite.oplist.kernel_note`). Peak memory is not recorded here: every variant is
resident.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.records import median
from benchmarks.suite.collect import skip_reasons
from benchmarks.suite.groups import GroupStore, interleaved_reason
from benchmarks.suite.interleave import GroupTiming
from benchmarks.suite.rounds import EXTRA_INFO_SCHEMA, Progress, thread_policy
from benchmarks.suite.tp.record import replay_rounds

MEASUREMENT = "interleaved"
cell_reason = interleaved_reason  # read by `benchmarks/suite/collect.py` at collection
TIMER = "interleaved_replay"


def test_interleaved_prefill(
    cell: Cell, interleaved: GroupStore, progress: Progress, benchmark: Any,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """The cell's prefill rounds, timed in turn with its group's other cells."""
    group = interleaved.timing_for(cell, skip_reasons(request.config))
    _record(cell, group, progress, benchmark, "prefill")


def test_interleaved_decode(
    cell: Cell, interleaved: GroupStore, progress: Progress, benchmark: Any,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """The cell's decode-step rounds at context P, timed in turn with its group's other cells."""
    group = interleaved.timing_for(cell, skip_reasons(request.config))
    _record(cell, group, progress, benchmark, "decode")


def _record(cell: Cell, group: GroupTiming, progress: Progress, benchmark: Any, phase: str) -> None:
    if group.error is not None:
        raise AssertionError(
            f"{cell.id}: the interleaved rounds of its group failed: {group.error}"
        )
    mine = group.variants.get(cell.id)
    if mine is None:  # a bug: the cell runs here, so its group holds it
        raise AssertionError(f"{cell.id} is not in its interleaved group {group.order}")
    if mine.error is not None:
        raise AssertionError(f"{cell.id}: interleaved: {mine.error}")
    rounds = mine.prefill_s if phase == "prefill" else mine.decode_s
    dense = group.variants.get(group.dense_id or "")
    benchmark.params = cell.axes()
    benchmark.group = f"interleaved_{phase}"
    info: dict[str, Any] = benchmark.extra_info
    info.update(
        {
            "schema": EXTRA_INFO_SCHEMA,
            "cell_id": cell.id,
            "measurement": f"interleaved_{phase}",
            "warmup": cell.warmup,
            "rounds": cell.rounds,
            "min_timed_s": cell.min_timed_s,
            "seed": cell.seed,
            "timer": TIMER,
            "sync": "the suite's synchronizing timer around each call, in turn with the group",
            "build_s": mine.build_s,
            **thread_policy(),
            "interleaved_order": list(group.order),
            "interleaved_pairs": group.pairs,
            "interleaved_group_wall_s": group.wall_s,
            "interleaved_dense_cell_id": group.dense_id,
            "interleaved_dense_rounds_s": None
            if dense is None
            else list(dense.prefill_s if phase == "prefill" else dense.decode_s),
            **mine.record,
        }
    )
    replay_rounds(benchmark, rounds, TIMER)
    middle = median(rounds)
    if phase == "prefill":
        info["prefill_s"] = middle
        info["prefill_tok_per_s"] = cell.batch * cell.prompt_len / middle
        info.pop("decode_bytes", None)  # a decode step's figures
        info.pop("decode_kernel_note", None)
    else:
        info["decode_step_s"] = middle
        info["decode_tok_per_s"] = cell.batch / middle
        info["context_len"] = cell.prompt_len
        info["decode_bytes_per_s"] = info["decode_bytes"] / middle
        info["decode_top_ops"] = mine.top_ops
    progress(f"{cell.id}: interleaved {phase} median {middle * 1e3:.2f} ms")
