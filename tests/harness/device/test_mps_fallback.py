"""PYTORCH_ENABLE_MPS_FALLBACK: recorded in the fingerprint, refused on MPS unless opted in."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import benchmarks.conftest as suite_conftest
from benchmarks.harness.device import fingerprint
from benchmarks.harness.device.fingerprint import (
    machine_fingerprint,
    mps_fallback_refusal,
    mps_fallback_state,
    stack,
)
from benchmarks.suite.rounds import MATRIX


def test_an_mps_run_with_the_fallback_on_is_refused_naming_the_variable_and_the_opt_in():
    reason = mps_fallback_refusal(True, {"PYTORCH_ENABLE_MPS_FALLBACK": "1"})
    assert reason is not None
    assert "PYTORCH_ENABLE_MPS_FALLBACK=1" in reason
    assert "PHASEBENCH_ALLOW_MPS_FALLBACK=1" in reason


@pytest.mark.parametrize(
    ("uses_mps", "env"),
    [
        (False, {"PYTORCH_ENABLE_MPS_FALLBACK": "1"}),  # a CPU/CUDA run: the variable is inert
        (True, {}),
        (True, {"PYTORCH_ENABLE_MPS_FALLBACK": "0"}),  # torch reads 0 as off
        (True, {"PYTORCH_ENABLE_MPS_FALLBACK": "1", "PHASEBENCH_ALLOW_MPS_FALLBACK": "1"}),
    ],
)
def test_runs_that_may_start(uses_mps: bool, env: dict[str, str]):
    assert mps_fallback_refusal(uses_mps, env) is None


def test_the_fingerprint_records_the_variable_and_the_opt_in(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    monkeypatch.setenv("PHASEBENCH_ALLOW_MPS_FALLBACK", "1")
    fp = machine_fingerprint()
    assert fp["pytorch_enable_mps_fallback"] == "1"
    assert fp["mps_fallback_opt_in"] == "yes"
    assert stack(fp)["pytorch_enable_mps_fallback"] == "1"  # the report names an opted-in run


def test_an_unset_fallback_stays_out_of_the_stack_so_older_history_compares_the_same():
    fp = {"torch": "2.13.0", **mps_fallback_state({})}
    assert fp["pytorch_enable_mps_fallback"] == fingerprint.UNSET
    assert stack(fp) == {"torch": "2.13.0"}


def session_with(devices: list[str]) -> SimpleNamespace:
    config = SimpleNamespace(stash=pytest.Stash())
    config.stash[MATRIX] = SimpleNamespace(cells=[SimpleNamespace(device=d) for d in devices])
    return SimpleNamespace(config=config)


def test_the_suite_refuses_the_session_before_any_cell_runs(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(suite_conftest, "device_unavailable_reason", lambda _spec: None)
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    monkeypatch.delenv("PHASEBENCH_ALLOW_MPS_FALLBACK", raising=False)
    with pytest.raises(pytest.UsageError, match="PHASEBENCH_ALLOW_MPS_FALLBACK"):
        suite_conftest.pytest_sessionstart(session_with(["cpu", "mps"]))  # type: ignore[arg-type]
    suite_conftest.pytest_sessionstart(session_with(["cpu"]))  # type: ignore[arg-type]
    monkeypatch.setenv("PHASEBENCH_ALLOW_MPS_FALLBACK", "1")
    suite_conftest.pytest_sessionstart(session_with(["mps"]))  # type: ignore[arg-type]
