"""A fake pynvml: GPUs with UUIDs, clocks, throttle bits, power and an energy counter, per GPU.

Every fake pynvml of the tests derives from `PynvmlFake` (or is made by `fake_module`), which
holds it to the installed nvidia-ml-py's own names: a fake cannot define an `nvml*` / `NVML_*`
name the real module lacks (class creation fails), and the code under test cannot read one
from it (`UnknownNvmlName`, a BaseException, so the code's `except Exception` cannot swallow
it). A fake therefore cannot share a wrong name with the code, as the doctor's once did
(`nvmlDeviceGetEnforcedPowerManagementLimit` for `nvmlDeviceGetEnforcedPowerLimit`).

Each GPU's readings are plain attributes a test changes between calls (the energy counter
advances as the "rounds" run); a reading set to None raises like NVML's NotSupported. The
cumulative violation counters (ns, by perf policy) and the driver's sample buffers (by sampling
type: (timestamp_us, value) pairs, as nvmlDeviceGetSamples returns them) are attributes too.
"""

# The fake mirrors pynvml's own names (mixedCase functions and constants), which the code calls.
# ruff: noqa: N802, N815

from __future__ import annotations

import ctypes
import functools
import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

# The names pynvml exports (functions, constants) or its result structs carry (`nvmlReturn`).
NVML_NAME = re.compile(r"nvml[A-Z]\w*|NVML_[A-Z0-9_]+")


@functools.cache
def _struct_fields() -> frozenset[str]:
    fields: set[str] = set()
    for value in vars(pynvml).values():
        if isinstance(value, type) and issubclass(value, ctypes.Structure | ctypes.Union):
            fields.update(name for name, *_ in getattr(value, "_fields_", ()))
    return frozenset(fields)


def real_nvml_name(name: str) -> bool:
    """Whether the installed pynvml has `name`: a module attribute or a result struct's field."""
    return hasattr(pynvml, name) or name in _struct_fields()


class UnknownNvmlName(BaseException):
    """The code under test read an NVML name the real pynvml does not have."""


