"""Every quantized variant of one model timed in interleaved rounds: ratios that hold on a
drifting host.

A quantized cell's speed-up is a ratio to its dense cell, and the two were timed minutes apart:
on a host whose speed drifts +-25 % over minutes, compiled int8wo read 0.95x, 1.61x and 1.39x in
three runs of one matrix. Here the cells of one *comparison group* (everything but `quant`,
`kv_quant` and the cache's group size and residual: one model, device, dtype, batch, P, N,
attention, cache and compile mode) are built side by side and timed in rounds that take turns,
as `nox -s ab` interleaves two stacks: round r times every variant once, prefill then decode,
in a fixed cyclic order (rotated by a random start per group, so no variant is always first),
so round r of a variant and round r of the dense cell are seconds apart at most and what the
host did in between moves both. The ratio and its interval come from those pairs
(`reports.analysis.speedup`: paired log-ratios, Yuen's trimmed mean, `paired`'s statistics).

* `comparison_key(cell)`, `is_dense(cell)`: the grouping and the reference.
* `time_group(cells, ...)`: build each variant (`modelcache.build_loaded`; accuracy measured
  there when no earlier build of the run measured it), warm it (one untimed generation of
  `WARM_TOKENS`: every shape compiled for a compiled cell; one untimed round of each timed
  call), then
  `pairs` interleaved rounds inside one `TimedWindow` (a recompilation fails the group) with
  dynamo's recompile limit raised for the group (its variants share one code object: the
  default 8 entries would send the ninth graph to eager, silently), then one profiled decode
  step per variant (untimed: the ops that ran, `top_ops`; a compiled variant whose step ran no
  compiled region fails). The models are dropped when the group is timed; only figures stay.

Each round's call is bracketed by the suite's synchronizing timer, its inputs prepared untimed
(`Rounds`' contract): the prompt copied to the device and a fresh start cache for a prefill, the
cache restored to P positions for a decode step. Peak memory is not recorded here (every
variant is resident): the per-cell modules record it with one model held.

It deliberately does not write records (`benchmarks/test_interleaved.py`) or compute ratios.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch._dynamo

from benchmarks.harness.cache.kv import kv_bytes_per_token
from benchmarks.harness.device.devices import device_sync
from benchmarks.harness.device.memory import release_cached_memory
from benchmarks.harness.device.synctimer import synced_perf_counter
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.matrix.cells import KV_QUANT_SETTINGS, Cell
from benchmarks.harness.modelcache import Loaded, build_loaded, quant_fields
from benchmarks.harness.roofline.traffic import decode_step_bytes
from benchmarks.harness.runmode.compiled import TimedWindow, cuda_graphs_kept, uses_cuda_graphs
from benchmarks.harness.runmode.decide import configure_engine
from benchmarks.harness.runmode.kvlayout import analytic_layout, kv_quant_fields
from benchmarks.suite.oplist import kernel_note, top_ops

#: The fewest interleaved rounds per variant: a ratio's interval from fewer pairs is too wide to
#: tell 5 % apart on this project's 2-core development host.
MIN_PAIRS = 16
MAX_PAIRS = 200
#: Entries dynamo may keep per code object while a group runs: two graphs (prefill, decode) per
#: variant and their guards' variants, with room to spare.
RECOMPILE_LIMIT_PER_VARIANT = 4
#: Tokens of a variant's warm-up generation: the timed calls are a prefill and one decode step
#: at P, and a dynamic cache's length-dependent graph compiles within a few steps.
WARM_TOKENS = 8
_GROUP_AXES = ("quant", "kv_quant", *KV_QUANT_SETTINGS)


def comparison_key(cell: Cell) -> tuple[tuple[str, Any], ...]:
    """The cell's axes but its quantization (`quant`, `kv_quant`, the cache's settings): cells
    with the same key are variants of one comparison (the report's quantization tables group the
    same way)."""
    return tuple(sorted((k, v) for k, v in cell.axes().items() if k not in _GROUP_AXES))


def is_dense(cell: Cell) -> bool:
    """The group's reference: neither weights nor KV cache quantized."""
    return not cell.quantized


