"""What one tensor-parallel rank does once its process group is up (`worker` calls `run_rank`).

1. **load**: the saved model with transformers' own TP plan (`skips.tp_loading`), offline; the
   FutureWarnings the load raised are recorded, so a deprecated form shows in the record. The
   rank's peak memory is read when loading ends and again over the rest of the run
   (`rankmemory.RankPeaks`: a load peak and a run peak, each labelled).
2. **generate**: the engine's asserting pass (`Engine.generate`: one prefill, N - 1 decode
   steps, KV measured after each by `measure_kv`) against `bytes.per_rank_kv` at P, P + 1, ...
   on this rank. The cache's K/V must be plain tensors: a `DTensor` would make `measure_kv`'s
   `numel` the global size. Weights per rank from the local shards (`bytes.rank_weights`).
3. **prefill** rounds: `Engine.prefill_forward` from a fresh start cache, under
   `timing.timed_round`; warmup rounds are run the same way and dropped.
4. **decode** rounds: one prefill, `Engine.snapshot`, then per round `Engine.restore` (untimed)
   and one `Engine.decode_step` at position P under `timed_round`.

Before the rounds the ranks check that they read one clock (`timing.same_clock`: one host).

`combine` is rank 0's view of all the ranks' records: per round its time on one clock
(max(t1) - min(t0), `timing.RoundTime.wall_s`) and how far apart the ranks started, per-rank
bytes and peaks side by side, the same greedy tokens on every rank, the weight shards adding up.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import transformers

from benchmarks.harness.cache.kv import analytic_kv, text_config
from benchmarks.harness.device.devices import device_sync, parse_dtype
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.tp.bytes import (
    RankWeights,
    TPError,
    per_rank_kv,
    rank_weights,
    shard_errors,
)
from benchmarks.harness.tp.files import RESULT_FILE, SCHEMA, write_json
from benchmarks.harness.tp.rankmemory import RankPeaks, peak_counter
from benchmarks.harness.tp.skips import too_old_reason, tp_loading, tp_plan_for
from benchmarks.harness.tp.timing import (
    RoundTime,
    TorchGroup,
    round_clock,
    round_walls,
    same_clock,
    sync_before_barrier,
    timed_round,
)

_AUTO_MODEL: Any = transformers.AutoModelForCausalLM


def load_tp_model(model_dir: str, world: int, dtype: torch.dtype) -> tuple[Any, list[str]]:
    """The saved model sharded over `world` ranks by its TP plan, and the FutureWarnings seen."""
    loading = tp_loading()
    if loading is None:
        raise TPError(too_old_reason())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FutureWarning)
        model = _AUTO_MODEL.from_pretrained(
            model_dir, local_files_only=True, **loading.from_pretrained_kwargs(world, dtype)
        )
    seen = [f"{w.category.__name__}: {w.message}" for w in caught if w.category is FutureWarning]
    for w in caught:  # `record=True` caught every category; the others still belong in the log
        if w.category is not FutureWarning:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return model.eval(), seen


def model_plan(model: Any) -> dict[str, str]:
    """The TP plan the loaded model applied (5.x `tp_plan`, 4.5x `_tp_plan`), else its config's."""
    for name in ("tp_plan", "_tp_plan"):
        plan = getattr(model, name, None)
        if isinstance(plan, dict) and plan:
            return {str(k): str(v) for k, v in plan.items()}
    return tp_plan_for(model.config) or {}


def distributed_tensors(cache: Any) -> list[str]:
    """K/V tensors of `cache` that are not plain per-rank tensors (their numel would mislead)."""
    odd: list[str] = []
    for index, layer in enumerate(getattr(cache, "layers", None) or []):
        for name in ("keys", "values"):
            value = getattr(layer, name, None)
            if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
                odd.append(f"layer {index} {name}: {type(value).__name__}")
    return odd


