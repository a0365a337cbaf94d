"""The device's state and energy around one benchmark's timed rounds, as extra_info fields.

`RoundsMeter(device)` is started just before a benchmark's timed rounds and stopped just after
them (`benchmarks.suite.rounds.Rounds`); nothing is read inside the rounds, so the timed path is
untouched. It records:

* **GPU state** (CUDA, through NVML, `nvml.py`): throttle time, clocks and power *during* the
  rounds from what NVML accumulates between two reads at their edges (`gpuwindow.py`), and
  `gpu_power_w_mean` = the energy counter's joules over the energy window / its seconds (a
  true mean). Off CUDA, or without NVML, every `gpu_*` field is None and `gpu_state_reason`
  says why.
* **Energy** (`energy.py`) over one window per benchmark, named by `energy_method`:
  - `block:prepared`, `block:interleaved` (prefill), `block:reused` (decode): `block_for()`
    meters the timed call run `energy_block_calls` times in a row, before the rounds
    (`energyblock.py`): setup outside the metered span where the inputs allow it, else inside
    it and timed (`energy_block_setup_s`); a block that is mostly setup makes no figure.
  - `timed_rounds` (every other measurement): the counter read around the timed rounds, their
    untimed setup included (no per-token figure is made from it).
  `energy_window_j` over `energy_window_s` from the counter named by `energy_source`, with the
  counter's `energy_counter_period_s` and the `energy_counter_updates` the window spans; None
  with `energy_reason` where there is no counter or the window is too short for it
  (`energy.short_window_reason`). `records.phase_energy_fields` makes the joules per token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from benchmarks.harness.device.devices import resolve_device
from benchmarks.harness.device.energy import (
    CumulativeWindow,
    EnergyUnavailable,
    EnergyWindow,
    counter_updates,
    open_energy,
    short_window_reason,
)
from benchmarks.harness.device.energyblock import (
    BLOCK_INPUTS,
    ENERGY_MAX_SETUP_SHARE,
    Block,
    make_block,
    plan_calls,
)
from benchmarks.harness.device.gpuwindow import (
    GPU_FIELDS,
    Edge,
    read_edge,
    unavailable_fields,
    window_fields,
)
from benchmarks.harness.device.nvml import NvmlGpu, NvmlUnavailable, open_gpu

__all__ = ["GPU_FIELDS", "TIMED_ROUNDS", "RoundsMeter", "meter_for"]

TIMED_ROUNDS = "timed_rounds"  # `energy_method` of a window around the rounds, setup included


class RoundsMeter:
    """GPU state and energy around a window (`start()`, rounds, `stop()` -> extra_info fields),
    the energy from a back-to-back block instead where `block()` ran first.

    `params` are the cell's axes; `open_nvml` and `open_counter` are injectable (tests give
    fakes); `clock` times the rounds' window and `sleep` paces the wait for a counter update.
    """

    def __init__(
        self,
        device: torch.device | None,
        *,
        params: Mapping[str, object] | None = None,
        open_nvml: Callable[[int], NvmlGpu | NvmlUnavailable] | None = None,
        open_counter: Callable[..., EnergyWindow | EnergyUnavailable] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._device = device
        self._params = params or {}  # the cell's axes: a decode block's room (`new_tokens`)
        self._open_nvml = open_nvml or open_gpu
        self._open_counter = open_counter or open_energy
        self._clock = clock
        self._sleep = sleep
        self._opened = False
        self._gpu: NvmlGpu | NvmlUnavailable | None = None
        self._energy: EnergyWindow | EnergyUnavailable | None = None
        self._block_fields: dict[str, Any] | None = None
        self._before: Edge | None = None
        self._started_s = 0.0

    def _open(self) -> None:
        """Open NVML (CUDA) and the energy counter, once. Never raises: a counter that fails
        is recorded as unavailable."""
        if self._opened:
            return
        self._opened = True
        device = self._device
        if device is not None and device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            self._gpu = self._open_nvml(index)
        if device is None:
            self._energy = EnergyUnavailable("the benchmark names no device")
            return
        try:
            self._energy = self._open_counter(device.type, gpu=self._gpu)
        except Exception as error:  # a counter must never cost the benchmark its rounds
            self._energy = EnergyUnavailable(f"opening the energy counter failed: {error}")

    def block_for(
        self,
        info: Mapping[str, Any],
        run: Callable[[Any], Any],
        prepare: Callable[[], Any] | None,
        *,
        call_s: float,
        timer: Callable[[], float],
    ) -> None:
        """Meter the energy block of `info`'s measurement (`energyblock.BLOCK_INPUTS`; none for
        the others): `run` and `prepare` are `suite.Rounds`' timed call and its setup, `call_s`
        the warm round's seconds, `timer` the benchmark's synchronizing clock."""
        inputs = BLOCK_INPUTS.get(str(info.get("measurement")))
        if inputs is None:
            return
        calls, limit = plan_calls(inputs, self._params, call_s)
        planned = f"block:{inputs}"
        self.block(lambda: make_block(inputs, run, prepare, calls, timer), timer, planned, limit)

    def block(
        self,
        make: Callable[[], Block],
        timer: Callable[[], float],
        planned: str,
        limit: str | None = None,
    ) -> None:
        """Meter a block (`energyblock.Block`) in place of the rounds.

        `make()` prepares the block's inputs (outside the metered span); it is not called when
        there is no counter. `timer` is the benchmark's synchronizing clock: the device has
        finished the setup before the counter's first read and the body's work before its last.
        A cumulative counter's window begins at one of its updates (`start_on_update`).
        `planned` is the `energy_method` recorded when no block is made (no counter); `limit`
        says what held the block below its planned length, for the reason of a short window.
        """
        self._open()
        energy = self._energy
        if energy is None or isinstance(energy, EnergyUnavailable):
            reason = energy.reason if energy is not None else "the meter was not opened"
            self._block_fields = {
                **_no_reading(planned, reason),
                "energy_block_calls": None,
                "energy_block_setup_s": None,
            }
            return
        block = make()
        timer()  # the inputs' device work (copies, restores) is done: not in the window
        try:
            if isinstance(energy, CumulativeWindow):
                energy.start_on_update(self._clock, self._sleep)
            else:
                energy.start()
        except Exception as error:  # e.g. powermetrics could not be spawned
            reason = f"{energy.source} did not start: {error}"
            self._block_fields = _no_reading(block.method, reason)
            return
        start_s = timer()
        try:
            setup_s = block.body()
        except BaseException:  # the timed call failed: its error, with the counter stopped
            _stop(energy)  # (powermetrics is a process)
            raise
        window_s = timer() - start_s
        fields = _reading_fields(energy, _stop(energy), window_s, block.method)
        fields.update(energy_block_calls=block.calls, energy_block_setup_s=setup_s)
        if setup_s > ENERGY_MAX_SETUP_SHARE * window_s:
            fields.update(energy_window_j=None, energy_source=None)
            fields["energy_reason"] = (
                f"{block.method}: setup took {setup_s:.3f} s of the {window_s:.3f}-s block, over "
                f"{ENERGY_MAX_SETUP_SHARE:.0%}: the block is mostly setup"
            )
        elif limit is not None and fields["energy_window_j"] is None:
            fields["energy_reason"] = f"{fields['energy_reason']} ({limit})"
        self._block_fields = fields

    def start(self) -> None:
        """Open the counters, read the GPU's edge, then (no block) the energy counter (last:
        the rounds follow). Never raises."""
        self._open()
        if isinstance(self._gpu, NvmlGpu):
            self._before = read_edge(self._gpu, with_samples=True)
        energy = self._energy
        if self._block_fields is None and not (
            energy is None or isinstance(energy, EnergyUnavailable)
        ):
            try:
                energy.start()
            except Exception as error:  # e.g. powermetrics could not be spawned
                self._energy = EnergyUnavailable(f"{energy.source} did not start: {error}")
        self._started_s = self._clock()

    def stop(self) -> dict[str, Any]:
        """Read the energy counter (no block), the GPU's edge; close NVML; the fields."""
        window_s = self._clock() - self._started_s
        block = self._block_fields
        fields = dict(block) if block is not None else self._rounds_energy(window_s)
        gpu = self._gpu
        if isinstance(gpu, NvmlGpu) and self._before is not None:
            from_counter = fields["energy_source"] == "nvml:total_energy"
            mean_w = fields["energy_window_j"] / fields["energy_window_s"] if from_counter else None
            fields.update(window_fields(gpu, self._before, window_s, mean_w))
        else:
            reason = gpu.reason if isinstance(gpu, NvmlUnavailable) else "not a CUDA device"
            fields.update(unavailable_fields(reason))
        if isinstance(gpu, NvmlGpu):
            gpu.close()
        return fields

    def _rounds_energy(self, window_s: float) -> dict[str, Any]:
        energy = self._energy
        if energy is None or isinstance(energy, EnergyUnavailable):
            reason = energy.reason if energy is not None else "the meter was not started"
            return _no_reading(TIMED_ROUNDS, reason, window_s)
        return _reading_fields(energy, _stop(energy), window_s, TIMED_ROUNDS)


