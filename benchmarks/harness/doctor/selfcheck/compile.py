"""The self-check's compiled-step probe: graph breaks and graph launches per decode step of a
compiled static-cache cell on the installed transformers (issue 30, row 1), through the suite's
own path: `Engine`, `configure_engine` (the cell's one `StaticCache`), `first_calls` (dynamo
reset, first prefill and decode step, one generation), then test_decode's warm round, energy
block (`RoundsMeter.block_for`) and rounds (restore to P, one step at P) inside `TimedWindow`,
as `suite.Rounds.pedantic` runs them.

Graph launches are counted by the backend itself (`LaunchCounter` wraps inductor on CUDA, the
`eager` backend elsewhere: graph breaks are dynamo's, whatever compiles the graphs), so one
launch per step means no break inside the step. The figures the suite records for such a cell
(`compile_graph_breaks`, `compile_timed_frames`, the energy and GPU-state fields, the J/token
field) come from the same functions and are printed on a line of their own.

transformers cannot be switched in a running process: the installed version is checked and a
line says how to check another one.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch._dynamo
import transformers

from benchmarks.harness.device.devices import device_sync
from benchmarks.harness.device.devstate import RoundsMeter
from benchmarks.harness.doctor.findings import Finding, JsonValue, ok, skip
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import build_model, load_model_spec
from benchmarks.harness.records import phase_energy_fields
from benchmarks.harness.runmode.compiled import (
    CompiledInTimedRoundsError,
    TimedWindow,
    first_calls,
)
from benchmarks.harness.runmode.decide import compile_reason, configure_engine

BATCH = 1
PROMPT_LEN = 32
NEW_TOKENS = 8
DECODE_ROUNDS = 5
# The versions CI tests (noxfile.TRANSFORMERS_VERSIONS) and the 4.x that broke graphs (4.57).
OTHER_VERSIONS = ("4.46.3", "4.57.1", "5.24.0")
# Record fields printed from the probe's rounds, by name or by name pattern.
RECORD_FIELDS = ("compile_graph_breaks", "compile_timed_frames", "compile_timed_graph_breaks")
RECORD_PREFIXES = ("energy_", "gpu_throttle")


class LaunchCounter:
    """A torch.compile backend: `inner`'s compiled graphs, every call of one counted."""

    def __init__(self, inner: str) -> None:
        self.inner = inner
        self.launches = 0
        self.graphs = 0

    def __call__(
        self, graph: torch.fx.GraphModule, example_inputs: Sequence[Any]
    ) -> Callable[..., Any]:
        """Compile `graph` with the inner backend; return it wrapped in a counter."""
        compiled = torch._dynamo.lookup_backend(self.inner)(graph, list(example_inputs))
        self.graphs += 1

        def launch(*args: Any) -> Any:
            self.launches += 1
            return compiled(*args)

        return launch


def backend_for(device: torch.device) -> str:
    """inductor on CUDA (what the suite compiles with); `eager` elsewhere (a CPU compile of
    C++ takes minutes; graph breaks are decided before the backend sees the graphs)."""
    return "inductor" if device.type == "cuda" else "eager"


def compile_probe_dtype(device: torch.device) -> torch.dtype:
    """The GPU matrices' dtype on CUDA and MPS; float32 on CPU."""
    return {"cuda": torch.bfloat16, "mps": torch.float16}.get(device.type, torch.float32)


def probe_cell(model: str, device: torch.device, dtype: torch.dtype) -> Cell:
    """The compiled static-cache cell the probe runs (`compile: default`)."""
    name = str(dtype).removeprefix("torch.")
    return Cell(
        model, str(device), name, BATCH, PROMPT_LEN, NEW_TOKENS, 0, DECODE_ROUNDS, 0,
        cache="static", compile="default",
    )  # fmt: skip


