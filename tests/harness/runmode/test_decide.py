"""Run modes at collection (DESIGN §9): every unavailable kernel, cache or compile mode is
skipped with its reason; available ones are not."""

from __future__ import annotations

import importlib.util

import pytest
import transformers
from packaging.version import Version

from benchmarks.harness.cache.static import STATIC_SLIDING_SINCE
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.runmode import decide as runmode
from benchmarks.harness.runmode.decide import (
    attention_reason,
    compile_reason,
    measurement_skip_reason,
    skip_reason,
)

LEGACY = Version(transformers.__version__) < STATIC_SLIDING_SINCE


def cell(model="tiny-llama", device="cpu", dtype="float32", **run_mode):
    return Cell(model, device, dtype, 1, 16, 4, warmup=0, rounds=1, seed=0, **run_mode)


def test_a_cell_without_run_mode_axes_has_no_run_mode_reason():
    assert skip_reason(cell()) is None


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_sdpa_and_eager_run_on_cpu_for_llama(attention):
    assert skip_reason(cell(attention=attention, cache="dynamic", compile="none")) is None


def test_flash_attention_needs_the_package_then_cuda_then_half_precision(monkeypatch):
    real = importlib.util.find_spec
    if real("flash_attn") is None:
        assert "flash-attn is not installed" in str(
            attention_reason("flash_attention_2", "cuda", "float16", object)
        )
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: object() if name == "flash_attn" else real(name)
    )
    llama = transformers.LlamaForCausalLM
    assert "runs on CUDA only, not on cpu" in str(
        attention_reason("flash_attention_2", "cpu", "float16", llama)
    )
    assert "float16/bfloat16 only, not float32" in str(
        attention_reason("flash_attention_2", "cuda", "float32", llama)
    )
    assert attention_reason("flash_attention_2", "cuda", "bfloat16", llama) is None


def test_a_model_type_without_the_kernel_is_skipped_with_its_class_flag():
    # GPT-2 has no flex-attention support in either transformers version.
    reason = skip_reason(cell(model="tiny-gpt2", attention="flex_attention"))
    assert "GPT2LMHeadModel does not support attn_implementation='flex_attention'" in str(reason)


def test_sdpa_support_follows_the_model_class_flag():
    gemma2 = transformers.Gemma2ForCausalLM
    reason = skip_reason(cell(model="tiny-gemma2", attention="sdpa"))
    assert (reason is None) == bool(getattr(gemma2, "_supports_sdpa", False))


def test_static_cache_reasons_follow_the_transformers_version():
    gpt2 = skip_reason(cell(model="tiny-gpt2", cache="static"))
    sliding = skip_reason(cell(model="tiny-mistral-sw", cache="static"))
    if LEGACY:
        assert "does not support a static cache" in str(gpt2)
        assert "sliding-window layers" in str(sliding)
    else:
        assert (gpt2, sliding) == (None, None)
    assert skip_reason(cell(cache="static")) is None


def a_cuda_build_host(monkeypatch, tmp_path, *, triton=True, compilers=("gcc", "g++"),
                      headers=True):  # fmt: skip
    """What inductor's CUDA path consults, as on a GPU box with these pieces installed."""
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(runmode, "_triton_installed", lambda: triton)
    monkeypatch.setattr(
        runmode.shutil, "which", lambda name: f"/usr/bin/{name}" if name in compilers else None
    )
    header = tmp_path / ("include" if headers else "no-headers") / "Python.h"
    if headers:
        header.parent.mkdir(exist_ok=True)
        header.write_text("")
    monkeypatch.setattr(runmode, "python_headers", lambda: header)


def test_reduce_overhead_needs_cuda_and_a_static_cache(monkeypatch, tmp_path):
    a_cuda_build_host(monkeypatch, tmp_path)
    assert "needs CUDA, not cpu" in str(compile_reason("reduce-overhead", "cpu", "static"))
    assert "need a static cache" in str(compile_reason("reduce-overhead", "cuda", "dynamic"))
    assert compile_reason("reduce-overhead", "cuda", "static") is None
    assert "MPS has neither" in str(compile_reason("max-autotune", "mps", "static"))
    assert compile_reason("none", "cpu", None) is None


def test_max_autotune_captures_cuda_graphs_on_cuda_only_so_needs_a_static_cache_there(
    monkeypatch, tmp_path
):
    """max-autotune turns inductor's CUDA graphs on as reduce-overhead does (it was treated as
    graph-free): on CUDA it needs a static cache; on a CPU there is nothing to capture."""
    a_cuda_build_host(monkeypatch, tmp_path)
    assert "captures CUDA graphs" in str(compile_reason("max-autotune", "cuda", "dynamic"))
    assert "captures CUDA graphs" in str(compile_reason("max-autotune", "cuda", None))
    assert compile_reason("max-autotune", "cuda", "static") is None
    assert compile_reason("max-autotune", "cpu", "dynamic") is None
    assert compile_reason("default", "cuda", "dynamic") is None


def test_compile_on_cpu_needs_the_cxx_compiler_inductor_calls(monkeypatch, tmp_path):
    a_cuda_build_host(monkeypatch, tmp_path, compilers=("clang++",))  # Linux: inductor calls g++
    reason = str(compile_reason("default", "cpu", None))
    assert "needs the C++ compiler inductor calls (g++ not on PATH)" in reason
    assert compile_reason("none", "cpu", None) is None
    a_cuda_build_host(monkeypatch, tmp_path, compilers=("g++",))
    assert compile_reason("default", "cpu", None) is None


