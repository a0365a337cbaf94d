"""The slowdown knob of calibration runs: `PHASEBENCH_CALIBRATION_SLOWDOWN`.

`PHASEBENCH_CALIBRATION_SLOWDOWN=0.05` makes every forward call of the suite's model take 5 %
longer: after a device sync the wrapper busy-waits 0.05 x the call's own synchronized duration,
inside the benchmark's synchronized timed region. Prefill, each decode step and whole
generations therefore slow by (about) that fraction; what the harness does around the forward
(argmax, id copies) is not slowed, so the realised change is a little smaller, and the
calibration reports it. The variable is read here only (`slowdown_from_env`,
`maybe_inject_slowdown`, `extra_info`); every benchmark of such a run records
`extra_info.calibration_slowdown`. Set to `0`, the wrapper runs with no wait, so A/A runs time
exactly the code path the slowed runs time. In A/B mode it is set per side (`--head-env`).

The calibration itself lives next to this module: `calibration_run` (history mode, `python -m
benchmarks.harness.calibration`), `calibration_ab` (`--ab`: A/B and history mode from the same
runs) and `calibration_analysis` (the pure analysis of verdict JSON).
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.devices import device_sync, resolve_device
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


def busy_wait(seconds: float, clock: Callable[[], float] = time.perf_counter) -> None:
    """Spin until `clock` has advanced by `seconds` (sleep is too coarse for sub-ms steps)."""
    deadline = clock() + seconds
    while clock() < deadline:
        pass


def slowed(
    forward: Callable[..., Any],
    fraction: float,
    sync: Callable[[], None],
    clock: Callable[[], float] = time.perf_counter,
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
            busy_wait(fraction * elapsed, clock)
        return out

    setattr(wrapper, _MARK, fraction)
    return wrapper


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

    The same model object is returned (an engine built around it sees the wrapper too).
    Calling it again on a wrapped model does nothing, so a fixture may call it per test.
    `storage` (the run's `--benchmark-storage`) is checked with `refuse_real_history`.
    """
    fraction = slowdown_from_env(environ)
    if fraction is None:
        return model
    refuse_real_history(fraction, storage)
    if getattr(model.forward, _MARK, None) is not None:
        return model
    dev = resolve_device(device)
    model.forward = slowed(model.forward, fraction, functools.partial(device_sync, dev))
    return model


def extra_info(environ: Mapping[str, str] | None = None) -> dict[str, float]:
    """`{"calibration_slowdown": fraction}` for a calibration run; `{}` for a real one."""
    fraction = slowdown_from_env(environ)
    return {} if fraction is None else {"calibration_slowdown": fraction}


if __name__ == "__main__":  # `python -m benchmarks.harness.calibration` (nox -s calibrate)
    from benchmarks.harness.calibration_run import main

    raise SystemExit(main())
