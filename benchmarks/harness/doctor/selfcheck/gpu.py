"""The self-check's counter probes under load: the energy counter's update period and the
throttle (clock-event) time, which only a real device shows (docs/doctor.md, "Self-check").

* **Energy counter** (`energy_counter`): its value is polled in a tight loop while a matmul load
  keeps the device busy (`MatmulLoad`, which never blocks the poll on CUDA); the median gap
  between value changes is the update period. A window read as the difference of two readings
  is off by at most one update, so the smallest window metered to 10 % spans
  `MIN_UPDATES` updates. NVML's total-energy counter on CUDA, the RAPL package counters
  on a Linux CPU where they are readable (`device/rapl.py`), else skipped with the reason.
* **Throttle counters** (`throttle_load`, CUDA): NVML's cumulative clock-event counters (power
  cap, software and hardware thermal slowdown, power brake; nanoseconds) read before and after
  `THROTTLE_LOAD_S` of matmuls. A sample after a sync reads an idle GPU (issue 30, row 3); the
  counters keep what happened during the load.
Reading and judging take the counter and the load as callables: tests drive them with fakes.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.device.devices import device_sync
from benchmarks.harness.device.energy import (  # one update of error over 10 is 10 %
    ENERGY_MIN_COUNTER_UPDATES as MIN_UPDATES,
)
from benchmarks.harness.device.energy import NVML_ENERGY_UPDATE_PERIOD_S, min_window_s
from benchmarks.harness.device.gpuid import nvml_index, torch_cuda_uuid
from benchmarks.harness.device.rapl import (
    POWERCAP_ROOT,
    RAPL_UPDATE_PERIOD_S,
    RaplCounter,
    open_rapl,
)
from benchmarks.harness.doctor.findings import Finding, ok, skip
from benchmarks.harness.doctor.gpu import NvmlUnavailableError, import_pynvml

ENERGY_PROBE_S = 3.0
# The update period the suite assumes per counter (`energy.py`, `rapl.py`: from the literature,
# "the doctor measures it"): its shortest energy window is `energy.min_window_s` of it.
ASSUMED_PERIOD_S = {"nvml:total_energy": NVML_ENERGY_UPDATE_PERIOD_S, "rapl": RAPL_UPDATE_PERIOD_S}
THROTTLE_LOAD_S = 3.0
# NVML field ids by pynvml constant name (ids moved between nvidia-ml-py releases: 251-253 in
# older ones, 269-271 in 13.x, so never by number). Cumulative throttle time in ns (nvml.h:
# "Throttling ... in ns"); the power and thermal policies have the older
# nvmlDeviceGetViolationStatus as a fallback (its `violationTime` is in ns too).
THROTTLE_FIELDS: tuple[tuple[str, str, str | None], ...] = (
    ("sw_power_cap", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP", "NVML_PERF_POLICY_POWER"),
    ("sw_thermal", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", "NVML_PERF_POLICY_THERMAL"),
    ("hw_thermal", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN", None),
    ("hw_power_brake", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN", None),
)
HARD_THROTTLE = ("sw_thermal", "hw_thermal", "hw_power_brake")
"""Slowdowns by heat or the power supply: the clock under load is not the clock at rest."""


# --- the load ---------------------------------------------------------------------------------


class MatmulLoad:
    """Square matmuls on the device. `step()` enqueues more work unless `MAX_IN_FLIGHT` chunks
    are still queued (CUDA events), so a poll loop around it is never blocked by a full launch
    queue; on CPU and MPS it runs one matmul."""

    MAX_IN_FLIGHT = 4
    CHUNK = 4

    def __init__(self, device: torch.device, dtype: torch.dtype, size: int) -> None:
        self._device = device
        self._x = torch.randn(size, size, device=device).to(dtype)
        self._pending: list[Any] = []

    def step(self) -> None:
        """More work if the queue has room (never waits for the device on CUDA)."""
        if self._device.type != "cuda":
            torch.mm(self._x, self._x)
            return
        self._pending = [event for event in self._pending if not event.query()]
        if len(self._pending) >= self.MAX_IN_FLIGHT:
            return
        for _ in range(self.CHUNK):
            torch.mm(self._x, self._x)
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]  # torch 2.13 leaves it untyped
        event.record()
        self._pending.append(event)

    def run_for(self, seconds: float) -> float:
        """Keep the device busy for `seconds`; the seconds it took, synchronized."""
        device_sync(self._device)
        start_s = time.perf_counter()
        while time.perf_counter() - start_s < seconds:
            self.step()
            time.sleep(0.001)
        device_sync(self._device)
        return time.perf_counter() - start_s


def matmul_load(device: torch.device) -> MatmulLoad:
    """A load sized for the device: 8192^2 bf16 on CUDA (ms per matmul), smaller elsewhere."""
    if device.type == "cuda":
        return MatmulLoad(device, torch.bfloat16, 8192)
    return MatmulLoad(device, torch.float32, 1024 if device.type == "mps" else 512)


# --- NVML -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NvmlHandle:
    """pynvml and the handle of torch's CUDA device (matched by UUID, `gpuid.nvml_index`)."""

    nvml: Any
    handle: Any
    nvml_index: int


