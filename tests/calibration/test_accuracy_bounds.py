"""The accuracy-bound measurement: the rule on known rows, and one tiny real run."""

from __future__ import annotations

import json

import pytest

from benchmarks.calibration.accuracy_bounds import main, summary


def test_the_rule_on_known_rows():
    rows = [
        {"method": "int8wo", "delta_std": 0.2, "agreement_ratio": 1.0},
        {"method": "int8wo", "delta_std": 0.51, "agreement_ratio": 0.875},
        {"method": "int8wo", "delta_std": 0.3, "agreement_ratio": 0.9},
        {"method": "nf4", "delta_std": 4.489, "agreement_ratio": 0.0},
    ]
    lines = summary(rows)
    assert lines[0].startswith("int8wo")
    assert "worst 0.510 std (median 0.300)" in lines[0]
    assert lines[0].endswith("Bound(0.8, 0.4)")  # 1.5 x 0.51 = 0.765 -> 0.8; 0.875 / 2 -> 0.4
    assert lines[1].endswith("Bound(6.8, 0.0)")


def test_a_tiny_run_measures_every_method_that_runs_here(tmp_path, capsys):
    pytest.importorskip("torchao")
    pytest.importorskip("bitsandbytes")
    out = tmp_path / "rows.json"
    argv = ["--models", "tiny-llama", "--seeds", "0", "--prompt-len", "8", "--new-tokens", "4"]
    assert main([*argv, "--kv-residual", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    methods = {row["method"] for row in rows}
    assert {"int8wo", "int4wo-g32", "nf4", "bnb8"} <= methods
    assert "fp8dq" not in methods  # CUDA sm89+ only
    assert {row["dtype"] for row in rows} == {"float32", "bfloat16"}
    assert all(row["delta_std"] >= 0 and 0 <= row["agreement_ratio"] <= 1 for row in rows)
    assert "int8wo" in capsys.readouterr().out