def _stop(energy: EnergyWindow) -> float | None:
    try:
        return energy.stop()
    except Exception as error:  # a reading must never cost the benchmark its record
        energy.failure = f"{energy.source}: {error}"
        return None


def _no_reading(method: str, reason: str, window_s: float | None = None) -> dict[str, Any]:
    return {
        "energy_method": method,
        "energy_source": None,
        "energy_reason": reason,
        "energy_window_j": None,
        "energy_window_s": window_s,
        "energy_counter_period_s": None,
        "energy_counter_updates": None,
    }


def _reading_fields(
    energy: EnergyWindow, joules: float | None, window_s: float, method: str
) -> dict[str, Any]:
    """The energy fields of one metered window: the joules only where the counter could
    resolve the window (`short_window_reason`) and advanced over it."""
    period_s = energy.update_period_s
    fields = {
        **_no_reading(method, "", window_s),
        "energy_counter_period_s": period_s,
        "energy_counter_updates": counter_updates(window_s, period_s),
    }
    short = short_window_reason(energy.source, window_s, period_s)
    if joules is None:
        fields["energy_reason"] = energy.failure or f"{energy.source}: no reading"
    elif short is not None:
        fields["energy_reason"] = short
    elif joules == 0:  # 0 J would claim the tokens were free
        fields["energy_reason"] = (
            f"{energy.source}: the counter did not advance over {window_s:.3f} s"
        )
    else:
        fields.update(energy_window_j=joules, energy_source=energy.source, energy_reason=None)
    return fields


def meter_for(params: Mapping[str, object]) -> RoundsMeter:
    """A meter for the device a benchmark's params name (`cuda:1`, ...); no device: no readings."""
    spec = params.get("device")
    return RoundsMeter(resolve_device(spec) if isinstance(spec, str) else None, params=params)
