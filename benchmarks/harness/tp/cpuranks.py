"""CPU tensor-parallel ranks run with no accelerator visible, so CPU tp works on GPU hosts too.

transformers builds its tensor-parallel device mesh on the accelerator torch reports,
`torch._C._get_accelerator()` (5.24 `distributed.utils.initialize_distributed_mesh`, 4.57
`integrations.tensor_parallel.initialize_tensor_parallelism`), never on the process group it is
handed. torch answers with the accelerator it was *built* with, whether or not a device is
visible (`at::accelerator::getAccelerator`: CUDA and MPS are compile-time checks), so a gloo
CPU cell on a CUDA box would bind every rank to `cuda:LOCAL_RANK`, and on a Mac 5.24 raises
"Tensor parallelism is not supported on MPS devices". Two halves keep a CPU rank on the CPU:

* `cpu_rank_env(env)`, in the launcher: `CUDA_VISIBLE_DEVICES=""` and `HIP_VISIBLE_DEVICES=""`,
  so no CPU rank opens a GPU context or takes GPU memory (it would hold a context per rank on
  a GPU another job, or the next cell, wants); on macOS gloo on the loopback interface;
* `hide_accelerator()`, in the rank before transformers is imported: torch reports no
  accelerator, as a CPU-only build does (`_get_accelerator` -> cpu, `current_accelerator()` ->
  None). Rebinding torch's private functions is the only switch there is (no environment
  variable hides a compiled-in MPS or CUDA); it is confined to the CPU rank's own process.

Apple silicon: the hiding gets transformers past its MPS refusal, but gloo ranks under torchrun
on macOS have not run under phasebench, so CPU tp cells on an MPS host are skipped at
collection with that reason unless `PHASEBENCH_CPU_TP_ON_MAC=1` (`mac_host_reason`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

import torch

#: Set to 1 to run CPU tensor-parallel cells on a Mac anyway (`mac_host_reason`).
CPU_TP_ON_MAC_ENV = "PHASEBENCH_CPU_TP_ON_MAC"
#: The variables that make CUDA (and ROCm's HIP) devices invisible to a process.
HIDING_ENV = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""}


def cpu_rank_env(env: Mapping[str, str], platform: str = sys.platform) -> dict[str, str]:
    """`env` for a CPU rank: no CUDA or HIP device visible; on macOS gloo on the loopback
    interface (`lo0`) unless the user chose one, since a Mac's hostname often resolves to no
    address gloo can use (PyTorch's own macOS CI sets the same: .ci/pytorch/macos-test.sh)."""
    out = {**env, **HIDING_ENV}
    if platform == "darwin":
        out.setdefault("GLOO_SOCKET_IFNAME", "lo0")
    return out


def reported_accelerator() -> str | None:
    """The accelerator type torch reports to transformers (None: cpu, as a CPU-only build, or a
    torch too old to have the function, which that transformers then does not call)."""
    probe = getattr(torch._C, "_get_accelerator", None)
    kind = "cpu" if probe is None else str(probe().type)
    return None if kind == "cpu" else kind


def _cpu_accelerator(check: bool | None = None) -> torch.device:
    del check
    return torch.device("cpu")


def _no_accelerator() -> None:
    return None


def hide_accelerator() -> str | None:
    """Make this process's torch report no accelerator (module docstring); what it reported
    before (None when it already reported none)."""
    before = reported_accelerator()
    # B010: these are torch's private entry points, rebound on purpose (module docstring).
    setattr(torch._C, "_get_accelerator", _cpu_accelerator)  # noqa: B010
    setattr(torch._C, "_accelerator_getAccelerator", _no_accelerator)  # noqa: B010
    return before


def mac_host_reason(
    mps_available: bool, tp: int, environ: Mapping[str, str] | None = None
) -> str | None:
    """Why a CPU tp cell does not run on this host (an Apple-silicon Mac), or None."""
    if not mps_available:
        return None
    if (os.environ if environ is None else environ).get(CPU_TP_ON_MAC_ENV) == "1":
        return None
    return (
        f"tp {tp} on CPU on an MPS host: transformers puts its tensor-parallel mesh on the "
        "compiled-in accelerator (MPS, which it refuses); phasebench's CPU ranks hide it, but "
        f"gloo ranks on macOS have not run under phasebench; {CPU_TP_ON_MAC_ENV}=1 runs them "
        "anyway"
    )