class PynvmlFake:
    """Base of every fake pynvml module: only the real module's names (module docstring)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        wrong = sorted(n for n in vars(cls) if NVML_NAME.fullmatch(n) and not real_nvml_name(n))
        if wrong:
            raise TypeError(f"{cls.__name__} fakes names pynvml does not have: {wrong}")

    def __getattr__(self, name: str) -> Any:
        if NVML_NAME.fullmatch(name) and not real_nvml_name(name):
            raise UnknownNvmlName(f"pynvml has no {name!r}: the code calls a name it lacks")
        raise AttributeError(name)


class _Namespace(PynvmlFake):
    pass


def fake_module(**attributes: Any) -> Any:
    """A fake pynvml with exactly these attributes (`PynvmlFake`'s rules)."""
    wrong = sorted(n for n in attributes if NVML_NAME.fullmatch(n) and not real_nvml_name(n))
    if wrong:
        raise TypeError(f"fake pynvml names pynvml does not have: {wrong}")
    module = _Namespace()
    vars(module).update(attributes)
    return module


NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6


class NVMLError(Exception):
    """What pynvml raises: its nvmlReturn_t as `.value` (NotSupported unless told)."""

    def __init__(self, message: str, value: int = NVML_ERROR_NOT_SUPPORTED) -> None:
        super().__init__(message)
        self.value = value


@dataclass
class FakeGpu:
    uuid: str
    sm_mhz: int | None = 1980
    mem_mhz: int | None = 2619
    max_sm_mhz: int | None = 1980
    max_mem_mhz: int | None = 2619
    throttle_mask: int | None = 0
    power_mw: int | None = 350_000
    power_limit_mw: int | None = 700_000
    energy_mj: int | None = 1_000_000  # total since the driver loaded
    # nvmlDeviceGetViolationStatus by perf policy (0 power, 1 thermal): ns since the driver
    # loaded; None: NotSupported.
    violation_ns: dict[int, int | None] = field(default_factory=lambda: {0: 0, 1: 0})
    # nvmlDeviceGetSamples' buffers by sampling type: absent = empty, None = NotSupported.
    samples: dict[int, list[tuple[int, int]] | None] = field(default_factory=dict)


@dataclass
class FakeNvml(PynvmlFake):
    gpus: list[FakeGpu]
    fail_init: bool = False
    inits: int = 0
    shutdowns: int = 0
    calls: list[str] = field(default_factory=list)

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1
    NVML_TOTAL_POWER_SAMPLES = 0
    NVML_PROCESSOR_CLK_SAMPLES = 5
    NVML_MEMORY_CLK_SAMPLES = 6
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    nvmlClocksThrottleReasonGpuIdle = 0x1
    nvmlClocksThrottleReasonApplicationsClocksSetting = 0x2
    nvmlClocksThrottleReasonSwPowerCap = 0x4
    nvmlClocksThrottleReasonHwSlowdown = 0x8
    nvmlClocksThrottleReasonSyncBoost = 0x10
    nvmlClocksThrottleReasonSwThermalSlowdown = 0x20
    nvmlClocksThrottleReasonHwThermalSlowdown = 0x40
    nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80
    nvmlClocksThrottleReasonDisplayClockSetting = 0x100

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError("NVML_ERROR_DRIVER_NOT_LOADED")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return gpu.uuid

    @staticmethod
    def _value(value: Any) -> Any:
        if value is None:
            raise NVMLError("NVML_ERROR_NOT_SUPPORTED")
        return value

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, clock: int) -> int:
        return self._value(gpu.sm_mhz if clock == self.NVML_CLOCK_SM else gpu.mem_mhz)

    def nvmlDeviceGetMaxClockInfo(self, gpu: FakeGpu, clock: int) -> int:
        return self._value(gpu.max_sm_mhz if clock == self.NVML_CLOCK_SM else gpu.max_mem_mhz)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: FakeGpu) -> int:
        return self._value(gpu.throttle_mask)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        return self._value(gpu.power_mw)

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: FakeGpu) -> int:
        return self._value(gpu.power_limit_mw)

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        self.calls.append("energy")
        return self._value(gpu.energy_mj)

    def nvmlDeviceGetViolationStatus(self, gpu: FakeGpu, policy: int) -> SimpleNamespace:
        self.calls.append("violation")
        return SimpleNamespace(referenceTime=0, violationTime=self._value(gpu.violation_ns[policy]))

    def nvmlDeviceGetSamples(
        self, gpu: FakeGpu, sampling: int, since_us: int
    ) -> tuple[int, list[SimpleNamespace]]:
        self.calls.append("samples")
        buffered = self._value(gpu.samples.get(sampling, []))
        newer = [(ts, v) for ts, v in buffered if ts > since_us]
        if not newer:
            raise NVMLError("NVML_ERROR_NOT_FOUND", NVML_ERROR_NOT_FOUND)
        values = [
            SimpleNamespace(timeStamp=ts, sampleValue=SimpleNamespace(uiVal=v)) for ts, v in newer
        ]
        return self.NVML_VALUE_TYPE_UNSIGNED_INT, values


UUIDS = ("GPU-aaaa0000", "GPU-bbbb1111", "GPU-cccc2222")


def three_gpus() -> FakeNvml:
    """NVML's view of a 3-GPU box (PCI order), each GPU with distinct readings."""
    return FakeNvml([FakeGpu(uuid, sm_mhz=1000 + 100 * i) for i, uuid in enumerate(UUIDS)])


def torch_sees(*nvml_positions: int) -> Any:
    """torch's UUIDs after CUDA_VISIBLE_DEVICES picked these NVML GPUs, in this order."""
    visible = [UUIDS[i].lower().removeprefix("gpu-") for i in nvml_positions]
    return lambda index: visible[index] if index < len(visible) else None