@dataclass
class VariantTiming:
    """One variant's interleaved rounds and what its records need besides them."""

    cell: Cell
    prefill_s: list[float] = field(default_factory=list)
    decode_s: list[float] = field(default_factory=list)
    build_s: float = 0.0
    record: dict[str, Any] = field(default_factory=dict)  # weights, quant fields, decode bytes
    top_ops: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # this variant failed (build, warmup); the others went on


@dataclass
class GroupTiming:
    """A comparison group's interleaved rounds: per variant (by cell id), in timed order."""

    variants: dict[str, VariantTiming]
    order: list[str]
    dense_id: str | None
    pairs: int
    wall_s: float = 0.0
    error: str | None = None  # the interleaved rounds failed: every record fails with it


@dataclass
class _Variant:
    timing: VariantTiming
    loaded: Loaded  # the build (shared by the variants of one build key)
    engine: Engine  # this variant's own: its own start cache
    prompt: torch.Tensor
    snapshot: Any = None
    token: Any = None


def pairs_for(cells: Sequence[Cell]) -> int:
    """Interleaved rounds per variant: the matrix's `rounds`, at least `MIN_PAIRS`, at most
    `MAX_PAIRS`. `min_timed_s` is not applied: it makes one-model rounds span the host's
    seconds-scale level, which pairing cancels; at 16 pairs the pairs' own error (0.6-0.8 % on
    the development VM) is already a fraction of the run-level term (`reports.analysis.speedup`,
    3 %), so more pairs would buy little for their time."""
    return min(max(MIN_PAIRS, *(c.rounds for c in cells)), MAX_PAIRS)


def time_group(
    cells: Sequence[Cell],
    models_dir: Path,
    progress: Callable[[str], None],
    measured: dict[str, dict[str, Any]],
    rng: random.Random | None = None,
) -> GroupTiming:
    """Build, warm and time every cell of one comparison group in interleaved rounds (module
    docstring). `measured`: quant fields already recorded for a cell id in this run (its
    accuracy is not measured twice)."""
    started = time.perf_counter()
    torch._dynamo.reset()  # earlier cells' graphs go; this group compiles its own
    variants: list[_Variant] = []
    failed: dict[str, VariantTiming] = {}
    builds: dict[tuple[str, ...], Loaded] = {}
    limit = max(8, RECOMPILE_LIMIT_PER_VARIANT * len(cells))
    with torch._dynamo.config.patch(recompile_limit=limit):
        for cell in cells:
            timing = VariantTiming(cell)
            try:
                if cell.build_key not in builds:
                    # One build per build key (a quantized cache shares the dense weights);
                    # accuracy measured for its quantized cells no earlier build measured.
                    sharing = [c for c in cells if c.build_key == cell.build_key]
                    checked = [c for c in sharing if c.quantized and c.id not in measured]
                    builds[cell.build_key] = build_loaded(cell, models_dir, progress, checked)
                variants.append(_prepared(cell, builds[cell.build_key], measured, timing))
            except Exception as error:  # recorded per variant; the group goes on
                timing.error = f"{type(error).__name__}: {error}"
                failed[cell.id] = timing
                progress(f"{cell.id}: interleaved: could not build or warm it: {timing.error}")
        order = [v.timing.cell.id for v in variants]
        start = (rng or random.Random()).randrange(len(order)) if order else 0
        variants = variants[start:] + variants[:start]
        dense = next((v.timing.cell.id for v in variants if is_dense(v.timing.cell)), None)
        pairs = pairs_for(cells)
        group = GroupTiming(
            variants={v.timing.cell.id: v.timing for v in variants} | failed,
            order=[v.timing.cell.id for v in variants],
            dense_id=dense,
            pairs=pairs,
        )
        if variants:
            progress(
                f"interleaved: {len(variants)} variant(s) x {pairs} round(s), prefill and decode, "
                f"in turn: {', '.join(group.order)}"
            )
            try:
                _interleaved_rounds(variants, pairs)
                for variant in variants:
                    compiled = variant.timing.cell.compile not in (None, "none")
                    cell = variant.timing.cell
                    ops = top_ops(
                        variant.loaded.device, lambda v=variant: _decode_call(v), compiled=compiled
                    )
                    variant.timing.top_ops = ops
                    note = kernel_note(cell.weight_quant, variant.loaded.device.type, compiled, ops)
                    if note is not None:
                        variant.timing.record["decode_kernel_note"] = note
            except Exception as error:
                group.error = f"{type(error).__name__}: {error}"
    device = variants[0].loaded.device if variants else None
    variants.clear()  # the models go now: the records need only the figures
    builds.clear()
    if device is not None:
        release_cached_memory(device)
    group.wall_s = time.perf_counter() - started
    return group


