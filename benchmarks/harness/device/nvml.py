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
Volta and newer). Two readings hold what happened *between* two reads, for the state during a
load that a read after a device sync (an idle GPU) cannot see:

* `violation_s(policy)`: the cumulative time the clocks were held below the application clocks
  by the power or thermal limiter (`nvmlDeviceGetViolationStatus`, ns since the driver loaded);
* `samples(kind, since_us)`: the driver's own buffered samples of SM clock, memory clock or
  power newer than a timestamp (`nvmlDeviceGetSamples`), so nothing samples beside the load.

`close()` shuts NVML down again (NVML counts init/shutdown pairs).

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

# Limiters whose cumulative violation time NVML keeps, by our label: `nvmlPerfPolicyType_t`
# (NVML_PERF_POLICY_POWER = 0, _THERMAL = 1 in nvml.h and pynvml), read with
# nvmlDeviceGetViolationStatus, whose `nvmlViolationTime_t.violationTime` is in ns (NVML API
# reference). Not the newer field values (NVML_FI_DEV_CLOCKS_EVENT_REASON_*): their ids moved
# between nvidia-ml-py releases (SW_THERM_SLOWDOWN is 251 in older ones, 269 in 13.615, where
# 251 is a power-smoothing flag), so a pynvml older than the driver would read another field.
VIOLATION_POLICIES = {"power": "NVML_PERF_POLICY_POWER", "thermal": "NVML_PERF_POLICY_THERMAL"}

# The driver's sample buffers, by our label: (pynvml sampling type, value -> our unit). Clock
# samples are in MHz, power samples in mW (nvmlDeviceGetSamples: "unsigned int" values).
SAMPLE_KINDS = {
    "sm_clock_mhz": ("NVML_PROCESSOR_CLK_SAMPLES", 1.0),
    "mem_clock_mhz": ("NVML_MEMORY_CLK_SAMPLES", 1.0),
    "power_w": ("NVML_TOTAL_POWER_SAMPLES", 1e-3),
}
# nvmlValue_t's member for each nvmlValueType_t, by pynvml constant name.
_VALUE_MEMBERS = (
    ("NVML_VALUE_TYPE_DOUBLE", "dVal"),
    ("NVML_VALUE_TYPE_UNSIGNED_INT", "uiVal"),
    ("NVML_VALUE_TYPE_UNSIGNED_LONG", "ulVal"),
    ("NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", "ullVal"),
    ("NVML_VALUE_TYPE_SIGNED_LONG_LONG", "sllVal"),
    ("NVML_VALUE_TYPE_SIGNED_INT", "siVal"),
    ("NVML_VALUE_TYPE_UNSIGNED_SHORT", "usVal"),
)
# pynvml's NVMLError carries the nvmlReturn_t as `.value`; NOT_FOUND (6) from
# nvmlDeviceGetSamples means "no sample newer than the timestamp", not "unsupported".
_NVML_ERROR_NOT_FOUND = 6

T = TypeVar("T")


@dataclass(frozen=True)
class Sample:
    """One of the driver's buffered samples: its CPU timestamp (us) and value in our unit."""

    timestamp_us: int
    value: float


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
        # The "Throttle" getter is deprecated for the "Event" one (pynvml: removed in CUDA 14);
        # both return the same bits.
        getter = getattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            self._nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if getter is None:
            return None
        mask = self._query(lambda: getter(self._handle))
        if mask is None:
            return None
        return throttle_names(self._nvml, int(mask))

    def violation_s(self, policy: str) -> float | None:
        """Seconds the clocks were held below the application clocks by `policy` ("power",
        "thermal": `VIOLATION_POLICIES`) since the driver loaded; None when unsupported."""
        constant = getattr(self._nvml, VIOLATION_POLICIES[policy], None)
        if constant is None:
            return None
        status = self._query(
            lambda: self._nvml.nvmlDeviceGetViolationStatus(self._handle, constant)
        )
        return int(status.violationTime) / 1e9 if status is not None else None

    def samples(self, kind: str, since_us: int = 0) -> list[Sample] | None:
        """The driver's buffered samples of `kind` (`SAMPLE_KINDS`) newer than `since_us` (a
        timestamp of an earlier sample; 0: all the buffer holds), oldest first; [] when there
        is none newer, None when this GPU or driver keeps no such samples."""
        constant, scale = SAMPLE_KINDS[kind]
        sampling = getattr(self._nvml, constant, None)
        if sampling is None:
            return None
        try:
            value_type, raw = self._nvml.nvmlDeviceGetSamples(self._handle, sampling, since_us)
        except Exception as error:  # NotFound: nothing newer; anything else: unsupported
            return [] if getattr(error, "value", None) == _NVML_ERROR_NOT_FOUND else None
        member = _value_member(self._nvml, int(value_type))
        if member is None:
            return None
        found = [
            Sample(int(s.timeStamp), float(getattr(s.sampleValue, member)) * scale) for s in raw
        ]
        return sorted(found, key=lambda s: s.timestamp_us)

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


def _value_member(nvml: Any, value_type: int) -> str | None:
    # The union member a sample's nvmlValueType_t names; None for a type this pynvml lacks.
    for constant, member in _VALUE_MEMBERS:
        if getattr(nvml, constant, None) == value_type:
            return member
    return None


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