@contextlib.contextmanager
def open_nvml(
    torch_index: int,
    nvml: Any = None,
    *,
    torch_uuid: Callable[[int], str | None] = torch_cuda_uuid,
) -> Iterator[NvmlHandle]:
    """NVML opened for torch's `cuda:torch_index`; `NvmlUnavailableError` says why not.
    `nvml` (the pynvml module) and `torch_uuid` are injectable for tests."""
    module = nvml if nvml is not None else import_pynvml()
    try:
        module.nvmlInit()
    except Exception as error:  # no driver, or a driver/library mismatch
        raise NvmlUnavailableError(f"nvmlInit failed: {error}") from error
    try:
        found = nvml_index(torch_index, module, torch_uuid=torch_uuid)
        if found is None:
            raise NvmlUnavailableError(f"no NVML GPU matches torch cuda:{torch_index} by UUID")
        yield NvmlHandle(module, module.nvmlDeviceGetHandleByIndex(found), found)
    finally:
        with contextlib.suppress(Exception):  # a failed shutdown leaves nothing to report
            module.nvmlShutdown()


def nvml_energy_j(gpu: NvmlHandle) -> Callable[[], float | None]:
    """NVML's total-energy counter (mJ since the driver loaded; Volta+), in joules."""

    def read() -> float | None:
        try:
            return int(gpu.nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle)) / 1000.0
        except Exception:  # NotSupported before Volta: no reading, not a crash
            return None

    return read


def read_throttle_ns(gpu: NvmlHandle) -> dict[str, int | None]:
    """Each cumulative throttle counter in ns, None where this GPU/driver has none."""
    nv, found = gpu.nvml, {}
    for label, field_name, policy in THROTTLE_FIELDS:
        value = _field_ns(nv, gpu.handle, getattr(nv, field_name, None))
        if value is None and policy is not None and hasattr(nv, policy):
            with contextlib.suppress(Exception):
                status = nv.nvmlDeviceGetViolationStatus(gpu.handle, getattr(nv, policy))
                value = int(status.violationTime)
        found[label] = value
    return found


def _field_ns(nv: Any, handle: Any, field_id: int | None) -> int | None:
    if field_id is None:
        return None
    try:  # one field per call: an id an old driver lacks must not fail the others
        entry = nv.nvmlDeviceGetFieldValues(handle, [field_id])[0]
    except Exception:
        return None
    if int(entry.nvmlReturn) != int(getattr(nv, "NVML_SUCCESS", 0)):
        return None
    return int(entry.value.ullVal)


# --- the energy counter's update period -------------------------------------------------------


