"""Profile one owned generation into a Chrome/Perfetto trace, kept apart from timing.

`profile_generation` runs the same prefill/decode state machine the benchmarks time
(`Engine.prefill`, then `Engine.decode_step` N - 1 times) under `torch.profiler.profile` (CPU
activity, plus CUDA activity on a CUDA device), with named ranges `phasebench.prefill` and
`phasebench.decode_step.{i}` (i = 1..N-1), and writes the trace as JSON to a path you can open in
https://ui.perfetto.dev or chrome://tracing. On MPS the capture is also wrapped in
`torch.mps.profiler.profile(mode="interval")`, which emits OS signposts for Instruments'
"Metal System Trace" / os_signpost tools, since MPS GPU work is not a PyTorch profiler activity.

Profiler overhead distorts latencies (seed 000: "the captured timings should not be mixed with
clean latency measurements"), so this function deliberately returns *no timings*: only where the
trace is and which ranges it holds. Nothing here is written to benchmark history.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from benchmarks.harness.device.devices import device_sync
from benchmarks.harness.engine import Engine
from benchmarks.harness.errors import EngineError

PREFILL_RANGE = "phasebench.prefill"
DECODE_RANGE = "phasebench.decode_step.{i}"


@dataclass(frozen=True)
class ProfileArtifact:
    """Where a profile went and what it holds; deliberately no durations."""

    trace_path: Path
    ranges: tuple[str, ...]  # the named ranges, in order
    activities: tuple[str, ...]  # "cpu", "cuda"
    mps_signposts: bool  # True when torch.mps.profiler signposts were emitted too


def profile_generation(
    model: Any,
    device: torch.device,
    input_ids: torch.Tensor,
    new_tokens: int,
    trace_path: Path,
    *,
    warmup_generations: int = 1,
) -> ProfileArtifact:
    """Profile 1 prefill + (new_tokens - 1) decode steps and export a Chrome JSON trace.

    `warmup_generations` untraced generations run first, so one-time costs (allocator growth,
    kernel selection) do not dominate the trace. Raises EngineError when new_tokens < 1.
    """
    if new_tokens < 1:
        raise EngineError(
            f"new_tokens must be at least 1 to profile (got {new_tokens}); prefill makes token 1."
        )
    engine = Engine(model, device)
    for _ in range(warmup_generations):
        _run(engine, input_ids, new_tokens, label=False)
    device_sync(device)

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    with _mps_signposts(device) as signposts, profile(activities=activities) as prof:
        ranges = _run(engine, input_ids, new_tokens, label=True)
    prof.export_chrome_trace(str(trace_path))
    return ProfileArtifact(
        trace_path=trace_path,
        ranges=ranges,
        activities=tuple(str(a).rsplit(".", 1)[-1].lower() for a in activities),
        mps_signposts=signposts,
    )


def _run(
    engine: Engine, input_ids: torch.Tensor, new_tokens: int, *, label: bool
) -> tuple[str, ...]:
    """The owned loop, each phase in its own named range ending with a device sync."""
    names: list[str] = []
    with _range(PREFILL_RANGE, enabled=label):
        prefill = engine.prefill(input_ids)  # synchronizes inside
    names.append(PREFILL_RANGE)
    token, cache = prefill.next_token, prefill.cache
    prompt_len = int(input_ids.shape[-1])
    for i in range(1, new_tokens):
        name = DECODE_RANGE.format(i=i)
        with _range(name, enabled=label):
            token, cache = engine.decode_step(token, cache, prompt_len + i - 1)
            device_sync(engine.device)  # the range then covers the step's device work
        names.append(name)
    return tuple(names) if label else ()


def _range(name: str, *, enabled: bool) -> contextlib.AbstractContextManager[Any]:
    return record_function(name) if enabled else contextlib.nullcontext()


@contextlib.contextmanager
def _mps_signposts(device: torch.device) -> Iterator[bool]:
    """On MPS, emit interval signposts for Instruments around the capture; elsewhere nothing."""
    if device.type != "mps":
        yield False
        return
    with torch.mps.profiler.profile(mode="interval", wait_until_completed=False):
        yield True
