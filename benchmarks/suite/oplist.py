"""The kernels a timed call ran: one untimed, profiled call, its top operators by own time.

A quantized cell slower than its dense cell is only half a finding: the record must say which
kernel ran (compiled int8wo on a CPU runs `aten::_weight_int8pack_mm`, an int8 GEMM; eager int8wo
converts the whole weight to the activation dtype and runs `aten::mm`; CPU int4 runs
`aten::_weight_int4pack_mm_for_cpu`). `top_ops(device, prepare)` profiles a few calls, each
prepared untimed by `prepare()` (`torch.profiler`, CPU activities, and CUDA where the device is
one), and returns the operators with the most own time, each with its share of the calls' own
time and its count per call.

A compiled cell's step must show a compiled region ("Torch-Compiled Region" or a compiled FX
graph): one that shows none ran eager (dynamo gave up on it: a recompile limit, a graph break at
the top), and timing it as compiled would mislabel it; `top_ops(..., compiled=True)` raises then.

`kernel_note(method, device_type, compiled, ops)` says whether the kernel a method is known for on
that device ran (`EXPECTED_KERNELS`), and where the time went when it did not: the record names
the kernel that ran and why a cell is slower than its method promises.

It deliberately does not time anything that is recorded (the profiler's overhead is in these
untimed calls only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.harness.errors import PhasebenchError

TOP = 5
#: Calls profiled together: one call on a loaded host can be one preemption (a 20-ms stall
#: inside a copy reads as 96 % of it); a few average it out.
PROFILED_CALLS = 3
_COMPILED_MARKERS = ("Torch-Compiled Region", "CompiledFxGraph")
# Profiler bookkeeping rows, not kernels.
_NOT_KERNELS = (
    "TorchDynamo Cache Lookup",
    "Pregraph bytecode",
    "## Call CompiledFxGraph",
    "Torch-Compiled Region",
)


#: (method prefix, device type, compiled) -> the operator that method's fast path runs.
EXPECTED_KERNELS: dict[tuple[str, str, bool], str] = {
    ("int8wo", "cpu", True): "aten::_weight_int8pack_mm",  # inductor's int8 weight-only GEMM
    ("int4wo", "cpu", False): "aten::_weight_int4pack_mm_for_cpu",
    ("int4wo", "cpu", True): "aten::_weight_int4pack_mm_for_cpu",
    ("int4wo", "cuda", False): "aten::_weight_int4pack_mm",  # tinygemm
    ("int4wo", "cuda", True): "aten::_weight_int4pack_mm",
    ("nf4", "cpu", False): "bitsandbytes::gemv_4bit",
}
#: What an eager int8wo step does instead (torchao's Int8Tensor weight-only linear).
_EAGER_INT8 = (
    "eager int8wo converts the whole int8 weight to the activation dtype in every call "
    "(aten::_to_copy) before a dense aten::mm; compiled, inductor fuses it into "
    "aten::_weight_int8pack_mm"
)


def kernel_note(
    method: str, device_type: str, compiled: bool, ops: list[dict[str, Any]]
) -> str | None:
    """Whether the kernel `method` is known for on this device ran in the profiled step (and
    its share), or which operators took the time instead; None for a method without one."""
    if method == "int8wo" and device_type == "cpu" and not compiled:
        return _EAGER_INT8
    expected = next(
        (op for (m, d, c), op in EXPECTED_KERNELS.items()
         if method.startswith(m) and d == device_type and c == compiled),
        None,
    )  # fmt: skip
    if expected is None:
        return None
    found = next((o for o in ops if o["op"] == expected), None)
    if found is not None:
        return f"{expected} ran: {found['self_share']:.0%} of the step's own time"
    top = ", ".join(f"{o['op']} {o['self_share']:.0%}" for o in ops[:3]) or "nothing recorded"
    return f"{expected} is not among the step's top operators ({top})"


class RanEagerError(PhasebenchError, AssertionError):
    """A compiled cell's call ran no compiled region: it would be timed as eager."""


def top_ops(
    device: torch.device,
    prepare: Callable[[], Callable[[], Any]],
    *,
    compiled: bool = False,
    calls: int = PROFILED_CALLS,
    top: int = TOP,
) -> list[dict[str, Any]]:
    """`[{"op": name, "self_share": 0..1, "calls": n}, ...]`, most own time first, over
    `calls` profiled calls, each made by `prepare()` outside the profile (module docstring);
    RanEagerError for a `compiled` call that ran eager. `calls` counts are per call."""
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    prepared = [prepare() for _ in range(calls)] if calls > 1 else [prepare()]
    with torch.inference_mode(), profile(activities=activities) as prof:
        for call in prepared:
            call()
    events = prof.key_averages()
    if compiled and not any(any(m in e.key for m in _COMPILED_MARKERS) for e in events):
        raise RanEagerError(
            "a compiled variant's decode step ran no compiled region (dynamo fell back to eager, "
            "e.g. its recompile limit): it would be timed as eager"
        )
    kernels = [e for e in events if not any(e.key.startswith(n) for n in _NOT_KERNELS)]
    cuda = device.type == "cuda"

    def own(event: Any) -> float:
        return float(event.self_device_time_total if cuda else event.self_cpu_time_total)

    total = sum(own(e) for e in kernels) or 1.0
    ranked = sorted(kernels, key=own, reverse=True)[:top]
    return [
        {
            "op": e.key,
            "self_share": round(own(e) / total, 3),
            "calls": int(e.count) // len(prepared),
        }
        for e in ranked
        if own(e) > 0
    ]
