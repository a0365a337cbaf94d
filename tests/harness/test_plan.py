"""What this machine runs of a matrix (skip reasons, the memory fit among them) and in which
order (one build per model). CUDA is a fake of torch's entry points (test names say `fake`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from benchmarks.harness import plan
from benchmarks.harness.cache.kv import kv_bytes_per_token
from benchmarks.harness.device import freemem
from benchmarks.harness.device.freemem import FreeMemory
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import MODELS_DIR, build_model, load_model_spec
from benchmarks.harness.plan import build_order, fit_estimate, memory_fit_reason, skip_reason


def cell(model="tiny-llama", device="cpu", dtype="float32", *, prompt_len=16, new_tokens=4):
    return Cell(model, device, dtype, 1, prompt_len, new_tokens, warmup=0, rounds=1, seed=0)


def test_a_cell_this_machine_can_run_has_no_skip_reason():
    assert skip_reason(cell()) is None


def test_positions_beyond_the_model_are_a_skip_reason_at_exactly_p_plus_n_minus_1():
    # tiny-llama has 1024 positions: the final cache holds P + N - 1.
    assert skip_reason(cell(prompt_len=1020, new_tokens=5)) is None
    reason = skip_reason(cell(prompt_len=1020, new_tokens=6))
    assert reason == (
        "P + N - 1 = 1025 positions exceed tiny-llama's 1024 (max_position_embeddings)"
    )


@pytest.mark.parametrize("gpus", [0, 8])
def test_an_absent_device_is_a_skip_reason(monkeypatch, gpus):
    """cuda:64 is absent on a CPU box and on an 8-GPU node alike (cuda:7 is not, issue 42)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert "cuda:64 unavailable" in str(skip_reason(cell(device="cuda:64")))


def test_build_order_groups_each_model_device_dtype_in_first_appearance_order():
    cells = [
        cell(dtype="float32", prompt_len=8),
        cell(dtype="bfloat16", prompt_len=8),
        cell(dtype="float32", prompt_len=16),
        cell(model="tiny-qwen2", prompt_len=8),
        cell(dtype="bfloat16", prompt_len=16),
    ]
    rank = build_order(cells)
    ordered = sorted(cells, key=lambda c: rank[c.id])
    assert [c.build_key for c in ordered] == [
        ("tiny-llama", "cpu", "float32"),
        ("tiny-llama", "cpu", "float32"),
        ("tiny-llama", "cpu", "bfloat16"),
        ("tiny-llama", "cpu", "bfloat16"),
        ("tiny-qwen2", "cpu", "float32"),
    ]
    assert [c.prompt_len for c in ordered[:2]] == [8, 16]


# --- memory fit, decided at collection (issue 18) -----------------------------------------------


def big_cell(batch, prompt_len, device="cuda", dtype="bfloat16", model="llama-3.1-8b", **axes):
    return Cell(model, device, dtype, batch, prompt_len, 256, warmup=0, rounds=1, seed=0, **axes)


@pytest.fixture
def fake_gpu(monkeypatch):
    """A present CUDA device that runs bfloat16, whose free memory the test sets (bytes)."""
    free = {"bytes": 0}
    monkeypatch.setattr(plan, "device_unavailable_reason", lambda device: None)
    monkeypatch.setattr(plan, "dtype_unsupported_reason", lambda device, dtype: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: (free["bytes"], 25 * 10**9))
    monkeypatch.delenv(plan.IGNORE_FIT_ENV, raising=False)
    return free


def test_an_8b_cell_that_cannot_fit_a_24_gb_card_is_skipped_with_its_figures_fake(fake_gpu):
    fake_gpu["bytes"] = 23_500_000_000
    reason = skip_reason(big_cell(batch=8, prompt_len=4096))
    assert reason is not None
    # Every figure is the analytic one: the parameters of the architecture and its KV rule.
    spec = load_model_spec("llama-3.1-8b")
    meta = build_model(spec, torch.device("meta"), torch.bfloat16)
    weights = sum(p.numel() * p.element_size() for p in meta.parameters())
    kv = kv_bytes_per_token(spec.hf_config(), dtype=torch.bfloat16, batch=8) * (4096 + 256 - 1)
    assert f"weights {weights / 1e9:.1f} GB" in reason
    assert f"KV {kv / 1e9:.1f} GB at 4351 tokens x b8" in reason
    assert "> 23.5 GB free on cuda:0 (mem_get_info)" in reason
    assert "PHASEBENCH_IGNORE_FIT=1 runs it anyway" in reason
    needs = float(reason.split("needs ")[1].split(" GB")[0])
    assert needs * 1e9 > weights + kv  # the activations come on top


def test_the_same_model_runs_where_its_cell_fits_fake(fake_gpu):
    fake_gpu["bytes"] = 23_500_000_000
    assert skip_reason(big_cell(batch=1, prompt_len=128)) is None
    fake_gpu["bytes"] = 80 * 10**9
    assert skip_reason(big_cell(batch=8, prompt_len=4096)) is None


def test_a_card_smaller_than_the_weights_skips_every_cell_of_the_model_fake(fake_gpu):
    # <= 16 GB cards used to fail the 8B build and end the session failed.
    fake_gpu["bytes"] = 15_200_000_000
    assert "needs 16.1 GB" in str(skip_reason(big_cell(batch=1, prompt_len=128)))


def test_the_override_runs_a_cell_that_does_not_fit_fake(fake_gpu, monkeypatch):
    fake_gpu["bytes"] = 10**9
    monkeypatch.setenv(plan.IGNORE_FIT_ENV, "1")
    assert skip_reason(big_cell(batch=8, prompt_len=4096)) is None
    monkeypatch.setenv(plan.IGNORE_FIT_ENV, "0")
    assert skip_reason(big_cell(batch=8, prompt_len=4096)) is not None


def test_an_unknown_free_memory_skips_nothing():
    def unknown(device):
        return FreeMemory(device, None, "torch too old")

    assert memory_fit_reason(big_cell(8, 4096, device="cpu"), free=unknown) is None


def test_cpu_cells_are_checked_against_available_ram(monkeypatch):
    monkeypatch.delenv(plan.IGNORE_FIT_ENV, raising=False)
    monkeypatch.setattr(
        freemem.psutil, "virtual_memory", lambda: SimpleNamespace(available=4 * 10**9)
    )
    reason = skip_reason(big_cell(batch=1, prompt_len=128, device="cpu", dtype="float32"))
    assert "> 4.0 GB free on cpu (available RAM)" in str(reason)
    assert skip_reason(cell()) is None  # tiny-llama fits in 4 GB


def test_a_static_cache_counts_what_it_allocates(fake_gpu):
    dynamic = fit_estimate(big_cell(1, 128), MODELS_DIR)
    static = fit_estimate(big_cell(1, 128, cache="static", max_cache_len=8192), MODELS_DIR)
    assert static.cache_positions == 8192
    assert static.cache_bytes == dynamic.cache_bytes * 8192 // (128 + 256 - 1)


def test_a_model_that_cannot_be_built_even_on_meta_is_left_to_its_own_build(monkeypatch):
    def broken(model, models_dir, dtype):
        raise RuntimeError("an architecture transformers cannot instantiate")

    monkeypatch.delenv(plan.IGNORE_FIT_ENV, raising=False)
    monkeypatch.setattr(plan, "_model_facts", broken)
    assert memory_fit_reason(cell()) is None
