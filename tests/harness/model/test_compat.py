"""Spec of benchmarks/harness/model/compat.py: one spelling of the cache calls for transformers
4.46-5.x.

Runs against whichever transformers the venv has (4.46.3 in .venv-t446, 5.24 in .venv); the
expectations that differ are keyed on the installed version.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict

import pytest
import torch
from transformers import cache_utils

from benchmarks.harness.errors import EngineError
from benchmarks.harness.model import compat
from tests.engine_fakes import (
    CACHE_KWARG_RENAMED,
    LEGACY_TUPLES,
    MAX_POSITIONS,
    TRANSFORMERS_VERSION,
    no_deprecation_messages,
    tiny_model,
)


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def gpt2():
    return tiny_model("gpt2")


# --- kwargs and outputs -----------------------------------------------------------------------


def test_cache_kwarg_is_cache_from_5_24_and_past_key_values_before(llama, gpt2):
    expected = "cache" if CACHE_KWARG_RENAMED else "past_key_values"
    assert compat.cache_kwarg(llama) == expected
    assert compat.cache_kwarg(gpt2) == expected


class _ForwardWith:
    """A stand-in model whose forward has exactly the named keyword parameters."""

    def __init__(self, *names: str) -> None:
        def forward(*args, **kwargs):
            return None

        parameters = [inspect.Parameter("input_ids", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        parameters += [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in names
        ]
        forward.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        self.forward = forward


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (("cache", "use_cache"), "cache"),
        (("past_key_values", "use_cache"), "past_key_values"),
        (("cache", "past_key_values"), "cache"),
    ],
)
def test_cache_kwarg_reads_the_forward_signature(names, expected):
    assert compat.cache_kwarg(_ForwardWith(*names)) == expected


def test_cache_kwarg_refuses_a_model_without_a_cache():
    with pytest.raises(EngineError, match="neither `cache` nor `past_key_values`"):
        compat.cache_kwarg(_ForwardWith("use_cache"))


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (("logits_to_keep",), "logits_to_keep"),
        (("num_logits_to_keep",), "num_logits_to_keep"),
        (("past_key_values",), None),
    ],
)
def test_logits_kwarg_reads_the_forward_signature(names, expected):
    assert compat.logits_kwarg(_ForwardWith(*names)) == expected


def test_logits_kwarg_of_real_models_matches_the_installed_version(llama, gpt2):
    expected_llama = "num_logits_to_keep" if LEGACY_TUPLES else "logits_to_keep"
    assert compat.logits_kwarg(llama) == expected_llama
    assert compat.logits_kwarg(gpt2) == (None if LEGACY_TUPLES else "logits_to_keep")


def test_output_cache_reads_the_real_key_without_rename_warnings(llama):
    ids = torch.zeros((1, 3), dtype=torch.long)
    with torch.inference_mode():
        outputs = llama(input_ids=ids, use_cache=True)
    with no_deprecation_messages():
        cache = compat.output_cache(outputs)
    assert compat.cache_seq_length(cache) == 3


def test_output_cache_accepts_both_field_names():
    assert compat.output_cache(OrderedDict(cache="new")) == "new"
    assert compat.output_cache(OrderedDict(past_key_values="old")) == "old"


def test_output_cache_without_a_cache_is_an_engine_error():
    with pytest.raises(EngineError, match="use_cache=True"):
        compat.output_cache(OrderedDict(logits=None))


# --- cache forms ------------------------------------------------------------------------------


def _kv(seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(1, 2, seq, 4), torch.zeros(1, 2, seq, 4)


def test_adopt_cache_turns_legacy_tuples_into_a_dynamic_cache_for_models_that_take_one(llama):
    if not hasattr(cache_utils.DynamicCache, "from_legacy_cache"):
        pytest.skip(f"transformers {TRANSFORMERS_VERSION} has no legacy cache format")
    legacy = (_kv(5), _kv(5))
    adopted = compat.adopt_cache(llama, legacy)
    assert isinstance(adopted, cache_utils.DynamicCache)
    assert compat.cache_seq_length(adopted) == 5


def test_adopt_cache_leaves_tuples_of_models_without_cache_classes_and_cache_objects_alone():
    legacy = (_kv(5),)
    assert compat.adopt_cache(_ForwardWith("past_key_values"), legacy) is legacy
    dynamic = cache_utils.DynamicCache()
    assert compat.adopt_cache(tiny_model("llama"), dynamic) is dynamic


def test_cache_seq_length_of_tuples_and_cache_objects(llama):
    assert compat.cache_seq_length((_kv(7), _kv(7))) == 7
    assert compat.cache_seq_length(()) == 0
    with torch.inference_mode():
        outputs = llama(input_ids=torch.zeros((2, 6), dtype=torch.long), use_cache=True)
    assert compat.cache_seq_length(compat.output_cache(outputs)) == 6


def test_max_positions_reads_llama_and_gpt2_configs(llama, gpt2):
    assert compat.max_positions(llama.config) == MAX_POSITIONS
    assert compat.max_positions(gpt2.config) == MAX_POSITIONS  # n_positions via the attribute map


def test_max_positions_is_none_when_the_config_states_none():
    class Config:
        max_position_embeddings = None

    assert compat.max_positions(Config()) is None


# --- copy_cache -------------------------------------------------------------------------------


def _first_keys(cache):
    if isinstance(cache, tuple):
        return cache[0][0]
    layers = getattr(cache, "layers", None)
    return layers[0].keys if layers is not None else cache.key_cache[0]


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_copy_cache_shares_append_only_kv_tensors_and_stays_independent(model_type):
    model = tiny_model(model_type)
    with torch.inference_mode():
        outputs = model(input_ids=torch.zeros((1, 4), dtype=torch.long), use_cache=True)
    cache = compat.adopt_cache(model, compat.output_cache(outputs))
    copied = compat.copy_cache(cache)
    assert _first_keys(copied).data_ptr() == _first_keys(cache).data_ptr()  # no copy made
    kwarg = compat.cache_kwarg(model)
    with torch.inference_mode():
        model(input_ids=torch.zeros((1, 1), dtype=torch.long), use_cache=True, **{kwarg: copied})
    assert compat.cache_seq_length(cache) == 4  # extending the copy left the original alone


def test_copy_cache_clones_state_it_does_not_know_to_be_append_only():
    class InPlaceCache:
        def __init__(self) -> None:
            self.state = torch.zeros(3)

    original = InPlaceCache()
    copied = compat.copy_cache(original)
    with torch.inference_mode():  # where the engine's model writes into its cache
        copied.state.add_(1)
    assert torch.equal(original.state, torch.zeros(3))


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_copy_cache_onto_a_device_copies_every_tensor_and_decodes_the_same(model_type):
    """A host snapshot (`device=`): nothing shared with the original, same contents, and a copy
    back from it continues the sequence exactly as the original cache does."""
    model = tiny_model(model_type)
    kwarg = compat.cache_kwarg(model)
    ids = torch.arange(6).reshape(1, 6)
    with torch.inference_mode():
        outputs = model(input_ids=ids, use_cache=True)
    cache = compat.adopt_cache(model, compat.output_cache(outputs))
    snapshot = compat.copy_cache(cache, "cpu")
    originals = {t.untyped_storage()._cdata for t in compat._all_tensors(cache)}
    copies = list(compat._all_tensors(snapshot))
    assert copies
    assert not originals & {t.untyped_storage()._cdata for t in copies}
    assert torch.equal(_first_keys(snapshot), _first_keys(cache))
    token = torch.tensor([[7]])
    with torch.inference_mode():
        restored = compat.copy_cache(snapshot, "cpu")
        again = model(input_ids=token, use_cache=True, **{kwarg: restored}).logits
        expected = model(input_ids=token, use_cache=True, **{kwarg: cache}).logits
    assert torch.equal(again, expected)
    assert compat.cache_seq_length(snapshot) == 6  # the snapshot itself never moved on


def test_all_tensors_reaches_nested_state_once():
    shared = torch.ones(2)

    class Layer:
        def __init__(self) -> None:
            self.conv_states = {0: shared}
            self.keys = torch.zeros(3)
            self.alias = shared

    class Cache:
        def __init__(self) -> None:
            self.layers = [Layer(), Layer()]

    found = list(compat._all_tensors(Cache()))
    assert sum(t is shared for t in found) == 1
    assert len(found) == 3
