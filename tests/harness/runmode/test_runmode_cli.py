"""`python -m benchmarks.harness kv CONFIG --cache static [--max-cache-len L]` (DESIGN §9)."""

from __future__ import annotations

import json

import transformers
from packaging.version import Version

from benchmarks.harness.cache.static import STATIC_SLIDING_SINCE
from benchmarks.harness.cli import main

LEGACY = Version(transformers.__version__) < STATIC_SLIDING_SINCE


def run(capsys, *args):
    status = main(["kv", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_static_analytic_report_has_allocated_and_used_bytes_per_step(capsys):
    status, out, _ = run(capsys, "tiny-llama", "--cache", "static", "--dtype", "float32",
                         "--prompt-len", "10", "--new-tokens", "3")  # fmt: skip
    report = json.loads(out)
    assert status == 0
    # tiny-llama: 2 layers x (K + V) x 2 KV heads x head_dim 16 x 4 bytes = 512 B per position.
    assert (report["cache"], report["max_cache_len"]) == ("static", 12)
    assert report["allocated_bytes"] == 12 * 512
    assert report["per_step_used_bytes"] == [10 * 512, 11 * 512, 12 * 512]


def test_static_measure_matches_with_an_explicit_length(capsys):
    status, out, _ = run(capsys, "tiny-llama", "--cache", "static", "--max-cache-len", "32",
                         "--prompt-len", "10", "--new-tokens", "3", "--measure")  # fmt: skip
    report = json.loads(out)
    assert status == 0
    assert report["match"] is True
    assert report["measured"]["per_step_allocated_bytes"] == [report["allocated_bytes"]] * 3
    assert report["measured"]["per_step_used_bytes"] == report["per_step_used_bytes"]


def test_static_sliding_layers_on_recent_transformers_or_a_clear_refusal(capsys):
    status, out, err = run(capsys, "tiny-gemma2", "--cache", "static", "--prompt-len", "20",
                           "--new-tokens", "3", "--measure", "--dtype", "float32")  # fmt: skip
    if LEGACY:
        assert status == 2
        assert "sliding-window layers" in err
    else:
        assert status == 0
        assert json.loads(out)["match"] is True


def test_bad_static_arguments_exit_2_with_the_fix(capsys):
    status, _, err = run(capsys, "tiny-llama", "--max-cache-len", "64")
    assert (status, err.strip()) == (2, "--max-cache-len sizes a static cache; add --cache static.")
    status, _, err = run(capsys, "tiny-llama", "--cache", "static", "--max-cache-len", "8",
                         "--prompt-len", "10", "--new-tokens", "3")  # fmt: skip
    assert status == 2
    assert "--max-cache-len 8 is below the 12 positions" in err
    status, _, err = run(capsys, "tiny-llama", "--cache", "static", "--measure", "--device", "meta")
    assert status == 2
    assert "use a real --device" in err
