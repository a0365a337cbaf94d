"""`kv --quant` / `--kv-quant`: weights_bytes for every model (dense too), measured against the
analytic figure on real loops, a quantized cache's timeline, and one line plus exit 2 for bad
input."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.harness.cli import main


def run(capsys, *argv: str) -> tuple[int, dict, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    report = json.loads(captured.out) if captured.out.strip() else {}
    return status, report, captured.err


def test_dense_models_report_their_weights_bytes(capsys):
    # qwen2.5-1.5b in float16: 1,543,714,304 parameters (tied embedding once) x 2 bytes.
    status, report, err = run(capsys, "kv", "qwen2.5-1.5b", "--dtype", "float16")
    assert (status, err) == (0, "")
    assert report["quant"] == "none"
    assert report["weights_bytes"] == report["weights_dense_bytes"] == 1_543_714_304 * 2


def test_int8_weights_of_a_7b_config_analytically(capsys):
    status, report, _ = run(capsys, "kv", "llama-2-7b", "--dtype", "bfloat16", "--quant", "int8wo")
    assert status == 0
    linears = [layer for layer in report["weight_layers"] if layer["method"] == "int8wo"]
    assert len(linears) == 32 * 7  # q k v o gate up down per layer; the LM head stays dense
    q = linears[0]
    assert q["shape"] == [4096, 4096]
    assert q["bytes"] == 4096 * 4096 + 4 * 4096 + 4096
    assert report["weights_bytes"] < 0.6 * report["weights_dense_bytes"]


@pytest.mark.parametrize("quant", ["int4wo-g64", "nf4"])
def test_measure_matches_for_quantized_weights(capsys, quant):
    pytest.importorskip("bitsandbytes" if quant == "nf4" else "torchao")
    status, report, err = run(
        capsys, "kv", "tiny-llama", "--dtype", "bfloat16", "--prompt-len", "8",
        "--new-tokens", "3", "--measure", "--quant", quant,
    )  # fmt: skip
    assert (status, err) == (0, "")
    assert report["match"] is True
    assert report["measured"]["weights_bytes"] == report["weights_bytes"]


def test_a_weights_mismatch_exits_1(capsys, monkeypatch):
    pytest.importorskip("torchao")
    from benchmarks.harness.quant import weights_cli  # noqa: PLC0415

    real = weights_cli.weights_measured
    monkeypatch.setattr(
        weights_cli,
        "weights_measured",
        lambda model, dtype: {**real(model, dtype), "weights_bytes": 1},
    )
    monkeypatch.setattr("benchmarks.harness.cli.weights_measured", weights_cli.weights_measured)
    status, report, _ = run(
        capsys, "kv", "tiny-llama", "--prompt-len", "4", "--new-tokens", "2", "--measure",
        "--quant", "int8wo",
    )  # fmt: skip
    assert status == 1
    assert report["match"] is False


def test_quantized_cache_timeline_measured(capsys):
    pytest.importorskip("hqq")
    from benchmarks.harness.kvquant.backends import kv_quant_unsupported_reason  # noqa: PLC0415
    from benchmarks.harness.model.models import load_model_spec  # noqa: PLC0415

    config = load_model_spec("tiny-llama").hf_config()
    if kv_quant_unsupported_reason("hqq4", config, "cpu") is not None:
        pytest.skip(kv_quant_unsupported_reason("hqq4", config, "cpu"))
    status, report, err = run(
        capsys, "kv", "tiny-llama", "--dtype", "float32", "--prompt-len", "8", "--new-tokens",
        "7", "--kv-quant", "hqq4", "--kv-group-size", "32", "--kv-residual", "3", "--measure",
    )  # fmt: skip
    assert (status, err) == (0, ""), err
    assert report["match"] is True
    steps = report["per_step_bytes"]
    assert len(steps) == 7
    # Residual positions after j steps: j mod 3; a flush (j = 3, 6) re-quantizes everything.
    residuals = [layer["residual_positions"] for layer in report["layers"]]
    assert residuals == [0] * len(residuals)  # 6 steps: just flushed
    assert steps[3] < steps[2]  # the flush packs the dense residual
    assert report["kv_quant_bytes_per_token"] < 2 * 2 * 16 * 4  # far below the dense float32


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["kv", "tiny-llama", "--quant", "int3"], "--quant"),
        (["kv", "tiny-llama", "--kv-quant", "hqq3"], "--kv-quant"),
        (["kv", "tiny-llama", "--kv-quant", "hqq4", "--kv-group-size", "0"], "--kv-group-size"),
        (["kv", "tiny-llama", "--kv-quant", "hqq4", "--kv-residual", "-1"], "--kv-residual"),
        (["kv", "tiny-llama", "--quant", "fp8dq", "--measure"], "fp8dq"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, field):
    pytest.importorskip("torchao")
    status, report, err = run(capsys, *argv)
    assert status == 2
    assert report == {}
    assert field in err
    assert err.count("\n") == 1


def test_fp32_dense_bytes_of_a_tiny_model_match_parameters(capsys):
    from benchmarks.harness.model.models import build_model, load_model_spec  # noqa: PLC0415

    model = build_model(load_model_spec("tiny-llama"), torch.device("cpu"), torch.float32)
    status, report, _ = run(capsys, "kv", "tiny-llama", "--dtype", "float32")
    assert status == 0
    assert report["weights_bytes"] == sum(p.numel() * p.element_size() for p in model.parameters())
