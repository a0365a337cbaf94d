"""The doctor's NVML reads of one CUDA GPU, behind a small interface that tests replace.

`NvmlProbe` opens NVML (`pynvml`, package `nvidia-ml-py`, imported optionally), finds the GPU
that torch's index names through its UUID (`gpuid.nvml_index`, never by the same number) and
reads, once, what decides whether the GPU can be trusted to benchmark (`GpuReadings`):
persistence mode, ECC mode and pending/uncorrected errors, MIG mode, SM clock against its
maximum and throttle reasons (`noise.nvidia_clocks`), the enforced power limit against the
default, and the compute/graphics processes on the GPU. `sm_clock_mhz()` samples the SM clock
again later (the doctor reads it while its own kernels run, to tell locked clocks from idle
ones). Every query that a GPU or driver does not support is None, never a crash; so a
misspelt NVML name would read as "unsupported" too, which is why tests/harness/device/
test_nvml_names.py checks every name called here against the installed pynvml.

It does not judge the readings (`gpuchecks.py` does) and does not sample during a benchmark
(the suite's GPU state is `device/nvml.py`'s concern).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import psutil

from benchmarks.harness.device.gpuid import nvml_index, torch_cuda_uuid
from benchmarks.harness.device.noise import nvidia_clocks


@dataclass(frozen=True)
class GpuProcess:
    """A process holding a context on the GPU; `kind` is `compute` or `graphics`."""

    pid: int
    name: str
    kind: str
    used_bytes: int | None


@dataclass(frozen=True)
class GpuReadings:
    """One NVML reading of the GPU; None where the GPU or driver does not say."""

    nvml_index: int
    name: str
    driver: str | None = None
    persistence_mode: bool | None = None
    ecc_enabled: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    mig_enabled: bool | None = None
    mig_pending: bool | None = None
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    throttle_reasons: tuple[str, ...] | None = None
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    processes: tuple[GpuProcess, ...] | None = None


class GpuProbe(Protocol):
    """What the doctor asks of a GPU (a fake in tests); a context manager around the reads."""

    def __enter__(self) -> GpuProbe:
        """Open the connection (NVML init)."""
        ...

    def __exit__(self, *_: object) -> None:
        """Close it."""
        ...

    def readings(self) -> GpuReadings:
        """The GPU's state now."""
        ...

    def sm_clock_mhz(self) -> int | None:
        """The SM clock now, MHz."""
        ...


class NvmlUnavailableError(Exception):
    """NVML cannot answer for this GPU; the message says why and is shown as a finding."""


def import_pynvml() -> Any:
    """The pynvml module, or NvmlUnavailableError naming the package to install."""
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415
    except Exception as error:  # optional dependency; absent or broken means "no readings"
        raise NvmlUnavailableError(
            f"nvidia-ml-py (pynvml) is not importable ({type(error).__name__})"
        ) from error
    return pynvml


