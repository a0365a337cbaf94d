"""The op-level comparison a bisection puts beside its culprit (`benchmarks.bisect.profile`), on
hand-made Chrome traces: self time nets out the children, only decode-step ranges count."""

from __future__ import annotations

import pytest

from benchmarks.bisect.profile import compare, decode_ops, markdown


def op(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, object]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def step(i: int, ts: float, dur: float) -> dict[str, object]:
    return {"ph": "X", "cat": "user_annotation", "name": f"phasebench.decode_step.{i}", "ts": ts,
            "dur": dur, "pid": 1, "tid": 1}  # fmt: skip


def trace(mm_us: float) -> dict[str, object]:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "phasebench.prefill", "ts": 0, "dur": 90},
        op("aten::linear", 10, 80),  # in prefill: not counted
        op("aten::mm", 20, 60),
    ]
    for i, start in enumerate((100, 300), 1):
        events += [
            step(i, start, 150),
            op("aten::linear", start + 10, mm_us + 10),
            op("aten::mm", start + 15, mm_us),  # a child of linear: its time is not linear's
            op("aten::add", start + mm_us + 30, 5),
            op("aten::add", start + 5, 2, tid=2),  # another thread: no nesting across threads
        ]
    events.append({"ph": "i", "name": "marker", "ts": 5})  # not a complete event
    return {"traceEvents": events}


def test_self_time_per_step_nets_out_children_and_counts_only_decode_steps():
    found = decode_ops(trace(40.0))
    assert found.steps == 2
    assert found.self_us["aten::mm"] == pytest.approx(40.0)
    assert found.self_us["aten::linear"] == pytest.approx(10.0)
    assert found.self_us["aten::add"] == pytest.approx(7.0)
    assert found.calls["aten::add"] == pytest.approx(2.0)
    assert found.calls["aten::mm"] == pytest.approx(1.0)


def test_the_ops_that_moved_most_come_first():
    rows = compare(decode_ops(trace(40.0)), decode_ops(trace(100.0)))
    assert rows[0]["op"] == "aten::mm"
    assert rows[0]["change_us"] == pytest.approx(60.0)
    assert {r["op"] for r in rows[1:]} == {"aten::linear", "aten::add"}
    text = "\n".join(
        markdown({"rows": rows, "parent_total_us": 57.0, "culprit_total_us": 117.0, "steps": 2})
    )
    assert "| `aten::mm` | 40.0 | 100.0 | +60.0 | 1 \u2192 1 |" in text
