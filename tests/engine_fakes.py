"""Test helpers for the engine-side modules: tiny real models and recording fakes of torch's
CUDA/MPS entry points, so device dispatch is tested on a CPU-only machine.

Tiny models are built straight from `AutoConfig.for_model` (hidden 64, 2 layers, vocab 128, 64
positions): no dependency on `models.py` and no weights from the hub.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import transformers
from packaging.version import Version
from transformers import AutoConfig, AutoModelForCausalLM

TRANSFORMERS_VERSION = Version(transformers.__version__)
# 5.24 renamed the forward kwarg and output field to `cache`; 4.46 returns legacy tuples.
CACHE_KWARG_RENAMED = Version(transformers.__version__) >= Version("5.24.0")
LEGACY_TUPLES = Version(transformers.__version__) < Version("4.47.0")
VOCAB = 128
MAX_POSITIONS = 64


def tiny_model(model_type: str, **overrides: Any) -> Any:
    """A seeded random tiny decoder of `model_type` in eval mode, float32, on the CPU."""
    if model_type == "gpt2":
        kwargs: dict[str, Any] = {"n_embd": 64, "n_layer": 2, "n_head": 4}
        kwargs["n_positions"] = MAX_POSITIONS
        kwargs["bos_token_id"] = kwargs["eos_token_id"] = 0
    else:
        kwargs = {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": MAX_POSITIONS,
        }
    kwargs.update(vocab_size=VOCAB, **overrides)
    config = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    # HF generate would stop at EOS; the engine never does, so comparisons disable it.
    model.generation_config.eos_token_id = None
    return model.eval()


@dataclass
class Recorder:
    """Records calls in order, as (name, args) pairs, shared between several fakes."""

    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def fake(self, name: str, result: Any = None) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args))
            return result() if callable(result) else result

        return record

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def install_fake_cuda(monkeypatch: pytest.MonkeyPatch, recorder: Recorder) -> dict[str, int]:
    """Replace torch.cuda's sync and memory counters with recording fakes; returns the counters.

    `memory_stats` answers from the same counters under the allocator's key names, as do the
    four per-counter functions (each a separate recorded call, as each is a separate read of
    the whole statistics dictionary in torch).
    """
    counters = {"allocated": 100, "reserved": 200, "peak_allocated": 150, "peak_reserved": 250}
    stats_keys = {
        "allocated_bytes.all.current": "allocated",
        "reserved_bytes.all.current": "reserved",
        "allocated_bytes.all.peak": "peak_allocated",
        "reserved_bytes.all.peak": "peak_reserved",
    }

    def stats() -> dict[str, int]:
        return {key: counters[name] for key, name in stats_keys.items()} | {"num_ooms": 0}

    monkeypatch.setattr(torch.cuda, "memory_stats", recorder.fake("cuda.memory_stats", stats))
    monkeypatch.setattr(torch.cuda, "synchronize", recorder.fake("cuda.synchronize"))
    monkeypatch.setattr(
        torch.cuda, "reset_peak_memory_stats", recorder.fake("cuda.reset_peak_memory_stats")
    )
    for attr, key in (
        ("memory_allocated", "allocated"),
        ("memory_reserved", "reserved"),
        ("max_memory_allocated", "peak_allocated"),
        ("max_memory_reserved", "peak_reserved"),
    ):
        monkeypatch.setattr(
            torch.cuda, attr, recorder.fake(f"cuda.{attr}", lambda k=key: counters[k])
        )
    return counters


def install_fake_mps(monkeypatch: pytest.MonkeyPatch, recorder: Recorder) -> dict[str, int]:
    """Replace torch.mps's sync and memory counters with recording fakes; returns the counters."""
    counters = {"allocated": 10, "driver": 20}
    monkeypatch.setattr(torch.mps, "synchronize", recorder.fake("mps.synchronize"))
    monkeypatch.setattr(
        torch.mps,
        "current_allocated_memory",
        recorder.fake("mps.current_allocated_memory", lambda: counters["allocated"]),
    )
    monkeypatch.setattr(
        torch.mps,
        "driver_allocated_memory",
        recorder.fake("mps.driver_allocated_memory", lambda: counters["driver"]),
    )
    return counters


@contextmanager
def no_deprecation_messages() -> Iterator[None]:
    """Fail on any Python warning or transformers logger warning raised inside the block."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("transformers")
    handler = Collect(level=logging.WARNING)
    logger.addHandler(handler)
    # transformers' `warning_once` remembers messages; forget them so each block sees its own.
    logging.Logger.warning_once.cache_clear()  # type: ignore[attr-defined]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in records] == []
