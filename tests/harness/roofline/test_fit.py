"""Spec of benchmarks/harness/roofline/fit.py: the memory need of a cell, before building.

The activation formula is checked against reality: a real prefill of tiny models on this CPU,
whose peak of bytes in use (glibc's `mallinfo2`, read after every aten op) must stay under the
estimate of KV + activations, and not by much (an estimate that skips what would fit is a bug
too): 1.5x on a real architecture, 2.5x on the tiny ones, where the P^2 mask weighs as much as
a layer.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pytest
import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.harness.device.freemem import FreeMemory
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import MODELS_DIR, build_model, load_model_spec
from benchmarks.harness.plan import fit_estimate
from benchmarks.harness.roofline.fit import (
    ACTIVATION_MARGIN,
    FitEstimate,
    Prefill,
    activation_bytes,
    dense_scores,
    fit_reason,
    gb,
    model_facts,
)

_MALLINFO2_FIELDS = (
    "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
    "keepcost",
)  # fmt: skip


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]


def _libc_in_use() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    if not hasattr(libc, "mallinfo2"):  # glibc >= 2.33
        return None
    libc.mallinfo2.restype = _MallInfo2
    return libc


LIBC = _libc_in_use()


class PeakInUse(TorchDispatchMode):
    """The most bytes malloc had handed out after any aten op inside the block."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        super().__init__()
        self._libc = libc
        self.peak_bytes = 0

    def in_use_bytes(self) -> int:
        info = self._libc.mallinfo2()
        return int(info.uordblks + info.hblkhd)  # small blocks + mmapped large ones

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak_bytes = max(self.peak_bytes, self.in_use_bytes())
        return out


def cell(model: str, *, batch: int, prompt_len: int, dtype: str = "float32", **axes) -> Cell:
    return Cell(model, "cpu", dtype, batch, prompt_len, 1, warmup=0, rounds=1, seed=0, **axes)


@pytest.mark.skipif(LIBC is None, reason="needs glibc's mallinfo2 (Linux, glibc >= 2.33)")
@pytest.mark.parametrize(
    "case",
    [
        # Tiny models: the P^2 mask, counted always, weighs as much as a layer (up to ~2.1x).
        ("tiny-llama", None, 2, 256, "float32", 2.5),  # SDPA: no score matrix
        ("tiny-llama", "eager", 2, 256, "float32", 2.5),  # B x H x P^2 scores and softmax
        ("tiny-gpt2", None, 2, 200, "float32", 2.5),  # plain MLP with a tanh GELU
        ("tiny-mistral-sw", None, 2, 300, "float32", 2.5),  # sliding window shorter than P
        ("tiny-phi3", None, 2, 300, "float32", 2.5),  # fused gate_up
        ("tiny-qwen2", None, 4, 512, "bfloat16", 2.5),
        # A real architecture: the layers' matrices dominate, as on every matrix's models.
        ("smollm2-135m", None, 2, 512, "float32", 1.5),
    ],
)
def test_the_estimate_bounds_a_real_prefill_and_not_by_much(case):
    model, attention, batch, prompt_len, dtype, most = case
    assert LIBC is not None
    the_cell = cell(model, batch=batch, prompt_len=prompt_len, dtype=dtype, attention=attention)
    estimate = fit_estimate(the_cell, MODELS_DIR)
    assert estimate.cache_bytes is not None
    assert estimate.activation_bytes is not None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # no worker thread allocating scratch beside the ops
    try:
        built = build_model(
            load_model_spec(model), torch.device("cpu"), getattr(torch, dtype), 0, attention
        )
        engine = Engine(built, torch.device("cpu"))
        ids = make_prompt(batch, prompt_len, built.config.get_text_config().vocab_size, 0)
        engine.prefill(ids)  # first-call allocations (kernels, RoPE tables) out of the way
        meter = PeakInUse(LIBC)
        before = meter.in_use_bytes()
        with meter:
            result = engine.prefill(ids)
        del result
    finally:
        torch.set_num_threads(threads)
    measured = meter.peak_bytes - before  # the cache and the transients; weights were there
    estimated = estimate.cache_bytes + estimate.activation_bytes
    assert measured <= estimated <= most * measured, (measured, estimated)


def test_weights_are_every_parameter_once_as_a_built_model_holds_them():
    for name in ("tiny-llama", "tiny-gpt2"):  # tiny-gpt2 ties its LM head to the embedding
        spec = load_model_spec(name)
        built = build_model(spec, torch.device("cpu"), torch.bfloat16)
        held = sum(p.numel() * p.element_size() for p in built.parameters())
        assert model_facts(spec, torch.bfloat16).weights_bytes == held