def _prepared(
    cell: Cell, loaded: Loaded, measured: dict[str, dict[str, Any]], timing: VariantTiming
) -> _Variant:
    """One variant on its build: its own engine pointed at its own start cache, warmed, its
    decode snapshot taken, and its record fields (weights, quant and accuracy, decode bytes)."""
    engine = Engine(loaded.model, loaded.device)
    configure_engine(engine, cell)
    timing.build_s = loaded.build_s
    vocab = int(loaded.config.get_text_config().vocab_size)
    prompt = make_prompt(cell.batch, cell.prompt_len, vocab, cell.seed)
    variant = _Variant(timing, loaded, engine, prompt)
    with torch.inference_mode():
        # Every shape the timed calls use (a compiled cell compiles them here), then one untimed
        # round of each timed call.
        engine.client_generate(prompt, min(cell.new_tokens, WARM_TOKENS))
        prefill = engine.prefill(prompt)
        variant.snapshot = engine.snapshot(prefill.cache)
        variant.token = prefill.next_token
        del prefill
        _prefill_call(variant)()
        _decode_call(variant)()
    fields = measured.get(cell.id) or quant_fields(cell, loaded)
    kv_total = None
    if cell.kv_quantized:

        def kv_total(positions: int) -> int:
            layout = analytic_layout(cell, loaded.config, dtype=loaded.dtype, seq_len=positions)
            return layout.total_bytes

    timing.record = {
        **loaded.weights_fields(),
        **fields,
        "kv_bytes_per_token": kv_bytes_per_token(
            loaded.config, dtype=loaded.dtype, batch=cell.batch
        ),
        **kv_quant_fields(cell, loaded.config, loaded.dtype),
        "decode_bytes": decode_step_bytes(
            loaded.model, batch=cell.batch, context_len=cell.prompt_len, kv_total=kv_total
        ).total_bytes,
    }
    return variant


def _prefill_call(variant: _Variant) -> Callable[[], Any]:
    """Prepare untimed (prompt on the device, a fresh start cache), return the timed call."""
    engine, cell = variant.engine, variant.timing.cell
    ids = variant.prompt.to(variant.loaded.device)
    cache = engine.start_cache_for(cell.batch)
    return lambda: engine.prefill_forward(ids, cache)


def _decode_call(variant: _Variant) -> Callable[[], Any]:
    """Prepare untimed (the cache restored to P positions), return the timed call."""
    engine = variant.engine
    cache = engine.restore(variant.snapshot)
    token, seq_len = variant.token, variant.snapshot.seq_len
    return lambda: engine.decode_step(token, cache, seq_len)


def _interleaved_rounds(variants: Sequence[_Variant], pairs: int) -> None:
    """`pairs` rounds; each times every variant's prefill, then every variant's decode step."""
    device = variants[0].loaded.device
    timer = synced_perf_counter(device)
    first = variants[0].timing.cell
    mode = first.compile
    graphs = uses_cuda_graphs(mode, device.type)
    with (
        torch.inference_mode(),
        cuda_graphs_kept(graphs, mode, "interleaved rounds"),
        TimedWindow(f"interleaved group of {first.id}", mode) as window,
    ):
        for _ in range(pairs):
            for phase, calls in (("prefill", _prefill_call), ("decode", _decode_call)):
                for variant in variants:
                    call = calls(variant)  # untimed: inputs and cache
                    device_sync(device)
                    start = timer()
                    call()
                    elapsed_s = timer() - start
                    del call
                    kept = (
                        variant.timing.prefill_s if phase == "prefill" else variant.timing.decode_s
                    )
                    kept.append(elapsed_s)
    window.check()
