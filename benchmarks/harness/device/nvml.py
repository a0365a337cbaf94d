"""A small typed wrapper over NVML (`pynvml`, package nvidia-ml-py) for one torch CUDA device.

`open_gpu(torch_index)` initialises NVML, finds the physical GPU torch's index names (through
its UUID, `gpuid.nvml_index`: NVML numbers GPUs in PCI order and ignores
`CUDA_VISIBLE_DEVICES`, so the same number may be another GPU) and returns a `NvmlGpu`, or an
`NvmlUnavailable` saying why not ("nvidia-ml-py not installed", NVML failed to initialise, no
GPU with torch's UUID). Every reading of `NvmlGpu` returns a number in the unit its name says,
or None when the GPU or driver does not support that query: one unsupported query never hides
the others, and nothing here raises after `open_gpu` succeeded.

Readings: SM and memory clocks (current and maximum, MHz), throttle reasons (NVML's bitmask as
names), power draw and power limit (W), and the total-energy counter (J since the driver loaded;
Volta and newer). `close()` shuts NVML down again (NVML counts init/shutdown pairs).

The pynvml module is injectable (`nvml=`) so tests run without a GPU or the package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from benchmarks.harness.device.gpuid import nvml_index, torch_cuda_uuid

NOT_INSTALLED = "nvidia-ml-py not installed (pip install nvidia-ml-py)"

# NVML's clock-event ("throttle") reason bits, by pynvml constant name, and our label.
THROTTLE_REASONS = (
    ("nvmlClocksThrottleReasonGpuIdle", "gpu_idle"),
    ("nvmlClocksThrottleReasonApplicationsClocksSetting", "applications_clocks"),
    ("nvmlClocksThrottleReasonSwPowerCap", "sw_power_cap"),
    ("nvmlClocksThrottleReasonHwSlowdown", "hw_slowdown"),
    ("nvmlClocksThrottleReasonSyncBoost", "sync_boost"),
    ("nvmlClocksThrottleReasonSwThermalSlowdown", "sw_thermal"),
    ("nvmlClocksThrottleReasonHwThermalSlowdown", "hw_thermal"),
    ("nvmlClocksThrottleReasonHwPowerBrakeSlowdown", "hw_power_brake"),
    ("nvmlClocksThrottleReasonDisplayClockSetting", "display_clocks"),
)

T = TypeVar("T")


@dataclass(frozen=True)
class NvmlUnavailable:
    """Why no NVML reading can be taken for a device (one line, for records and reports)."""

    reason: str


class NvmlGpu:
    """One physical GPU's NVML handle (made by `open_gpu`); readings are None when unsupported."""

    def __init__(self, nvml: Any, handle: Any, nvml_index: int) -> None:
        self._nvml = nvml
        self._handle = handle
        self.nvml_index = nvml_index

    def _query(self, read: Callable[[], T]) -> T | None:
        try:
            return read()
        except Exception:  # NVMLError_NotSupported and friends: this query has no answer
            return None

    def _clock_mhz(self, getter: str, clock: str) -> int | None:
        value = self._query(
            lambda: getattr(self._nvml, getter)(self._handle, getattr(self._nvml, clock))
        )
        return int(value) if value is not None else None

    def sm_clock_mhz(self) -> int | None:
        """The current SM (graphics) clock."""
        return self._clock_mhz("nvmlDeviceGetClockInfo", "NVML_CLOCK_SM")

    def mem_clock_mhz(self) -> int | None:
        """The current memory clock."""
        return self._clock_mhz("nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM")

    def max_sm_clock_mhz(self) -> int | None:
        """The highest SM clock this GPU can run at."""
        return self._clock_mhz("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM")

    def max_mem_clock_mhz(self) -> int | None:
        """The highest memory clock."""
        return self._clock_mhz("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_MEM")

    def temperature_c(self) -> int | None:
        """The GPU core temperature in degrees Celsius."""
        value = self._query(
            lambda: self._nvml.nvmlDeviceGetTemperature(
                self._handle, self._nvml.NVML_TEMPERATURE_GPU
            )
        )
        return int(value) if value is not None else None

    def throttle_reasons(self) -> tuple[str, ...] | None:
        """Why the clocks are below their maximum now, by name (`THROTTLE_REASONS`); () = none."""
        mask = self._query(
            lambda: self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons(self._handle)
        )
        if mask is None:
            return None
        return throttle_names(self._nvml, int(mask))

    def power_w(self) -> float | None:
        """The power draw NVML reports now (mW -> W; on recent GPUs a short moving average)."""
        value = self._query(lambda: self._nvml.nvmlDeviceGetPowerUsage(self._handle))
        return int(value) / 1000.0 if value is not None else None

    def power_limit_w(self) -> float | None:
        """The enforced power limit (mW -> W)."""
        value = self._query(lambda: self._nvml.nvmlDeviceGetEnforcedPowerLimit(self._handle))
        return int(value) / 1000.0 if value is not None else None

    def energy_j(self) -> float | None:
        """The total-energy counter (mJ since the driver loaded -> J); None before Volta."""
        value = self._query(lambda: self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        return int(value) / 1000.0 if value is not None else None

    def close(self) -> None:
        """Shut NVML down (pairs with the init in `open_gpu`); never raises."""
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()


def throttle_names(nvml: Any, mask: int) -> tuple[str, ...]:
    """The labels of the reason bits set in `mask` that this pynvml knows; unknown bits as hex."""
    names: list[str] = []
    known = 0
    for attr, label in THROTTLE_REASONS:
        bit = getattr(nvml, attr, None)
        if isinstance(bit, int) and bit:
            known |= bit
            if mask & bit:
                names.append(label)
    if mask & ~known:
        names.append(f"other_0x{mask & ~known:x}")
    return tuple(names)


def import_pynvml() -> Any:
    """The pynvml module, or None when nvidia-ml-py is not installed (or fails to import)."""
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415 - optional
    except Exception:  # an optional dependency: absent or broken both mean "no NVML"
        return None
    return pynvml


def open_gpu(
    torch_index: int,
    nvml: Any = None,
    *,
    torch_uuid: Callable[[int], str | None] = torch_cuda_uuid,
    environ: Mapping[str, str] | None = None,
) -> NvmlGpu | NvmlUnavailable:
    """The NVML handle of torch's CUDA device `torch_index`, or why there is none.

    `nvml` is the pynvml module (imported here when None); `torch_uuid` and `environ` feed the
    UUID mapping (`gpuid.nvml_index`) and are injected by tests. The caller `close()`s the GPU.
    """
    module = nvml if nvml is not None else import_pynvml()
    if module is None:
        return NvmlUnavailable(NOT_INSTALLED)
    try:
        module.nvmlInit()
    except Exception as error:  # no driver, no permission, a container without the library
        return NvmlUnavailable(f"NVML failed to initialise: {error}")
    found = nvml_index(torch_index, module, torch_uuid=torch_uuid, environ=environ)
    handle = None
    if found is not None:
        with contextlib.suppress(Exception):
            handle = module.nvmlDeviceGetHandleByIndex(found)
    if found is None or handle is None:
        with contextlib.suppress(Exception):
            module.nvmlShutdown()
        return NvmlUnavailable(
            f"no NVML GPU matches torch cuda:{torch_index} by UUID (CUDA_VISIBLE_DEVICES / "
            "CUDA_DEVICE_ORDER); no reading is better than another GPU's"
        )
    return NvmlGpu(module, handle, found)
