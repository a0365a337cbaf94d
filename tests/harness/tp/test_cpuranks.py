"""CPU tensor-parallel ranks see no accelerator: the launcher's environment, the rank's hiding,
and the Mac skip, on a simulated host (torch's accelerator entry points monkeypatched to what a
CUDA or MPS build reports: the accelerator it was built with, whatever is visible).

The real 2-rank run on a simulated CUDA host is `test_runs.py`'s.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from benchmarks.harness.tp.cpuranks import (
    CPU_TP_ON_MAC_ENV,
    cpu_rank_env,
    hide_accelerator,
    mac_host_reason,
    reported_accelerator,
)


def simulate_accelerator(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """torch reports `kind` where transformers and torch.accelerator look (undone after the
    test, whatever `hide_accelerator` rebinds in between)."""

    def accelerator(check: bool | None = None) -> torch.device:
        del check
        return torch.device(kind)

    monkeypatch.setattr(torch._C, "_get_accelerator", accelerator)
    monkeypatch.setattr(torch._C, "_accelerator_getAccelerator", lambda: torch.device(kind))


def test_the_launcher_makes_no_gpu_visible_to_a_cpu_rank():
    env = cpu_rank_env({"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1"}, platform="linux")
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""}
    # macOS: gloo on the loopback interface, unless the user named one.
    assert cpu_rank_env({}, platform="darwin")["GLOO_SOCKET_IFNAME"] == "lo0"
    mine = cpu_rank_env({"GLOO_SOCKET_IFNAME": "en0"}, platform="darwin")
    assert mine["GLOO_SOCKET_IFNAME"] == "en0"


@pytest.mark.parametrize("kind", ["cuda", "mps"])
def test_a_rank_hides_the_compiled_in_accelerator(monkeypatch: pytest.MonkeyPatch, kind: str):
    simulate_accelerator(monkeypatch, kind)
    assert reported_accelerator() == kind
    assert torch.accelerator.current_accelerator() == torch.device(kind)
    assert hide_accelerator() == kind
    assert reported_accelerator() is None
    assert torch._C._get_accelerator() == torch.device("cpu")  # what transformers reads
    assert torch.accelerator.current_accelerator() is None
    assert torch.accelerator.is_available() is False
    assert hide_accelerator() is None  # already hidden


def _mesh_function():
    try:
        utils = importlib.import_module("transformers.distributed.utils")
    except ImportError:
        return None
    return getattr(utils, "initialize_distributed_mesh", None)


@pytest.mark.skipif(_mesh_function() is None, reason="transformers without the 5.x mesh builder")
def test_transformers_refuses_tp_on_a_mac_until_the_rank_hides_mps(
    monkeypatch: pytest.MonkeyPatch, tmp_path
):
    """transformers 5.x's mesh builder on a one-rank gloo group with tp_size 2: on an MPS host it
    refuses before anything else; with MPS hidden it gets past that to the world-size check."""
    from transformers.distributed import DistributedConfig  # noqa: PLC0415 - 5.x only

    mesh = _mesh_function()
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        simulate_accelerator(monkeypatch, "mps")
        with pytest.raises(RuntimeError, match="not supported on MPS"):
            mesh(DistributedConfig(tp_size=2))
        hide_accelerator()
        with pytest.raises(RuntimeError, match="requires 2 processes"):
            mesh(DistributedConfig(tp_size=2))
    finally:
        torch.distributed.destroy_process_group()


def test_cpu_tp_on_a_mac_is_skipped_with_the_reason_unless_asked():
    assert mac_host_reason(False, 2, environ={}) is None  # Linux, a CUDA box: runs
    reason = mac_host_reason(True, 2, environ={})
    assert reason is not None
    assert reason.startswith("tp 2 on CPU on an MPS host")
    assert f"{CPU_TP_ON_MAC_ENV}=1" in reason
    assert mac_host_reason(True, 2, environ={CPU_TP_ON_MAC_ENV: "1"}) is None