def _kv_check(
    engine: Engine, config: Any, plan: dict[str, str], args: argparse.Namespace, world: int
) -> tuple[dict[str, Any], list[str], list[list[int]], int | None]:
    dtype = parse_dtype(args.dtype)
    vocab = int(text_config(config).vocab_size)
    ids = make_prompt(args.batch, args.prompt_len, vocab, args.seed)
    run = engine.generate(ids, args.new_tokens)
    lengths = [args.prompt_len + step for step in range(args.new_tokens)]
    analytic = [
        per_rank_kv(config, plan, world=world, dtype=dtype, batch=args.batch, seq_len=n).total_bytes
        for n in lengths
    ]
    measured = [run.kv_bytes_after_prefill, *run.kv_bytes_per_step]
    errors = [f"cache tensor not per-rank: {odd}" for odd in distributed_tensors(run.cache)]
    for length, want, got in zip(lengths, analytic, measured, strict=True):
        if want != got:
            errors.append(f"KV at {length} positions: analytic {want} B, measured {got} B")
    tp1 = analytic_kv(config, dtype=dtype, batch=args.batch, seq_len=args.prompt_len).total_bytes
    kv = {
        "analytic_after_prefill_bytes": analytic[0],
        "measured_after_prefill_bytes": measured[0],
        "analytic_per_step_bytes": analytic[1:],
        "measured_per_step_bytes": measured[1:],
        "tp1_analytic_after_prefill_bytes": tp1,
        "match": analytic == measured,
    }
    # The pass resets the device's peak at each phase: its own phase peaks go to the run peak.
    return kv, errors, run.generated_ids.tolist(), run.peak_allocated_bytes


def _prefill_rounds(
    engine: Engine, ids: torch.Tensor, args: argparse.Namespace, time_it: Callable[..., Any]
) -> list[RoundTime]:
    rounds: list[RoundTime] = []
    for index in range(args.warmup + args.rounds):
        start = engine.start_cache_for(args.batch)  # made before the timer, as the suite does
        _, round_time = time_it(lambda start=start: engine.prefill_forward(ids, start))
        if index >= args.warmup:
            rounds.append(round_time)
    return rounds


def _decode_rounds(
    engine: Engine, ids: torch.Tensor, args: argparse.Namespace, time_it: Callable[..., Any]
) -> tuple[list[RoundTime], int]:
    prefill = engine.prefill(ids)
    snapshot = engine.snapshot(prefill.cache)
    token = prefill.next_token
    del prefill
    rounds: list[RoundTime] = []
    for index in range(args.warmup + args.rounds):
        cache = engine.restore(snapshot)  # untimed: the cache back at P positions
        _, round_time = time_it(
            lambda cache=cache: engine.decode_step(token, cache, args.prompt_len)
        )
        if index >= args.warmup:
            rounds.append(round_time)
    return rounds, snapshot.kv_bytes


