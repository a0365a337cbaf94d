"""The slowdown knob of calibration runs: `PHASEBENCH_CALIBRATION_SLOWDOWN`.

`PHASEBENCH_CALIBRATION_SLOWDOWN=0.05` makes every timed round of the suite take 5 % longer,
exactly, in two layers:

* every forward call of the suite's model busy-waits 0.05 x its own synchronized duration
  (`maybe_inject_slowdown`), so what is measured *inside* a round (TTFT, ITL, per-step times)
  moves as a slower model would move it;
* each timed round (`maybe_slow_region`, wrapping `Rounds`' target) then tops the round up to
  1.05 x its unslowed duration: what the harness does around the forward (cache set-up, argmax,
  id copies) is slowed too, so the realised change of `prefill_s`, `decode_step_s`, `e2e_s` is
  the injected one, not the forward's share of it (for tiny models that share is about half).

A compiled model's forward is not wrapped (Dynamo would trace the wrapper's clock reads and
break the graph); its rounds are slowed by the top-up alone. The variable is read here only
(`slowdown_from_env`, `maybe_inject_slowdown`, `maybe_slow_region`, `extra_info`); every
benchmark of such a run records `extra_info.calibration_slowdown`. Set to `0`, both layers run
with no wait, so A/A runs time exactly the code path the slowed runs time. In A/B mode it is
set per side (`--head-env`).

The calibration itself lives next to this module: `run` (history mode), `ab` (`--ab`: A/B and
history mode from the same runs), `analysis` (the pure analysis of verdict JSON) and `cli`
(`python -m benchmarks.calibration`).
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.device.devices import device_sync, resolve_device
from benchmarks.harness.errors import PhasebenchError

ENV_VAR = "PHASEBENCH_CALIBRATION_SLOWDOWN"
_MARK = "_phasebench_calibration_slowdown"  # set on the wrapper: makes wrapping idempotent


class CalibrationError(PhasebenchError):
    """A calibration input (the slowdown variable, a CLI option) or run is invalid."""


# --- the slowdown knob ----------------------------------------------------------------------------


def parse_slowdown(text: str, *, source: str = ENV_VAR) -> float:
    """'0.05' or '5%' -> 0.05; CalibrationError naming `source` unless 0 <= value <= 1."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:  # also refuses nan and inf
        raise CalibrationError(
            f"{source}={text!r} is not a slowdown fraction: use a number from 0 to 1 "
            "(0.05 or 5% slows every forward by 5 %), or unset it"
        )
    return value


