"""The accuracy-bound measurement: the rule on known rows, and one tiny real run."""

from __future__ import annotations

import json

import pytest

from benchmarks.calibration.accuracy_bounds import main, summary


def test_the_rule_on_known_rows():
    def row(method, delta, agreement, sqnr, kl):
        keys = ("method", "delta_std", "agreement_ratio", "sqnr_db_min", "logits_kl")
        return dict(zip(keys, (method, delta, agreement, sqnr, kl), strict=True))

    rows = [
        row("int8wo", 0.2, 1.0, 41.2, 1e-4),
        row("int8wo", 0.51, 0.875, 40.0, 3e-4),
        row("int8wo", 0.3, 0.9, None, 2e-4),  # no Linear quantized: no SQNR, skipped
        row("nf4", 4.489, 0.0, 20.0, 0.05),
    ]
    lines = summary(rows)
    assert lines[0].startswith("int8wo")
    assert "worst 0.510 std (median 0.300)" in lines[0]
    assert "least SQNR 40.0 dB, largest KL 3.00e-04" in lines[0]
    # 1.5 x 0.51 = 0.765 -> 0.8; 0.875 / 2 -> 0.4; 40 dB less one bit is 34, capped at 8-bit's 30
    assert lines[0].endswith("Bound(0.8, 0.4), SQNR >= 30 dB")
    assert lines[1].endswith("Bound(6.8, 0.0), SQNR >= 14 dB")  # 20 - 6 = 14 (under 15)


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