def run_rank(
    args: argparse.Namespace,
    group: TorchGroup,
    device: torch.device,
    backend: str,
    enter: Callable[[str], None],
) -> dict[str, Any]:
    """Load, assert the bytes, time the rounds; this rank's record (rank 0 adds `result.json`)."""
    world = group.world
    peaks = RankPeaks.start(peak_counter(device))
    enter("load")
    model, load_warnings = load_tp_model(str(args.model_dir), world, parse_dtype(args.dtype))
    peaks.loaded()
    engine = Engine(model, device)
    engine.check_request(args.prompt_len, args.new_tokens)
    plan = model_plan(model)
    weights = rank_weights(model)

    enter("generate")
    peaks.mark()
    kv, errors, tokens, generate_peak = _kv_check(engine, model.config, plan, args, world)
    peaks.fold(generate_peak)
    peaks.mark()
    one_clock = same_clock(group)

    def time_it(call: Callable[[], Any]) -> tuple[Any, RoundTime]:
        return timed_round(
            call,
            group,
            lambda: device_sync(device),
            sync_first=sync_before_barrier(backend),
            one_clock=one_clock,
        )

    vocab = int(text_config(model.config).vocab_size)
    ids = make_prompt(args.batch, args.prompt_len, vocab, args.seed).to(device)
    enter("prefill")
    prefill = _prefill_rounds(engine, ids, args, time_it)
    enter("decode")
    decode, snapshot_bytes = _decode_rounds(engine, ids, args, time_it)
    want = kv["analytic_after_prefill_bytes"]
    if snapshot_bytes != want:
        errors.append(f"decode snapshot holds {snapshot_bytes} B, analytic {want} B")
    peaks.mark()
    record: dict[str, Any] = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "load_warnings": load_warnings,
        "model_type": str(getattr(text_config(model.config), "model_type", "?")),
        "kv": kv,
        "weights": weights.to_json(),
        "generated_ids": tokens,
        # Every rank's t0 and t1 per round (perf_counter seconds), for a reader who wants more
        # than the round's time: the same lists on every rank (gathered).
        "prefill_t0_s": [list(r.t0_s) for r in prefill],
        "prefill_t1_s": [list(r.t1_s) for r in prefill],
        "decode_t0_s": [list(r.t0_s) for r in decode],
        "decode_t1_s": [list(r.t1_s) for r in decode],
        "round_clock": round_clock(one_clock),
        "plan": plan,  # the plan the model applied: the all-reduce estimate counts its rules
        **peaks.to_json(),
        "errors": errors,
    }
    everyone = group.gather_objects(record)  # after every timed round: outside any timing
    if group.rank == 0:
        write_json(args.out / RESULT_FILE, combine(everyone, args, backend, prefill, decode))
    return record


def combine(
    records: Sequence[dict[str, Any]],
    args: argparse.Namespace,
    backend: str,
    prefill: Sequence[RoundTime],
    decode: Sequence[RoundTime],
) -> dict[str, Any]:
    """The run as a whole from every rank's record: each round's time on one clock
    (`RoundTime.wall_s`; per-rank across hosts, `round_clock`), per-rank bytes and peaks."""
    errors = [f"rank {i}: {e}" for i, r in enumerate(records) for e in r["errors"]]
    weights = [RankWeights(**r["weights"]) for r in records]
    errors += shard_errors(weights)
    tokens = [r["generated_ids"] for r in records]
    same_tokens = all(t == tokens[0] for t in tokens)
    if not same_tokens:
        errors.append("the ranks generated different tokens")
    return {
        "schema": SCHEMA,
        "tp_size": len(records),
        "backend": backend,
        "model_type": records[0]["model_type"],
        "dtype": args.dtype,
        "batch": args.batch,
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "rounds": args.rounds,
        "warmup": args.warmup,
        "round_clock": records[0]["round_clock"],
        "prefill_s": round_walls(prefill),
        "prefill_start_skew_s": [r.start_skew_s for r in prefill],
        "decode_step_s": round_walls(decode),
        "decode_start_skew_s": [r.start_skew_s for r in decode],
        "kv_per_rank_after_prefill_bytes": [
            r["kv"]["measured_after_prefill_bytes"] for r in records
        ],
        "kv_per_rank_final_bytes": [
            (r["kv"]["measured_per_step_bytes"] or [r["kv"]["measured_after_prefill_bytes"]])[-1]
            for r in records
        ],
        "kv_tp1_after_prefill_bytes": records[0]["kv"]["tp1_analytic_after_prefill_bytes"],
        "weights_per_rank_bytes": [w.local_bytes for w in weights],
        "weights_global_bytes": weights[0].global_bytes,
        "plan": records[0].get("plan") or {},
        "load_peak_per_rank_bytes": [r.get("load_peak_bytes") for r in records],
        "load_peak_label": records[0].get("load_peak_label"),
        "run_peak_per_rank_bytes": [r.get("run_peak_bytes") for r in records],
        "run_peak_label": records[0].get("run_peak_label"),
        "same_tokens": same_tokens,
        "generated_ids": tokens[0],
        "errors": errors,
        "ok": not errors,
    }