def test_a_checkpoint_is_sized_from_its_config_without_loading_weights(tmp_path):
    # A directory with a config.json and no weights: loading it would fail, sizing must not.
    spec = load_model_spec("tiny-llama")
    spec.hf_config().save_pretrained(tmp_path / "ckpt")
    model_file = tmp_path / "tiny-ckpt.yaml"
    model_file.write_text(
        yaml.safe_dump(
            {
                "schema": 1,
                "name": "tiny-ckpt",
                "source": "checkpoint",
                "checkpoint": str(tmp_path / "ckpt"),
            }
        ),
        encoding="utf-8",
    )
    from_checkpoint = model_facts(load_model_spec(str(model_file)), torch.float16)
    assert from_checkpoint.weights_bytes == model_facts(spec, torch.float16).weights_bytes


def test_scores_count_for_eager_everywhere_and_for_sdpa_only_on_mps():
    assert dense_scores("eager", "cpu")
    assert dense_scores("eager", "cuda")
    assert dense_scores("sdpa", "mps")
    assert not dense_scores("sdpa", "cuda")
    assert not dense_scores("sdpa", "cpu")
    assert not dense_scores("flash_attention_2", "cuda")
    assert not dense_scores("flex_attention", "cpu")


def test_activations_follow_the_documented_formula():
    config = load_model_spec("tiny-llama").hf_config()
    prefill = Prefill(
        batch=2,
        prompt_len=64,
        dtype=torch.float16,
        attention="eager",
        device_type="cpu",
        limits_logits=True,
        cache_layer_bytes=1000,
    )
    h, heads, kv_heads = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
    d, inter, vocab = h // heads, config.intermediate_size, config.vocab_size
    tokens, e = 2 * 64, 2
    hidden = tokens * h * (3 * e + 4)
    mask = 2 * 64 * 64 * e
    attention = tokens * (4 * heads + 2 * kv_heads) * d * e + mask + 2 * heads * 64 * 64 * (e + 4)
    mlp = tokens * inter * 3 * e  # a gated MLP with separate gate and up (Llama)
    logits = 2 * 1 * vocab * 4
    expected = ACTIVATION_MARGIN * (hidden + max(attention, mlp) + logits + 1000)
    assert activation_bytes(config, prefill) == pytest.approx(expected, abs=1)


ESTIMATE = FitEstimate(
    weights_bytes=16_060_522_496,
    cache_bytes=4_562_354_176,
    cache_positions=4351,
    batch=8,
    activation_bytes=5_390_000_000,
)


def test_a_need_beyond_the_free_memory_is_a_reason_with_every_figure_and_the_way_out():
    free = FreeMemory("cuda:0", 23_500_000_000, "mem_get_info")
    reason = fit_reason(ESTIMATE, free, "PHASEBENCH_IGNORE_FIT=1")
    assert reason is not None
    assert reason.startswith(
        "needs 26.0 GB (weights 16.1 GB + KV 4.6 GB at 4351 tokens x b8 + activations 5.4 GB)"
        " > 23.5 GB free on cuda:0 (mem_get_info)"
    )
    assert "activations = 1.25 x" in reason
    assert reason.endswith("PHASEBENCH_IGNORE_FIT=1 runs it anyway")


def test_a_need_within_the_free_memory_or_an_unknown_free_memory_skips_nothing():
    assert fit_reason(ESTIMATE, FreeMemory("cuda:0", 80_000_000_000, "x"), "o") is None
    assert fit_reason(ESTIMATE, FreeMemory("cuda:0", ESTIMATE.need_bytes, "x"), "o") is None
    assert fit_reason(ESTIMATE, FreeMemory("mps", None, "old torch"), "o") is None


def test_a_part_that_cannot_be_estimated_makes_the_need_a_named_lower_bound():
    partial = FitEstimate(2_000_000_000, None, 100, 1, None, ("KV not estimated: no rule",))
    assert partial.need_bytes == 2_000_000_000
    reason = fit_reason(partial, FreeMemory("cpu", 1_000_000_000, "available RAM"), "o")
    assert reason is not None
    assert reason.startswith("needs at least 2.0 GB (weights 2.0 GB); KV not estimated: no rule")


def test_figures_under_a_gigabyte_are_megabytes():
    assert gb(50_200_000) == "50.2 MB"
    assert gb(16_060_522_496) == "16.1 GB"