class NvmlProbe:
    """NVML readings of torch's CUDA device `index`; use as a context manager (init/shutdown)."""

    def __init__(
        self,
        index: int,
        nvml: Any = None,
        *,
        torch_uuid: Callable[[int], str | None] = torch_cuda_uuid,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._index, self._nvml = index, nvml
        self._torch_uuid, self._environ = torch_uuid, environ
        self._handle: Any = None
        self._found: int | None = None

    def __enter__(self) -> NvmlProbe:
        module = self._nvml if self._nvml is not None else import_pynvml()
        self._nvml = module
        try:
            module.nvmlInit()
        except Exception as error:  # no driver, or a driver/library mismatch
            raise NvmlUnavailableError(f"nvmlInit failed: {error}") from error
        found = nvml_index(self._index, module, torch_uuid=self._torch_uuid, environ=self._environ)
        if found is None:
            self.__exit__()
            raise NvmlUnavailableError(
                f"cannot tell which NVML GPU is torch's cuda:{self._index} (no UUID match; "
                "set CUDA_DEVICE_ORDER=PCI_BUS_ID or list UUIDs in CUDA_VISIBLE_DEVICES)"
            )
        self._found = found
        self._handle = module.nvmlDeviceGetHandleByIndex(found)
        return self

    def __exit__(self, *_: object) -> None:
        with contextlib.suppress(Exception):  # a failed shutdown leaves nothing to report
            self._nvml.nvmlShutdown()

    def sm_clock_mhz(self) -> int | None:
        """The SM clock now, MHz (None when unsupported)."""
        value = _ask(lambda: self._nvml.nvmlDeviceGetClockInfo(self._handle, _sm(self._nvml)))
        return None if value is None else int(value)

    def readings(self) -> GpuReadings:
        """Every reading the doctor judges, once."""
        nv, handle = self._nvml, self._handle
        assert self._found is not None, "use NvmlProbe as a context manager"
        clocks = nvidia_clocks(self._index, nv, torch_uuid=self._torch_uuid, environ=self._environ)
        ecc = _ask(lambda: list(nv.nvmlDeviceGetEccMode(handle)))
        mig = _ask(lambda: list(nv.nvmlDeviceGetMigMode(handle)))
        remapped = _ask(lambda: tuple(nv.nvmlDeviceGetRemappedRows(handle)))
        throttle = clocks.get("gpu_throttle_reasons")
        return GpuReadings(
            nvml_index=self._found,
            name=_text(_ask(lambda: nv.nvmlDeviceGetName(handle))) or "unknown",
            driver=_text(_ask(nv.nvmlSystemGetDriverVersion)),
            persistence_mode=_enabled(nv, _ask(lambda: nv.nvmlDeviceGetPersistenceMode(handle))),
            ecc_enabled=None if ecc is None else _enabled(nv, ecc[0]),
            ecc_uncorrected_volatile=_ask(
                lambda: int(
                    nv.nvmlDeviceGetTotalEccErrors(
                        handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
                    )
                )
            ),
            retired_pages_pending=_enabled(
                nv, _ask(lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(handle))
            ),
            remapped_rows_pending=None if remapped is None else bool(remapped[2]),
            mig_enabled=None if mig is None else _enabled(nv, mig[0]),
            mig_pending=None if mig is None else mig[0] != mig[1],
            sm_clock_mhz=_mhz(clocks.get("gpu_sm_clock_hz")),
            max_sm_clock_mhz=_mhz(clocks.get("gpu_max_sm_clock_hz")),
            throttle_reasons=None
            if not isinstance(throttle, str)
            else tuple(r for r in throttle.split(",") if r and r != "none"),
            power_limit_w=_watts(_ask(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))),
            default_power_limit_w=_watts(
                _ask(lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(handle))
            ),
            processes=self._processes(),
        )

    def _processes(self) -> tuple[GpuProcess, ...] | None:
        nv, handle = self._nvml, self._handle
        found: dict[int, GpuProcess] = {}
        answered = False
        for kind, query in (
            ("compute", "nvmlDeviceGetComputeRunningProcesses"),
            ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
        ):
            listed = _ask(functools.partial(_listed, nv, query, handle))
            if listed is None:
                continue
            answered = True
            for entry in listed:
                pid = int(entry.pid)
                used = getattr(entry, "usedGpuMemory", None)
                if pid not in found:  # a process with both contexts counts as compute
                    found[pid] = GpuProcess(pid, _process_name(pid), kind, _bytes(used))
        return tuple(found.values()) if answered else None


def _listed(nv: Any, query: str, handle: Any) -> list[Any]:
    return list(getattr(nv, query)(handle))


def _sm(nv: Any) -> Any:
    return nv.NVML_CLOCK_SM


def _ask(query: Callable[[], Any]) -> Any:
    """One NVML query; None when the GPU/driver does not support it or it fails."""
    try:
        return query()
    except Exception:  # NVMLError_NotSupported and friends: no answer, not a crash
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)  # old pynvml: bytes


def _enabled(nv: Any, value: Any) -> bool | None:
    if value is None:
        return None
    return bool(int(value) == int(getattr(nv, "NVML_FEATURE_ENABLED", 1)))


def _mhz(hz: object) -> int | None:
    return round(hz / 1_000_000) if isinstance(hz, (int, float)) else None


def _watts(milliwatts: Any) -> float | None:
    return None if milliwatts is None else float(milliwatts) / 1000.0


def _bytes(used: Any) -> int | None:
    # NVML reports "not available" (e.g. under WDDM or in containers) as None or a huge sentinel.
    if not isinstance(used, int) or used < 0 or used >= 1 << 63:
        return None
    return used


def _process_name(pid: int) -> str:
    try:
        return str(psutil.Process(pid).name())
    except psutil.Error:  # another container's PID, or gone already
        return "?"
