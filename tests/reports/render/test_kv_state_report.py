"""The report's KV table shows the fixed state of hybrid models beside the KV (issue 12 item 5).

`reports.render.tables.kv_rows` carries `kv_state_analytic_bytes` / `kv_state_measured_bytes` from
extra_info and its `match` column covers them too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reports.render.tables import kv_rows


@dataclass
class Bench:
    extra: dict[str, Any]
    cell_id: str = "tiny-qwen3-next-cpu-float32-b1-p10-n3"
    group: str = "generate"


@dataclass
class FakeRun:
    benchmarks: dict[str, Bench] = field(default_factory=dict)


KV = {
    "kv_bytes_per_token": 512,
    "kv_analytic_after_prefill_bytes": 5120,
    "kv_measured_after_prefill_bytes": 5120,
    "kv_analytic_final_bytes": 6144,
    "kv_measured_final_bytes": 6144,
}


def state(analytic: int, measured: int) -> Bench:
    return Bench({**KV, "kv_state_analytic_bytes": analytic, "kv_state_measured_bytes": measured})


def test_state_bytes_are_columns_of_the_kv_table_and_part_of_the_match():
    run = FakeRun(
        {"same": state(12288, 12288), "differs": state(12288, 1), "attention-only": state(0, 0)}
    )
    rows = {row.fullname: row.values for row in kv_rows(run)}
    assert rows["same"]["kv_state_measured_bytes"] == 12288
    assert rows["same"]["match"] == "yes"
    assert rows["differs"]["match"] == "NO"
    assert rows["attention-only"]["match"] == "yes"


def test_history_without_state_fields_still_matches_on_kv_alone():
    rows = kv_rows(FakeRun({"old": Bench(dict(KV))}))
    assert rows[0].values["kv_state_analytic_bytes"] is None
    assert rows[0].values["match"] == "yes"
