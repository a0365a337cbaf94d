"""Run-mode axes through the whole suite (`pytester`, a subprocess, tiny models): static caches
asserted exactly, compile cost recorded, unavailable modes skipped at collection with reasons."""

from __future__ import annotations

import pytest

from tests.suite_run import run_suite

pytest_plugins = ["pytester"]

MATRIX = """\
schema: 1
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1, 2]
prompt_len: [12]
new_tokens: [4]
attention: [eager]
cache: [dynamic, static]
compile: [none]
measurements: [prefill, decode, generate]
include:
  # One compiled cell (inductor on CPU, ~20 s): compile_s recorded, nothing compiles in the rounds.
  - {model: tiny-llama, device: cpu, dtype: float32, batch: 1, prompt_len: 12, new_tokens: 4,
     attention: sdpa, cache: static, compile: default}
  # Unavailable here, each skipped with its reason.
  - {model: tiny-gpt2, device: cpu, dtype: float32, batch: 1, prompt_len: 12, new_tokens: 4,
     attention: flex_attention}
  - {model: tiny-llama, device: cpu, dtype: float32, batch: 1, prompt_len: 12, new_tokens: 4,
     cache: static, compile: reduce-overhead}
warmup: 1
rounds: 2
"""


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict]]:
    return run_suite(tmp_path_factory.mktemp("runmode"), MATRIX)


def test_unavailable_modes_are_skipped_at_collection_with_the_reason(history):
    stdout, _ = history
    assert "GPT2LMHeadModel does not support attn_implementation='flex_attention'" in stdout
    assert "compile reduce-overhead uses CUDA graphs: it needs CUDA, not cpu" in stdout


def test_run_mode_axes_are_params_and_ids(history):
    _, benchmarks = history
    ids = {b["extra_info"]["cell_id"] for b in benchmarks}
    assert "tiny-llama-cpu-float32-b2-p12-n4-attn_eager-cache_static-compile_none" in ids
    for bench in benchmarks:
        params = bench["params"]
        assert {"attention", "cache", "compile"} <= set(params)
        assert params["attention"] in bench["extra_info"]["cell_id"]


def test_static_cells_record_equal_allocated_and_used_bytes(history):
    _, benchmarks = history
    static = [b for b in benchmarks if b["params"]["cache"] == "static"]
    assert {b["group"] for b in static} == {"prefill", "decode", "generate"}
    for bench in static:
        info = bench["extra_info"]
        for what in ("allocated", "used"):
            assert (
                info[f"kv_static_analytic_{what}_bytes"] == info[f"kv_static_measured_{what}_bytes"]
            )
        # The whole cache is allocated up front: P + N - 1 = 15 positions at 512 B x batch.
        assert info["kv_static_analytic_allocated_bytes"] == 15 * 512 * bench["params"]["batch"]
        # What the generic KV reader measures of a static cache is its allocation.
        final = info.get("kv_measured_final_bytes", info.get("kv_measured_after_prefill_bytes"))
        assert final == info["kv_static_measured_allocated_bytes"]


def test_the_compiled_cell_records_compile_cost_and_no_compilation_in_its_rounds(history):
    _, benchmarks = history
    compiled = [b for b in benchmarks if b["params"]["compile"] == "default"]
    assert {b["group"] for b in compiled} == {"prefill", "decode", "generate"}
    for bench in compiled:
        info = bench["extra_info"]
        assert info["compile_s"] > 0
        assert info["compile_first_calls_frames"] >= 2
        assert (info["compile_timed_frames"], info["compile_timed_graph_breaks"]) == (0, 0)
    eager = [b for b in benchmarks if b["params"]["compile"] == "none"]
    assert eager
    assert not any("compile_s" in b["extra_info"] for b in eager)


def test_compiled_and_eager_cells_all_run_with_flush_to_zero_off(history):
    """The FP state is pinned around every cell (FTZ/DAZ off, as in a user's process): a
    compiled cell's code cannot leave it on for the cells that follow it."""
    _, benchmarks = history
    assert {b["params"]["compile"] for b in benchmarks} == {"none", "default"}
    for bench in benchmarks:
        info = bench["extra_info"]
        assert (info["flush_denormal"], info["fp_flush_to_zero"]) == (False, False), bench["name"]