@pytest.mark.parametrize(
    ("missing", "named"),
    [
        ({"triton": False}, "needs Triton for inductor's kernels: pip install triton"),
        ({"compilers": ("g++",)}, "needs a C compiler for Triton's launcher (CC, else gcc or"),
        ({"headers": False}, "needs Python's headers for Triton's launcher"),
    ],
)
def test_compile_on_cuda_needs_triton_a_c_compiler_and_pythons_headers(
    monkeypatch, tmp_path, missing, named
):
    """inductor writes Triton kernels on CUDA, and Triton builds a C launcher against Python.h:
    without one of them every compiled CUDA cell would fail at its first call, not skip."""
    a_cuda_build_host(monkeypatch, tmp_path)
    assert compile_reason("default", "cuda", "static") is None
    a_cuda_build_host(monkeypatch, tmp_path, **missing)
    assert named in str(compile_reason("default", "cuda", "static"))
    assert named in str(skip_reason(cell(device="cuda", dtype="bfloat16", compile="default")))


def test_triton_takes_cc_before_gcc_and_clang(monkeypatch, tmp_path):
    a_cuda_build_host(monkeypatch, tmp_path, compilers=("clang", "my-cc"))
    assert compile_reason("default", "cuda", "static") is None  # clang when there is no gcc
    monkeypatch.setenv("CC", "missing-cc")
    assert "C compiler" in str(compile_reason("default", "cuda", "static"))
    monkeypatch.setenv("CC", "my-cc")
    assert compile_reason("default", "cuda", "static") is None


def test_run_mode_cells_skip_the_hf_generate_overhead_comparison():
    assert measurement_skip_reason(cell(cache="static"), "overhead") is not None
    assert measurement_skip_reason(cell(compile="default"), "overhead") is not None
    assert measurement_skip_reason(cell(compile="none", cache="dynamic"), "overhead") is None
    assert measurement_skip_reason(cell(cache="static"), "decode") is None


def test_max_cache_len_beyond_the_model_positions_is_a_skip_reason():
    from benchmarks.harness.plan import skip_reason as plan_reason  # noqa: PLC0415

    # tiny-llama has 1024 positions.
    too_long = Cell("tiny-llama", "cpu", "float32", 1, 16, 4, 0, 1, 0, cache="static",
                    max_cache_len=2048)  # fmt: skip
    assert "max_cache_len = 2048 positions exceed tiny-llama's 1024" in str(plan_reason(too_long))


def test_configure_engine_gives_static_cells_a_static_cache_and_others_the_models_own():
    import torch  # noqa: PLC0415

    from benchmarks.harness.cache.static import analytic_static_kv, is_static_cache  # noqa: PLC0415
    from benchmarks.harness.engine import Engine, make_prompt  # noqa: PLC0415
    from benchmarks.harness.model.models import load_model_spec  # noqa: PLC0415
    from benchmarks.harness.runmode.decide import build_cell_model, configure_engine  # noqa: PLC0415

    static = cell(attention="eager", cache="static")
    model = build_cell_model(
        load_model_spec("tiny-llama"), static, torch.device("cpu"), torch.float32
    )
    assert model.config._attn_implementation == "eager"
    engine = Engine(model, torch.device("cpu"))
    configure_engine(engine, static)
    result = engine.generate(make_prompt(1, 16, 256, seed=0), static.new_tokens)
    assert is_static_cache(result.cache)
    allocated = analytic_static_kv(
        model.config, dtype=torch.float32, batch=1, max_cache_len=19, seq_len=19
    ).allocated_bytes
    # Allocated up front: the same bytes after the prefill and after every step.
    assert (result.kv_bytes_after_prefill, *result.kv_bytes_per_step) == (allocated,) * 4
    configure_engine(engine, cell(cache="dynamic"))
    assert engine.start_cache is None
    assert not is_static_cache(engine.generate(make_prompt(1, 16, 256, seed=0), 2).cache)


def test_flash_attention_on_a_static_cache_is_skipped_with_the_reason(monkeypatch):
    """Issue 30 row 6: 4.46 raises, later versions attend over unwritten slots (no mask)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: object() if name == "flash_attn" else real(name)
    )
    fa2 = {"attention": "flash_attention_2", "device": "cuda", "dtype": "float16"}
    reason = skip_reason(cell(cache="static", **fa2))
    assert "attends over every preallocated slot" in str(reason)
    assert skip_reason(cell(cache="dynamic", **fa2)) is None
    assert skip_reason(cell(attention="sdpa", cache="static")) is None


def test_compile_on_mps_is_skipped_unless_the_user_opts_in(monkeypatch):
    """Issue 30 row 10: inductor's Metal backend is a prototype phasebench has not verified."""
    monkeypatch.delenv(runmode.MPS_COMPILE_ENV, raising=False)
    reason = compile_reason("default", "mps", None)
    assert "prototype" in str(reason)
    assert f"{runmode.MPS_COMPILE_ENV}=1 runs it anyway" in str(reason)
    assert compile_reason("none", "mps", None) is None
    monkeypatch.setenv(runmode.MPS_COMPILE_ENV, "1")
    assert compile_reason("default", "mps", None) is None
    assert "MPS has neither" in str(compile_reason("max-autotune", "mps", "static"))
