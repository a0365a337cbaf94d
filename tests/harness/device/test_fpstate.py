"""Spec of `benchmarks.harness.device.fpstate`: observing and pinning FTZ/DAZ."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from benchmarks.harness.device.fpstate import FpState, pin_fp_state, read_fp_state

OFF = FpState(flush_to_zero=False, denormals_are_zero=False)
ON = FpState(flush_to_zero=True, denormals_are_zero=True)


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    yield
    torch.set_flush_denormal(False)


def test_the_state_reads_what_set_flush_denormal_set():
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-denormal mode torch can set")
    assert read_fp_state() == ON
    torch.set_flush_denormal(False)
    assert read_fp_state() == OFF


def test_pinning_turns_a_leaked_flush_to_zero_off_and_says_what_it_set():
    torch.set_flush_denormal(True)
    assert pin_fp_state() == OFF
    assert read_fp_state() == OFF


def test_the_extra_info_fields_are_plain_json():
    assert OFF.as_extra_info() == {
        "flush_denormal": False,
        "fp_flush_to_zero": False,
        "fp_denormals_are_zero": False,
    }
    assert FpState(flush_to_zero=True, denormals_are_zero=False).flush_denormal is False