@dataclass(frozen=True)
class CounterUpdates:
    """What polling a cumulative counter under load showed."""

    polled_s: float
    reads: int
    failed_reads: int
    changes: int
    period_s: float | None  # the median gap between successive value changes
    went_backwards: bool

    @property
    def min_window_s(self) -> float | None:
        """The shortest window the counter meters to 10 % (`MIN_UPDATES` updates)."""
        return None if self.period_s is None else MIN_UPDATES * self.period_s


def counter_updates(
    read: Callable[[], float | None],
    keep_busy: Callable[[], None],
    duration_s: float,
    *,
    clock: Callable[[], float] = time.perf_counter,
    pause: Callable[[], None] = lambda: time.sleep(0.0002),
) -> CounterUpdates:
    """Poll `read` for `duration_s` while `keep_busy` feeds the load; when did the value change?"""
    start_s = clock()
    last = read()
    reads, failed = 1, int(last is None)
    changed_at: list[float] = []
    backwards = False
    while clock() - start_s < duration_s:
        keep_busy()
        value = read()
        reads += 1
        if value is None:
            failed += 1
            continue
        if last is not None and value != last:
            backwards = backwards or value < last
            changed_at.append(clock())
        last = value
        pause()
    gaps = [later - earlier for earlier, later in itertools.pairwise(changed_at)]
    return CounterUpdates(
        polled_s=clock() - start_s,
        reads=reads,
        failed_reads=failed,
        changes=len(changed_at),
        period_s=statistics.median(gaps) if gaps else None,
        went_backwards=backwards,
    )


def judge_energy_counter(source: str, updates: CounterUpdates) -> Finding:
    """`bad` when the suite's shortest energy window (sized for the period it assumes) spans
    fewer than 10 updates of this counter as measured here."""
    check = "selfcheck.energy_counter"
    data = {
        "energy_source": source,
        "energy_update_period_s": updates.period_s,
        "energy_min_window_s": updates.min_window_s,
        "energy_counter_changes": updates.changes,
        "energy_polled_s": updates.polled_s,
    }
    seen = f"{source}: {updates.changes} change(s) in {updates.polled_s:.1f} s of load"
    if updates.went_backwards:
        return Finding(
            check,
            "warn",
            f"{seen}, and it went backwards: windows across that point read None",
            "rerun; a driver reload or a counter wrap during the run would explain it",
            data,
        )
    if updates.period_s is None or updates.min_window_s is None:
        return Finding(
            check,
            "warn",
            f"{seen} ({updates.failed_reads} failed read(s)): no update period, so energy per "
            "token is not metered here (records None with the reason)",
            "use a GPU/driver with a total-energy counter (Volta+) or readable RAPL",
            data,
        )
    text = (
        f"{seen}: updates every {updates.period_s * 1e3:.1f} ms, so the smallest window it "
        f"meters to 10 % is {updates.min_window_s:.2f} s ({MIN_UPDATES} updates)"
    )
    # Sources: "nvml:total_energy", "rapl:package-0+package-1" (one period for every package).
    assumed = ASSUMED_PERIOD_S.get("rapl" if source.startswith("rapl:") else source)
    if assumed is None:
        return ok(check, text, **data)
    suite_s = data["energy_suite_min_window_s"] = min_window_s(assumed)
    text += f"; the suite assumes {assumed * 1e3:g} ms and meters windows of {suite_s:g} s or more"
    if updates.min_window_s > suite_s:
        return Finding(
            check,
            "bad",
            f"{text}: its shortest windows span fewer than {MIN_UPDATES} updates here, "
            "so their joules per token can be off by more than 10 %",
            f"set the counter's period in benchmarks/harness/device/energy.py or rapl.py to "
            f"{updates.period_s:.3f} s (measured here), or do not compare energy from this machine",
            data,
        )
    return ok(check, text, **data)


OpenGpu = Callable[[int], contextlib.AbstractContextManager[NvmlHandle]]
Load = Callable[[torch.device], MatmulLoad]


