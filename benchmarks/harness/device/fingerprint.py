"""The machine fingerprint: what a benchmark number was measured on, and which numbers compare.

`machine_fingerprint()` describes the OS, CPU, accelerator (name, memory, capability, driver,
CUDA/HIP runtime) and the software stack (torch, transformers, python, torch threads; mlx and
mlx-lm for a run with MLX cells, DESIGN §14) as plain strings. `fingerprint_id()` hashes only
the fields that decide whether two runs are comparable (`ID_FIELDS`): a new torch, driver or GPU
starts a new history series; the hostname, the full kernel build string and the total RAM do not
(none of them is recorded in the id).
`hardware_id()` hashes the machine only (`HARDWARE_FIELDS`), the key the reports group history
by, and `stack()` lists the software (`STACK_FIELDS`) judged against that hardware's history.

It deliberately does not read anything per run (PIDs, clocks, load) and does not call out to the
network; on Linux the NVIDIA driver version comes from `/proc/driver/nvidia/version` or
`nvidia-smi`, and on macOS the CPU name from `sysctl`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import psutil
import torch
import transformers

from benchmarks.harness.device.cpustate import last_level_cache
from benchmarks.harness.device.devices import device_unavailable_reason, resolve_device
from benchmarks.harness.device.gpuid import torch_cuda_uuid

NOT_APPLICABLE = "n/a"
UNKNOWN = "unknown"
UNSET = "unset"  # an environment variable that is not set

ID_FIELDS = (
    "os",
    "arch",
    "cpu",
    "cpu_count",
    "accelerator",
    "accelerator_memory_bytes",
    "driver",
    "runtime",
    "torch",
    "transformers",
    "python",
    "torch_num_threads",
)
"""The fields that decide comparability; every other field is descriptive only."""


def machine_fingerprint(device: torch.device | None = None, *, mlx: bool = False) -> dict[str, str]:
    """Describe this machine and software stack; the accelerator is `device`'s, or the first one.

    With no device, a CUDA GPU (index 0) is described if there is one, else MPS, else none.
    `mlx`: the run has MLX cells, so mlx's and mlx-lm's versions are part of its stack (absent
    otherwise: installing mlx does not change a torch-only run's stack).
    """
    fingerprint = {
        "os": _os_name(),
        "os_release": _os_release(),
        "arch": platform.machine() or UNKNOWN,
        "cpu": _cpu_model(),
        "cpu_count": str(os.cpu_count() or UNKNOWN),
        "cpu_physical_cores": str(psutil.cpu_count(logical=False) or UNKNOWN),
        "memory_bytes": str(psutil.virtual_memory().total),
        **_cpu_cache(),
        **_accelerator(device if device is not None else _default_device()),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "torch_num_threads": str(torch.get_num_threads()),
        **cpu_kernel_level(),
        # How OpenMP workers wait between parallel regions, as the user's process has it (the
        # suite sets neither): +7 % to 2x on a quiet 2-core VM, and how far rounds collapse when
        # a neighbour takes a core (docs/suite.md, "Threads on a shared CPU").
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", UNSET),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT", UNSET),
        **mps_fallback_state(),
        **(mlx_versions() if mlx else {}),
    }
    return {key: str(value) for key, value in fingerprint.items()}


def mlx_versions() -> dict[str, str]:
    """`mlx` and `mlx_lm` versions (`n/a` where not installed), read without importing them."""
    found = {}
    for key, dist in (("mlx", "mlx"), ("mlx_lm", "mlx-lm")):
        try:
            found[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[key] = NOT_APPLICABLE
    return found


MPS_FALLBACK_ENV = "PYTORCH_ENABLE_MPS_FALLBACK"
ALLOW_MPS_FALLBACK_ENV = "PHASEBENCH_ALLOW_MPS_FALLBACK"


def mps_fallback_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether torch will run ops MPS lacks on the CPU: it reads the variable as an integer,
    and any value but 0 turns the fallback on."""
    value = (os.environ if environ is None else environ).get(MPS_FALLBACK_ENV, "").strip()
    return value not in ("", "0")


def mps_fallback_state(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`PYTORCH_ENABLE_MPS_FALLBACK` as set (or `unset`) and whether the user opted in to it."""
    env = os.environ if environ is None else environ
    return {
        "pytorch_enable_mps_fallback": env.get(MPS_FALLBACK_ENV, UNSET),
        "mps_fallback_opt_in": "yes" if env.get(ALLOW_MPS_FALLBACK_ENV) == "1" else "no",
    }


def mps_fallback_refusal(uses_mps: bool, environ: Mapping[str, str] | None = None) -> str | None:
    """Why an MPS run must not start (None: it may).

    With the fallback on, an op MPS lacks runs silently on the CPU: the cell's time is then a
    CPU-and-copies time recorded as an MPS one. Such a run is refused unless the user opts in
    (`PHASEBENCH_ALLOW_MPS_FALLBACK=1`); an opted-in run is marked (`mps_fallback_opt_in`,
    and the variable in the stack), so its report says so.
    """
    env = os.environ if environ is None else environ
    if not uses_mps or not mps_fallback_enabled(env) or env.get(ALLOW_MPS_FALLBACK_ENV) == "1":
        return None
    return (
        f"{MPS_FALLBACK_ENV}={env.get(MPS_FALLBACK_ENV)} is set: ops MPS lacks would run on the "
        "CPU and be recorded as MPS times. Unset it, or opt in with "
        f"{ALLOW_MPS_FALLBACK_ENV}=1 (the run is then marked as using the CPU fallback)."
    )


def cpu_kernel_level() -> dict[str, str]:
    """The CPU kernels torch dispatches to, and the variables that cap them.

    `cpu_capability` is what ATen chose (`AVX512`, `AVX2`, `DEFAULT`, ...);
    `ATEN_CPU_CAPABILITY` and `ONEDNN_MAX_CPU_ISA` lower it (an AVX-512 machine run as AVX2, as
    GitHub's hosted runners are): the same hardware then runs other kernels, several times
    slower in bfloat16, so they are part of the stack, not of the machine.
    """
    return {
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", UNSET),
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", UNSET),
    }


def fingerprint_id(fp: Mapping[str, str]) -> str:
    """An 8-hex-digit hash of the `ID_FIELDS` of `fp`; stable across runs, processes and dicts."""
    identity = {key: str(fp.get(key, "")) for key in ID_FIELDS}
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


HARDWARE_FIELDS = (
    "os_family",
    "arch",
    "cpu",
    "cpu_count",
    "accelerator",
    "accelerator_memory_bytes",
)
"""What `hardware_id` hashes: the machine itself, so its history survives a software upgrade."""

STACK_FIELDS = (
    "torch",
    "transformers",
    "python",
    "driver",
    "runtime",
    "os_release",
    "torch_num_threads",
    "cpu_capability",
    "aten_cpu_capability",
    "onednn_max_cpu_isa",
    "omp_wait_policy",
    "gomp_spincount",
    "pytorch_enable_mps_fallback",
    "mlx",  # a run with MLX cells only (`machine_fingerprint(mlx=True)`): an upgrade is a
    "mlx_lm",  # stack change, as a torch upgrade is
)
"""The software stack: a run whose stack differs is judged against the same hardware's runs."""
# Left out of the stack while unset, so history recorded before it was a field reads the same.
_STACK_WHEN_SET = ("pytorch_enable_mps_fallback", "gomp_spincount")


def hardware_id(fp: Mapping[str, str]) -> str:
    """An 8-hex-digit hash of the hardware fields of `fp` (OS family = first word of `os`)."""
    fields = {**fp, "os_family": str(fp.get("os", "")).split(" ")[0]}
    identity = {key: str(fields.get(key, "")) for key in HARDWARE_FIELDS}
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return "hw" + hashlib.sha256(blob.encode()).hexdigest()[:8]


def stack(fp: Mapping[str, str]) -> dict[str, str]:
    """The software-stack fields of `fp` (`STACK_FIELDS`, absent ones left out, and the MPS
    fallback while unset)."""
    return {
        key: str(fp[key])
        for key in STACK_FIELDS
        if key in fp and not (key in _STACK_WHEN_SET and fp[key] == UNSET)
    }


def _os_name() -> str:
    # Major.minor only: a kernel patch or macOS point release does not split the history.
    system = platform.system() or UNKNOWN
    release = platform.mac_ver()[0] if system == "Darwin" else platform.release()
    match = re.match(r"\d+(\.\d+)?", release)
    name = "macOS" if system == "Darwin" else system
    return f"{name} {match.group(0)}" if match else name


def _os_release() -> str:
    if platform.system() == "Darwin":
        return platform.mac_ver()[0] or UNKNOWN
    return platform.release() or UNKNOWN


def _cpu_model() -> str:
    if platform.system() == "Darwin":
        return _command_output(["sysctl", "-n", "machdep.cpu.brand_string"]) or _fallback_cpu()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        text = cpuinfo.read_text(errors="replace")
        # x86 names the model; arm64 Linux often has only "CPU part" ids or a "Hardware" line.
        for key in ("model name", "Model", "Hardware", "cpu model"):
            match = re.search(rf"^{key}\s*:\s*(.+)$", text, flags=re.MULTILINE)
            if match:
                return match.group(1).strip()
    return _fallback_cpu()


def _fallback_cpu() -> str:
    return platform.processor() or platform.machine() or UNKNOWN


def _command_output(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    output = result.stdout.strip()
    return output if result.returncode == 0 and output else None


def device_fingerprints(devices: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per device the run uses: its fingerprint, `fingerprint_id` and `hardware_id` (H4).

    A run over `cuda` and `cuda:1` measures two GPUs; each has its own accelerator fields, so
    neither is described by the other's. Devices this machine does not have are left out (their
    cells were skipped); keys are the devices as the matrix spells them.
    """
    found: dict[str, dict[str, Any]] = {}
    for spec in sorted(set(devices)):
        if device_unavailable_reason(spec) is not None:
            continue
        fp = machine_fingerprint(resolve_device(spec))
        found[spec] = {
            "fingerprint": fp,
            "fingerprint_id": fingerprint_id(fp),
            "hardware_id": hardware_id(fp),
        }
    return found


def _cpu_cache() -> dict[str, str]:
    # Descriptive: the last-level cache over the CPUs this process may run on (cpustate.py).
    found = last_level_cache()
    if found is None:
        return {"cpu_llc_bytes": UNKNOWN, "cpu_llc_instances": UNKNOWN}
    return {"cpu_llc_bytes": str(found.total_bytes), "cpu_llc_instances": str(found.instances)}


def _default_device() -> torch.device | None:
    if torch.cuda.is_available():
        return torch.device("cuda", 0)
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return None


def _accelerator(device: torch.device | None) -> dict[str, str]:
    if device is not None and device.type == "cuda":
        return _cuda_accelerator(device)
    if device is not None and device.type == "mps":
        return _mps_accelerator()
    return {
        "accelerator": "none",
        "accelerator_memory_bytes": NOT_APPLICABLE,
        "accelerator_capability": NOT_APPLICABLE,
        "accelerator_uuid": NOT_APPLICABLE,
        "driver": NOT_APPLICABLE,
        "runtime": NOT_APPLICABLE,
    }


def _cuda_accelerator(device: torch.device) -> dict[str, str]:
    # "cuda" without an index is torch's current device (0 unless the process changed it).
    index = torch.cuda.current_device() if device.index is None else device.index
    properties = torch.cuda.get_device_properties(index)
    major, minor = torch.cuda.get_device_capability(index)
    runtime = f"hip {torch.version.hip}" if torch.version.hip else f"cuda {torch.version.cuda}"
    return {
        "accelerator": properties.name,
        "accelerator_memory_bytes": str(properties.total_memory),
        "accelerator_capability": f"{major}.{minor}",
        # Descriptive: tells two GPUs of one model apart (cuda vs cuda:1) in a run's devices.
        "accelerator_uuid": torch_cuda_uuid(index) or UNKNOWN,
        "driver": _nvidia_driver() or UNKNOWN,
        "runtime": runtime,
    }


def _nvidia_driver() -> str | None:
    version_file = Path("/proc/driver/nvidia/version")
    if version_file.is_file():
        match = re.search(r"Kernel Module\s+(\S+)", version_file.read_text(errors="replace"))
        if match:
            return match.group(1)
    output = _command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return output.splitlines()[0].strip() if output else None


def _mps_accelerator() -> dict[str, str]:
    # Apple GPUs share the SoC's name; the memory figure is Metal's recommended working set
    # (torch >= 2.5), the most the GPU should use of the unified memory.
    recommended = getattr(torch.mps, "recommended_max_memory", None)
    memory = str(recommended()) if recommended is not None else NOT_APPLICABLE
    return {
        "accelerator": f"{_cpu_model()} GPU (mps)",
        "accelerator_memory_bytes": memory,
        "accelerator_capability": NOT_APPLICABLE,
        "accelerator_uuid": NOT_APPLICABLE,
        "driver": f"macOS {platform.mac_ver()[0] or UNKNOWN} Metal",
        "runtime": "mps",
    }
