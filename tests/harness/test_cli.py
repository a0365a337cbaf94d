"""`python -m benchmarks.harness kv` (DESIGN §4) and `build-time`: the seeds' figures exactly,
measured-vs-analytic on real loops, and one line plus exit 2 for every kind of bad input.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import transformers
from packaging.version import Version

from benchmarks.harness import cli
from benchmarks.harness.cli import main

ROOT = Path(__file__).resolve().parents[2]
QWEN_15B = ["kv", "qwen2.5-1.5b", "--dtype", "float16", "--prompt-len", "512", "--new-tokens", "32"]
LLAMA2_7B_CONFIG = {  # Llama-2-7b-hf's config.json, the fields that matter
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
    "max_position_embeddings": 4096, "vocab_size": 32000, "rms_norm_eps": 1e-5,
}  # fmt: skip


def run(capsys, *argv: str) -> tuple[int, dict, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    report = json.loads(captured.out) if captured.out.strip() else {}
    return status, report, captured.err


def test_qwen25_15b_fp16_seed_figures(capsys):
    status, report, err = run(capsys, *QWEN_15B)
    assert (status, err) == (0, "")
    assert report["bytes_per_token"] == 28_672
    assert report["after_prefill_bytes"] == 14_680_064
    assert report["final_bytes"] == 15_568_896  # 512 + 32 - 1 = 543 positions
    assert len(report["layers"]) == 28
    assert report["layers"][0] == {"index": 0, "type": "full_attention",
                                   "k_shape": [1, 2, 543, 128], "v_shape": [1, 2, 543, 128],
                                   "bytes": 556_032}  # fmt: skip
    assert all(isinstance(report[k], int) for k in ("after_prefill_bytes", "final_bytes"))
    assert "measured" not in report


def test_llama2_7b_shaped_config_json_is_2_gib_at_4096_tokens(capsys, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA2_7B_CONFIG), encoding="utf-8")
    status, report, _ = run(capsys, "kv", str(config), "--prompt-len", "4096", "--new-tokens", "1")
    assert status == 0
    assert report["bytes_per_token"] == 524_288
    assert report["after_prefill_bytes"] == report["final_bytes"] == 2_147_483_648
    _, by_name, _ = run(capsys, "kv", "llama-2-7b", "--prompt-len", "4096", "--new-tokens", "1")
    assert by_name["final_bytes"] == 2 * 1024**3


def test_cli_runs_as_a_module_subprocess():
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.harness", *QWEN_15B],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert (report["bytes_per_token"], report["final_bytes"]) == (28_672, 15_568_896)


def test_measure_cache_grows_4_5_6_positions(capsys):
    status, report, _ = run(capsys, "kv", "tiny-llama", "--prompt-len", "4", "--new-tokens", "3",
                            "--measure", "--dtype", "float32")  # fmt: skip
    per_token = report["bytes_per_token"]
    assert status == 0
    assert report["match"] is True
    assert report["measured"]["per_step_bytes"] == [4 * per_token, 5 * per_token, 6 * per_token]
    assert report["measured"]["after_prefill_bytes"] == report["after_prefill_bytes"]
    assert report["measured"]["final_bytes"] == report["final_bytes"] == 6 * per_token


@pytest.mark.parametrize("name", ["tiny-mistral-sw", "tiny-gemma2", "tiny-gpt2", "tiny-qwen2-sw"])
def test_measure_matches_analytic_past_the_sliding_window(capsys, name):
    status, report, err = run(capsys, "kv", name, "--prompt-len", "20", "--new-tokens", "4",
                              "--batch", "2", "--measure", "--dtype", "bfloat16")  # fmt: skip
    if name == "tiny-gemma2" and Version(transformers.__version__) < Version("4.56"):
        # The engine refuses it there (it would decode wrongly past the window): one line, 2.
        assert status == 2
        assert "HybridCache" in err
        assert len(err.strip().splitlines()) == 1
        return
    assert (status, report["match"]) == (0, True), err
    assert report["measured"]["storage_final_bytes"] >= report["measured"]["final_bytes"]


def test_a_mismatch_exits_1(capsys, monkeypatch):
    def wrong(request):
        return {"after_prefill_bytes": 0, "final_bytes": 0, "per_step_bytes": [0, 0],
                "state_bytes": 0}  # fmt: skip

    monkeypatch.setattr(cli, "measure", wrong)
    status, report, _ = run(capsys, "kv", "tiny-llama", "--prompt-len", "4", "--new-tokens", "2",
                            "--measure")  # fmt: skip
    assert (status, report["match"]) == (1, False)


@pytest.mark.parametrize("family", ["qwen3_next", "jamba"])
def test_kv_reports_the_fixed_state_of_hybrid_layers_beside_kv_and_measures_it(
    capsys, tmp_path, family
):
    """Gated DeltaNet / Mamba layers: `state_bytes` (conv + recurrent, per stateful layer) is in
    the output next to the KV, and `--measure` finds exactly it in the real cache."""
    from tests.kv_configs import FAMILIES  # noqa: PLC0415

    config = FAMILIES[family]()
    config.save_pretrained(tmp_path)
    status, report, err = run(capsys, "kv", str(tmp_path / "config.json"), "--prompt-len", "10",
                              "--new-tokens", "3", "--batch", "2", "--measure",
                              "--dtype", "bfloat16")  # fmt: skip
    assert (status, report["match"]) == (0, True), err
    assert report["state_bytes"] > 0
    assert report["state_bytes"] == report["measured"]["state_bytes"]
    assert sum(layer["bytes"] for layer in report["state_layers"]) == report["state_bytes"]
    assert [layer["index"] for layer in report["state_layers"]] == [0, 2]
    assert report["state_layers"][0]["conv_shape"][0] == 2  # batch


def test_a_state_mismatch_exits_1(capsys, monkeypatch, tmp_path):
    from tests.kv_configs import FAMILIES  # noqa: PLC0415

    FAMILIES["qwen3_next"]().save_pretrained(tmp_path)
    real = cli.measure

    def off_by_one(request):
        measured = real(request)
        return {**measured, "state_bytes": measured["state_bytes"] + 1}

    monkeypatch.setattr(cli, "measure", off_by_one)
    status, report, _ = run(capsys, "kv", str(tmp_path / "config.json"), "--prompt-len", "4",
                            "--new-tokens", "2", "--measure", "--dtype", "float32")  # fmt: skip
    assert (status, report["match"]) == (1, False)


def test_a_pure_attention_model_has_no_state(capsys):
    _, report, _ = run(capsys, *QWEN_15B)
    assert (report["state_bytes"], report["state_layers"]) == (0, [])


@pytest.mark.skipif(
    Version(transformers.__version__) < Version("5.0"),
    reason="transformers 4.x cannot run a forward on the meta device",
)
def test_meta_device_checks_a_7b_cache_without_memory(capsys):
    status, report, _ = run(capsys, "kv", "mistral-7b", "--prompt-len", "64", "--new-tokens", "2",
                            "--measure", "--device", "meta")  # fmt: skip
    assert status == 0
    assert report["measured"]["per_step_bytes"] == [64 * 131_072, 65 * 131_072]
    assert report["match"] is True


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["kv", "qwen2.5-1.5"], "did you mean qwen2.5-1.5b"),
        (["kv", "gpt2", "--dtype", "fp8"], "--dtype is 'fp8'; use one of float32"),
        (["kv", "gpt2", "--new-tokens", "0"], "--new-tokens is 0; use at least 1"),
        (["kv", "gpt2", "--new-tokens", "-3"], "--new-tokens is -3"),
        (["kv", "gpt2", "--prompt-len", "0"], "--prompt-len is 0"),
        (["kv", "gpt2", "--batch", "0"], "--batch is 0"),
        (["kv", "gpt2", "--prompt-len", "1000", "--new-tokens", "26"], "1025 positions exceed"),
        (["kv", "gpt2", "--batch", "two"], "argument --batch: invalid int value"),
        (["kv", "gpt2", "--measure", "--device", "tpu"], "--device is 'tpu'"),
        (["kv"], "the following arguments are required: config"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_naming_the_field_and_exit_2(capsys, argv, field):
    status, report, err = run(capsys, *argv)
    assert status == 2
    assert report == {}
    assert err.count("\n") == 1
    assert field in err


def test_unreadable_config_and_unknown_schema_exit_2(capsys, tmp_path):
    broken = tmp_path / "config.json"
    broken.write_text("{not json", encoding="utf-8")
    status, _, err = run(capsys, "kv", str(broken))
    assert status == 2
    assert err.count("\n") == 1
    assert "cannot read the config file" in err
    status, _, err = run(capsys, "kv", str(tmp_path / "absent.json"))
    assert (status, err.count("\n")) == (2, 1)
    future = tmp_path / "future.yaml"
    future.write_text("schema: 2\nname: future\nsource: config\nconfig: {model_type: llama}\n")
    status, _, err = run(capsys, "kv", str(future))
    assert status == 2
    assert "field `schema` is 2" in err
    assert err.count("\n") == 1


def test_build_time_reports_both_builds(capsys):
    status, report, _ = run(capsys, "build-time", "tiny-llama", "--dtype", "float32")
    assert status == 0
    assert report["parameters"] == 106_816
    assert len(report["naive_from_config_s"]) == len(report["phasebench_build_s"]) == 1
    assert report["ratio"] > 0