def slowdown_from_env(environ: Mapping[str, str] | None = None) -> float | None:
    """The injected slowdown fraction, or None when the variable is unset or empty."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_VAR)
    if raw is None or not raw.strip():
        return None
    return parse_slowdown(raw)


def busy_wait(seconds: float, clock: Callable[[], float] = time.perf_counter) -> float:
    """Spin until `clock` has advanced by `seconds` (sleep is too coarse for sub-ms steps).

    Returns the time it actually spun, by `clock`: a preempted wait overshoots."""
    started = clock()
    deadline = started + seconds
    now = started
    while now < deadline:
        now = clock()
    return now - started


def _no_sync() -> None:
    pass


@dataclass
class Ledger:
    """What the forward wrappers of this process have waited so far, and the device's sync.

    The round top-up (`slowed_region`) subtracts the waits spent inside its round, so a round
    is slowed by the fraction once, not once per layer.
    """

    spent_s: float = 0.0
    #: Every wait of both layers, as spun (`busy_wait`'s return): the suite records the share
    #: of it inside each benchmark's timed rounds (`waited_extra_info`), a check that does not
    #: depend on how loaded the machine was when other runs were made.
    waited_s: float = 0.0
    sync: Callable[[], None] = _no_sync


LEDGER = Ledger()


def slowed(
    forward: Callable[..., Any],
    fraction: float,
    sync: Callable[[], None],
    clock: Callable[[], float] = time.perf_counter,
    ledger: Ledger = LEDGER,
) -> Callable[..., Any]:
    """`forward`, followed by a busy-wait of `fraction` x its own synchronized duration."""

    @functools.wraps(forward)  # keeps the signature: compat.cache_kwarg inspects it
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sync()
        started = clock()
        out = forward(*args, **kwargs)
        sync()  # the forward's kernels are done: its duration is real, not queued work
        elapsed = clock() - started  # read at 0 too: A/A runs time the same code path
        if fraction > 0.0:
            ledger.spent_s += fraction * elapsed
            ledger.waited_s += busy_wait(fraction * elapsed, clock)
        return out

    setattr(wrapper, _MARK, fraction)
    return wrapper


def slowed_region(
    target: Callable[[], Any],
    fraction: float,
    sync: Callable[[], None],
    clock: Callable[[], float] = time.perf_counter,
    ledger: Ledger = LEDGER,
) -> Callable[[], Any]:
    """`target` (one timed round) topped up to (1 + `fraction`) x its unslowed duration.

    The forward waits already spent inside the round count towards it: a round of duration
    `d` with inner waits `w` (unslowed duration `d - w`) waits `fraction * (d - w) - w` more.
    """

    def region() -> Any:
        before = ledger.spent_s
        started = clock()
        out = target()
        sync()  # queued device work belongs to the round's duration
        elapsed = clock() - started
        inner = ledger.spent_s - before
        if fraction > 0.0:
            ledger.waited_s += busy_wait(max(0.0, fraction * (elapsed - inner) - inner), clock)
        return out

    return region


def maybe_slow_region(
    target: Callable[[], Any], environ: Mapping[str, str] | None = None
) -> Callable[[], Any]:
    """`slowed_region(target)` when the slowdown variable is set (0 included); else `target`."""
    fraction = slowdown_from_env(environ)
    if fraction is None:
        return target
    return slowed_region(target, fraction, LEDGER.sync)


def refuse_real_history(fraction: float, storage: str | None) -> None:
    """CalibrationError when a calibration run would save into a `.benchmarks/` folder.

    `storage` is pytest-benchmark's `--benchmark-storage` (`file://./.benchmarks` by default).
    Slowed or A/A-labelled runs must never become the history real runs are judged against.
    """
    if storage is None:
        return
    path = storage.removeprefix("file://")
    if ".benchmarks" in Path(path).parts:
        raise CalibrationError(
            f"{ENV_VAR}={fraction:g} is set but history goes to {storage}: calibration runs must "
            "never become real history; unset the variable, or save elsewhere with "
            "--benchmark-storage=file://out/calibrate/history (nox -s calibrate does)"
        )


def maybe_inject_slowdown(
    model: torch.nn.Module,
    device: torch.device | str,
    *,
    storage: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> torch.nn.Module:
    """Wrap `model.forward` in place when the slowdown variable is set; else do nothing.

    It also points the round top-up (`maybe_slow_region`) at `device`'s sync.

    The same model object is returned (an engine built around it sees the wrapper too).
    Calling it again on a wrapped model does nothing, so a fixture may call it per test.
    `storage` (the run's `--benchmark-storage`) is checked with `refuse_real_history`.
    """
    fraction = slowdown_from_env(environ)
    if fraction is None:
        return model
    refuse_real_history(fraction, storage)
    sync = functools.partial(device_sync, resolve_device(device))
    LEDGER.sync = sync  # the round top-up syncs the device the rounds run on
    if getattr(model.forward, _MARK, None) is not None:
        return model
    if getattr(model, "_compiled_call_impl", None) is not None:
        return model  # nn.Module.compile traces self.forward: the top-up alone slows it
    model.forward = slowed(model.forward, fraction, sync)
    return model


def waited_extra_info(
    before_s: float, environ: Mapping[str, str] | None = None, ledger: Ledger = LEDGER
) -> dict[str, float]:
    """`{"calibration_waited_s": waits since before_s}` in a calibration run; `{}` in a real one.

    Called around a benchmark's timed rounds: 0 in an A/A run (no wait spins at 0), and about
    `fraction / (1 + fraction)` of the rounds' total in a slowed one.
    """
    if slowdown_from_env(environ) is None:
        return {}
    return {"calibration_waited_s": ledger.waited_s - before_s}


def extra_info(environ: Mapping[str, str] | None = None) -> dict[str, float]:
    """`{"calibration_slowdown": fraction}` for a calibration run; `{}` for a real one."""
    fraction = slowdown_from_env(environ)
    return {} if fraction is None else {"calibration_slowdown": fraction}