def probe_compiled_steps(model_name: str, device: torch.device) -> list[Finding]:
    """Three lines: the compiled steps, the record's fields, the other transformers versions."""
    reason = compile_reason("default", device.type, "static")
    if reason is not None:  # the suite skips compiled cells here too (MPS unless opted in)
        return [skip("selfcheck.compile_steps", reason), other_versions()]
    dtype = compile_probe_dtype(device)
    cell = probe_cell(model_name, device, dtype)
    counter = LaunchCounter(backend_for(device))
    model = build_model(load_model_spec(model_name), device, dtype, seed=cell.seed)
    model.compile(backend=counter)
    engine = Engine(model, device)
    configure_engine(engine, cell)
    vocab = int(model.config.get_text_config().vocab_size)
    prompt = make_prompt(BATCH, PROMPT_LEN, vocab, cell.seed)
    compiled = first_calls(engine, prompt, NEW_TOKENS, cell.compile)
    prefill = engine.prefill(prompt)
    snapshot = engine.snapshot(prefill.cache)

    def restore() -> tuple[torch.Tensor, Any]:  # test_decode's setup and timed call
        return prefill.next_token, engine.restore(snapshot)

    def step(state: tuple[torch.Tensor, Any]) -> Any:
        return engine.decode_step(*state, snapshot.seq_len)

    params = {"batch": BATCH, "prompt_len": PROMPT_LEN, "new_tokens": NEW_TOKENS}
    meter = RoundsMeter(device, params=params)
    info: dict[str, Any] = {"measurement": "decode", "cell_id": cell.id}
    rounds_s: list[float] = []
    error: str | None = None
    launches = 0
    window = TimedWindow(cell.id, cell.compile)
    try:
        with window:  # as `suite.Rounds.pedantic` runs them: warm round, energy block, rounds
            warm_s = _timed(device, lambda: step(restore()))
            meter.block_for(info, step, restore, call_s=warm_s, timer=lambda: _sync_time(device))
            meter.start()
            before = counter.launches
            for _ in range(DECODE_ROUNDS):
                rounds_s.append(_timed(device, functools.partial(step, restore())))
            launches = counter.launches - before
            info.update(meter.stop())
        window.check()
    except CompiledInTimedRoundsError as failed:
        error = str(failed)
    info.update(phase_energy_fields(info, rounds_s, params))
    info.update(compiled)
    info.update(window.extra_info())
    torch._dynamo.reset()
    steps = judge_steps(
        f"{model_name} {cell.dtype} static cache on {device}, {counter.inner} backend, "
        f"transformers {transformers.__version__}",
        compiled,
        launches_per_step=launches / max(len(rounds_s), 1),
        timed=window.extra_info(),
        error=error,
    )
    return [steps, record_fields(info), other_versions()]


def _sync_time(device: torch.device) -> float:
    device_sync(device)
    return time.perf_counter()


def _timed(device: torch.device, call: Callable[[], Any]) -> float:
    start_s = _sync_time(device)
    call()
    return _sync_time(device) - start_s


def judge_steps(
    what: str,
    compiled: Mapping[str, Any],
    *,
    launches_per_step: float,
    timed: Mapping[str, Any],
    error: str | None = None,
) -> Finding:
    """`bad` unless a decode step is one graph, with no break and nothing compiled in rounds."""
    check = "selfcheck.compile_steps"
    breaks = int(compiled.get("compile_graph_breaks", 0))
    timed_frames = int(timed.get("compile_timed_frames", 0))
    data: dict[str, JsonValue] = {
        "compile_graph_breaks": breaks,
        "graph_launches_per_decode_step": launches_per_step,
        "compile_timed_frames": timed_frames,
        "transformers": transformers.__version__,
    }
    text = (
        f"{what}: {breaks} graph break(s), {launches_per_step:g} graph launch(es) per decode "
        f"step, {timed_frames} frame(s) compiled in the rounds"
    )
    if error is not None or timed_frames:
        return Finding(
            check,
            "bad",
            f"{text}: the rounds would time compilation ({error or 'a frame compiled'})",
            "report this line: a guard fails between rounds (TORCH_LOGS=recompiles shows it)",
            data,
        )
    if breaks or launches_per_step != 1:
        return Finding(
            check,
            "bad",
            f"{text}: a compiled step runs as several graphs with eager code (and a sync) "
            "between them, unlike `generate`'s: compiled figures would not be comparable",
            "rerun with TORCH_LOGS=graph_breaks to see where; check that the engine hands "
            "`cache_position` to this transformers' forward (compat.position_kwarg)",
            data,
        )
    return ok(check, f"{text}: one graph per step", **data)


def record_fields(info: Mapping[str, Any]) -> Finding:
    """The fields a suite record of this cell holds, as the probe's rounds produced them."""
    shown = {
        key: value
        for key, value in info.items()
        if key in RECORD_FIELDS or key.startswith(RECORD_PREFIXES) or key.endswith("_j_per_tok")
    }
    data: dict[str, JsonValue] = {k: _json(v) for k, v in shown.items()}
    listed = ", ".join(f"{key} {_short(value)}" for key, value in data.items())
    return ok("selfcheck.record_fields", f"the compiled probe's record fields: {listed}", **data)


def other_versions() -> Finding:
    """The transformers checked here, and the command that checks another one."""
    installed = transformers.__version__
    others = [v for v in OTHER_VERSIONS if v != installed]
    command = f"nox -s doctor -- --self-check --also-transformers {','.join(others)}"
    return Finding(
        "selfcheck.transformers",
        "skip",
        f"graph breaks checked on transformers {installed} only (one version per process); "
        f"not checked here: {', '.join(others)}",
        f"to check the others (each in an overlay environment made once): {command}",
        {"transformers": installed},
    )


def _json(value: Any) -> JsonValue:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "none"
    return str(value)


def _short(value: JsonValue) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