def probe_energy_counter(
    device: torch.device,
    duration_s: float = ENERGY_PROBE_S,
    *,
    open_gpu: OpenGpu = open_nvml,
    load_for: Load = matmul_load,
    powercap_root: Path = POWERCAP_ROOT,
) -> Finding:
    """The energy counter's update period on this device (module docstring)."""
    check = "selfcheck.energy_counter"
    if device.type == "cuda":
        try:
            with open_gpu(device.index or 0) as gpu:
                read = nvml_energy_j(gpu)
                if read() is None:
                    return skip(check, "NVML has no total-energy counter on this GPU (pre-Volta)")
                load = load_for(device)
                updates = counter_updates(read, load.step, duration_s)
                device_sync(device)
                return judge_energy_counter("nvml:total_energy", updates)
        except NvmlUnavailableError as error:
            return skip(check, f"{error}: the energy counter is not read")
    if device.type == "cpu":
        counter = open_rapl(powercap_root)
        if not isinstance(counter, RaplCounter):
            return skip(check, f"cpu: {counter.reason}")
        load = load_for(device)
        return judge_energy_counter(
            counter.source, counter_updates(counter.read_j, load.step, duration_s)
        )
    return skip(
        check,
        f"{device.type}: powermetrics (root only) samples at the interval phasebench sets; "
        "there is no hardware counter period to probe",
    )


# --- throttle time under load -----------------------------------------------------------------


def throttled_s(
    before: Mapping[str, int | None], after: Mapping[str, int | None]
) -> dict[str, float | None]:
    """Seconds each counter advanced (None where either reading is missing)."""
    found: dict[str, float | None] = {}
    for label, start in before.items():
        end = after.get(label)
        found[label] = None if start is None or end is None else max(end - start, 0) / 1e9
    return found


def judge_throttle(seconds: Mapping[str, float | None], load_s: float) -> Finding:
    """`bad` for heat or power-brake slowdown under load; `warn` for the software power cap."""
    check = "selfcheck.throttle_load"
    known = {label: value for label, value in seconds.items() if value is not None}
    data: dict[str, float | None] = {f"throttle_{k}_s": v for k, v in seconds.items()}
    data["throttle_load_s"] = load_s
    if not known:
        return skip(check, "NVML reports no clock-event (throttle) counters on this GPU/driver")
    listed = ", ".join(f"{label} {value:.2f} s" for label, value in known.items())
    text = f"throttled during {load_s:.1f} s of matmuls: {listed}"
    hard = [label for label in HARD_THROTTLE if known.get(label)]
    if hard:
        return Finding(
            check,
            "bad",
            f"{text}: slowed by {', '.join(hard)} under load, so timings depend on temperature",
            "check cooling, fans and power cables; lock clocks lower (nvidia-smi -lgc) until the "
            "counters stay at 0",
            data,
        )
    if known.get("sw_power_cap"):
        return Finding(
            check,
            "warn",
            f"{text}: the power cap lowers clocks under GEMM-heavy load (prefill runs below "
            "the boost clock; the round-level clock samples do not show it)",
            "lock the SM clock at one the power limit sustains (sudo nvidia-smi -lgc <MHz>)",
            data,
        )
    return ok(check, text, **data)


def probe_throttle(
    device: torch.device,
    load_s: float = THROTTLE_LOAD_S,
    *,
    open_gpu: OpenGpu = open_nvml,
    load_for: Load = matmul_load,
) -> Finding:
    """The throttle counters around `load_s` of matmuls (CUDA only)."""
    if device.type != "cuda":
        return skip("selfcheck.throttle_load", f"{device.type}: NVML throttle counters are CUDA's")
    try:
        with open_gpu(device.index or 0) as gpu:
            load = load_for(device)
            load.run_for(0.2)  # allocations and kernel selection are not the load
            before = read_throttle_ns(gpu)
            took_s = load.run_for(load_s)
            return judge_throttle(throttled_s(before, read_throttle_ns(gpu)), took_s)
    except NvmlUnavailableError as error:
        return skip("selfcheck.throttle_load", f"{error}: throttle counters are not read")
