"""Slow (emulated) dtypes: the probe, the skip reason, and the suite's skip at collection.

The end-to-end tests emulate an AVX2-only CPU on any x86-64 machine: `ATEN_CPU_CAPABILITY=avx2`
caps torch's own kernels and `ONEDNN_MAX_CPU_ISA=AVX2` oneDNN's, so bfloat16 loses its native
kernels (AVX-512 BF16, AMX) exactly as on GitHub's hosted EPYC 7763 runners.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.harness.roofline import dtypespeed
from benchmarks.harness.roofline.dtypespeed import SLOW_RATIO, DtypeSpeeds, slow_dtype_reason

ROOT = Path(__file__).resolve().parents[2]
EMULATE_AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
x86_only = pytest.mark.skipif(
    platform.machine().lower() not in {"x86_64", "amd64"},
    reason="AVX2 emulation needs an x86-64 CPU",
)

pytest_plugins = ["pytester"]


def speeds(**ratios):
    probed = []

    def probe(dtype):
        probed.append(dtype)
        return ratios[str(dtype).removeprefix("torch.")]

    return DtypeSpeeds(probe), probed


def test_an_emulated_dtype_gets_a_skip_reason_with_its_ratio_and_the_way_out():
    found, _ = speeds(bfloat16=0.19)
    reason = slow_dtype_reason("cpu", "bfloat16", found)
    assert reason is not None
    assert "0.19x the float32 rate" in reason
    assert "--allow-slow-dtypes" in reason
    assert found.slow() == {"bfloat16": 0.19}


def test_a_native_dtype_has_no_reason_and_is_not_recorded_slow():
    found, _ = speeds(bfloat16=4.1, float16=0.27)
    assert slow_dtype_reason("cpu", "bfloat16", found) is None
    assert slow_dtype_reason("cpu", "float16", found) is not None
    assert found.slow() == {"float16": 0.27}


def test_float32_and_accelerators_are_never_probed():
    found, probed = speeds()
    assert slow_dtype_reason("cpu", "float32", found) is None
    assert slow_dtype_reason("cuda", "bfloat16", found) is None
    assert slow_dtype_reason("cuda:1", "float16", found) is None
    assert slow_dtype_reason("mps", "bfloat16", found) is None
    assert probed == []
    assert found.slow() == {}


def test_each_dtype_is_probed_once_per_process():
    found, probed = speeds(bfloat16=0.2)
    for _ in range(3):
        slow_dtype_reason("cpu", "bfloat16", found)
    assert probed == [torch.bfloat16]


def test_the_threshold_is_half_the_float32_rate():
    found, _ = speeds(bfloat16=SLOW_RATIO, float16=SLOW_RATIO - 0.01)
    assert slow_dtype_reason("cpu", "bfloat16", found) is None
    assert slow_dtype_reason("cpu", "float16", found) is not None


def test_the_probe_is_symmetric_bounded_and_restores_the_thread_count():
    threads = torch.get_num_threads()
    ratio = dtypespeed.probe_ratio(torch.float32)
    assert 0.6 < ratio < 1.6  # the same op against itself
    assert torch.get_num_threads() == threads


def probe_in_subprocess(dtype, env):
    code = (
        "import torch; from benchmarks.harness.roofline.dtypespeed import probe_ratio; "
        f"print(probe_ratio(torch.{dtype}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


@x86_only
def test_bfloat16_without_its_native_kernels_is_detected_as_slow():
    assert probe_in_subprocess("bfloat16", EMULATE_AVX2) < SLOW_RATIO


# --- the suite: skipped at collection unless --allow-slow-dtypes -----------------------------


def run_suite(pytester, monkeypatch, *args, env, axes=""):
    matrix = pytester.path / "m.yaml"
    matrix.write_text(
        "schema: 1\nmodels: [tiny-llama]\ndevices: [cpu]\ndtypes: [float32, bfloat16]\n"
        "batch: [1]\nprompt_len: [8]\nnew_tokens: [2]\nmeasurements: [prefill]\n"
        f"warmup: 0\nrounds: 1\nseed: 0\n{axes}",
        encoding="utf-8",
    )
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return pytester.runpytest_subprocess(
        str(ROOT / "benchmarks" / "test_prefill.py"),
        "-c",
        str(ROOT / "pyproject.toml"),
        "-p",
        "no:cacheprovider",
        "-rs",
        "--peaks",
        "none",
        "--matrix",
        str(matrix),
        "--benchmark-storage",
        str(pytester.path / "history"),
        *args,
        timeout=300,
    )


def saved_machine_info(pytester):
    files = sorted((pytester.path / "history").rglob("*.json"))
    assert files, "no history saved"
    return json.loads(files[-1].read_text(encoding="utf-8"))["machine_info"]["phasebench"]


@x86_only
def test_emulated_bfloat16_cells_are_skipped_with_the_reason_and_recorded(pytester, monkeypatch):
    result = run_suite(pytester, monkeypatch, env=EMULATE_AVX2)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*bfloat16*x the float32 rate*--allow-slow-dtypes*"])
    info = saved_machine_info(pytester)
    assert set(info["slow_dtypes"]) == {"bfloat16"}
    assert info["slow_dtypes"]["bfloat16"] < SLOW_RATIO
    assert info["fingerprint"]["accelerator"] == "none"
    assert set(info["devices"]) == {"cpu"}


@x86_only
def test_allow_slow_dtypes_runs_them_anyway(pytester, monkeypatch):
    result = run_suite(pytester, monkeypatch, "--allow-slow-dtypes", env=EMULATE_AVX2)
    result.assert_outcomes(passed=2)
    # Not probed when allowed: the record says nothing it did not measure.
    assert saved_machine_info(pytester)["slow_dtypes"] == {}


def test_a_quantization_comparison_is_exempt_dense_cell_included():
    from benchmarks.harness.matrix.cells import Cell  # noqa: PLC0415
    from benchmarks.suite.engines import slow_dtype_exempt  # noqa: PLC0415

    def cell(**axes):
        return Cell("tiny-llama", "cpu", "bfloat16", 1, 8, 2, 0, 1, 0, **axes)

    assert slow_dtype_exempt(cell(quant="int4wo-g32"))
    assert slow_dtype_exempt(cell(quant="none"))  # the dense cell the ratios are to
    assert slow_dtype_exempt(cell(kv_quant="hqq4"))
    assert not slow_dtype_exempt(cell())


@x86_only
def test_emulated_bfloat16_quant_cells_still_run(pytester, monkeypatch):
    pytest.importorskip("torchao")
    result = run_suite(pytester, monkeypatch, env=EMULATE_AVX2, axes="quant: [none, int8wo]\n")
    result.assert_outcomes(passed=4)  # float32 and bfloat16, dense and int8wo
