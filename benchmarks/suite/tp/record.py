"""A tensor-parallel cell's pytest-benchmark record: the ranks' own round times, replayed.

The ranks time each round themselves (`tp.timing`: barrier -> sync -> t0 -> call -> sync -> t1
on every rank, the round's time max(t1) - min(t0) on one clock); the parent saw none of it.
`ReplayTimer` hands exactly those times to `benchmark.pedantic`, whose timed target does
nothing, so the record's statistics are the ranks' rounds, not this process's wall time
(docs/tensor-parallel.md).

`tp_measurement` writes the record: the fields a single-device prefill/decode record has where
they mean the same thing (`prefill_s`, `prefill_tok_per_s`, `decode_step_s`,
`decode_tok_per_s`, `context_len`, from the replayed rounds) and the `tp_*` contract fields.
Whole-model-on-one-device fields (`weights_bytes`, `kv_*_bytes`, peaks, roofline) are left out:
per-rank bytes are in the `tp_*` lists, so nothing is counted twice; the roofline is per rank
(`tp_roofline.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.harness.cache.kv import text_config
from benchmarks.harness.device.devices import parse_dtype
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.records import median
from benchmarks.harness.roofline.peaks import Peaks
from benchmarks.harness.tp.timing import ONE_CLOCK
from benchmarks.suite.rounds import EXTRA_INFO_SCHEMA, Progress
from benchmarks.suite.tp.cells import TPRun
from benchmarks.suite.tp.roofline import tp_roofline_fields

REPLAY_TIMER = "tp_replay_round_one_clock"
# Across hosts (no shared clock) a round is its slowest rank's own t1 - t0: a per-rank figure.
REPLAY_TIMER_PER_RANK = "tp_replay_per_rank_max"
# transformers' TP styles whose layer output is summed over the ranks (an all-reduce).
ALLREDUCE_STYLES = frozenset({"rowwise", "embedding_rowwise", "rowwise_split_input"})
# The whole-model roofline fields stay None: a tp cell's roofline is per rank (`tp_roofline`).
ROOFLINE_NOTE = (
    "tensor-parallel cell: the roofline is per rank, in the tp_* roofline fields "
    "(benchmarks/suite/tp/roofline.py)"
)


# The single-device record's roofline fields (`roofline.roofline_extra_info`), None here.
ROOFLINE_FIELDS = (
    "prefill_flop",
    "prefill_bytes",
    "prefill_flop_per_s",
    "prefill_pct_of_peak_flops",
    "decode_flop",
    "decode_bytes",
    "decode_bytes_per_s",
    "decode_pct_of_peak_bandwidth",
)


class ReplayTimer:
    """A benchmark timer that replays measured round times: round k reads 0.0, then `d[k]`.

    pytest-benchmark times a pedantic round as `timer()` before the target and `timer()` after,
    and records the difference; so with a target that does nothing, each round's statistic is
    exactly one measured round. Each round restarts at 0.0 rather than continuing a cumulative
    sum, because `(S + d) - S` is not always `d` in floating point, and the record must hold the
    ranks' figures bit for bit. More reads than `2 * len(d)` raise: a round nobody measured.
    """

    def __init__(self, durations: Sequence[float], name: str = REPLAY_TIMER) -> None:
        self.durations = [float(d) for d in durations]
        self.reads = 0
        self.__name__ = name  # pytest-benchmark saves the timer by name

    def __call__(self) -> float:
        round_index, is_end = divmod(self.reads, 2)
        if round_index >= len(self.durations):
            raise RuntimeError(
                f"the replay timer holds {len(self.durations)} measured rounds; a round more "
                "was asked for"
            )
        self.reads += 1
        return self.durations[round_index] if is_end else 0.0


def _nothing() -> None:
    """The replayed rounds' target: the ranks already ran the timed call."""


def replay_rounds(benchmark: Any, durations: Sequence[float], name: str = REPLAY_TIMER) -> None:
    """`benchmark.pedantic` over `durations` through a `ReplayTimer` (no warmup: the ranks did;
    the interleaved groups reuse it, `name` saying whose rounds they are)."""
    benchmark._timer = ReplayTimer(durations, name)  # read by pedantic's runner at each round
    benchmark.pedantic(_nothing, rounds=len(durations), warmup_rounds=0, iterations=1)


def _median_or_none(values: Sequence[float | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return median(known) if known else None


def allreduce_bytes_estimate(
    config: Any, plan: Mapping[str, str], *, dtype: str, tokens: int, world: int
) -> int:
    """An estimate of the bytes one rank sends and receives in all-reduces per forward.

    Every `rowwise` rule of the plan ends in an all-reduce of the layer's output activations
    (`tokens x hidden_size` elements); a ring all-reduce moves 2 x (world - 1) / world of them
    per rank. Rules under `layers.*` count once per layer. Not counted: all-gathers (a colwise
    LM head's gathered logits, packed or expert-local styles) and anything outside the plan.
    """
    cfg = text_config(config)
    hidden = int(cfg.hidden_size)
    layers = int(cfg.num_hidden_layers)
    reduces = sum(
        layers if ".layers." in f".{key}" else 1
        for key, style in plan.items()
        if style in ALLREDUCE_STYLES
    )
    per_reduce = tokens * hidden * parse_dtype(dtype).itemsize
    return int(2 * (world - 1) * per_reduce * reduces // world)


def tp_measurement(
    benchmark: Any, cell: Cell, run: TPRun, measurement: str, progress: Progress, *, peaks: Peaks
) -> dict[str, Any]:
    """Replay the cell's `measurement` ("prefill" or "decode") rounds and write its record; its
    per-rank roofline against `peaks` last (a `RooflineError` fails the test, not the record)."""
    run.check()  # a failed run fails the test with the launcher's reason, before any record
    result = run.result
    launched = run.launch
    assert launched is not None
    times_key = "prefill_s" if measurement == "prefill" else "decode_step_s"
    times = [float(t) for t in result[times_key]]
    world = int(result["tp_size"])
    benchmark.params = cell.axes()
    benchmark.group = measurement
    info: dict[str, Any] = benchmark.extra_info
    plan = {str(k): str(v) for k, v in (result.get("plan") or {}).items()}
    tokens = cell.batch * (cell.prompt_len if measurement == "prefill" else 1)
    ranks = [r or {} for r in launched.ranks]
    one_clock = result.get("round_clock") == ONE_CLOCK
    timer = REPLAY_TIMER if one_clock else REPLAY_TIMER_PER_RANK
    load_label = str(result.get("load_peak_label") or "")
    run_label = str(result.get("run_peak_label") or "")
    info.update(
        {
            "schema": EXTRA_INFO_SCHEMA,
            "cell_id": cell.id,
            "measurement": measurement,
            "warmup": cell.warmup,
            "rounds": cell.rounds,
            "min_timed_s": cell.min_timed_s,  # not applied: the ranks time exactly `rounds`
            "seed": cell.seed,
            "timer": timer,
            "sync": f"{result['backend']}: barrier, device sync, t0, call, device sync, t1",
            "tp_round_clock": result.get("round_clock"),
            "tp_start_skew_s": _median_or_none(result.get(f"{measurement}_start_skew_s") or []),
            "tp_size": world,
            "tp_backend": result["backend"],
            "tp_threads_per_rank": ranks[0].get("threads"),
            "tp_transformers": ranks[0].get("transformers"),
            "tp_weights_rank_bytes": result["weights_per_rank_bytes"],
            "tp_weights_global_bytes": result["weights_global_bytes"],
            "tp_kv_rank_after_prefill_bytes": result["kv_per_rank_after_prefill_bytes"],
            "tp_kv_rank_final_bytes": result["kv_per_rank_final_bytes"],
            "tp_kv_tp1_after_prefill_bytes": result["kv_tp1_after_prefill_bytes"],
            "tp_kv_final_positions": cell.final_positions,
            "tp_load_peak_rank_bytes": result.get("load_peak_per_rank_bytes") or [None] * world,
            "tp_run_peak_rank_bytes": result.get("run_peak_per_rank_bytes") or [None] * world,
            "tp_load_peak_label": load_label,
            "tp_run_peak_label": run_label,
            "memory_labels": {"tp_load_peak_rank": load_label, "tp_run_peak_rank": run_label},
            "tp_allreduce_bytes_per_step_estimate": allreduce_bytes_estimate(
                run.config, plan, dtype=cell.dtype, tokens=tokens, world=world
            ),
            "tp_launch_s": launched.wall_s,
            "tp_model_save_s": None if run.saved is None else run.saved.save_s,
            "tp_model_reused": None if run.saved is None else run.saved.reused,
            **dict.fromkeys(ROOFLINE_FIELDS),
            "roofline_note": ROOFLINE_NOTE,
        }
    )
    replay_rounds(benchmark, times, timer)
    middle = median(times)
    how = "one clock, first start to last end" if one_clock else "per rank: no shared clock"
    if measurement == "prefill":
        info["prefill_s"] = middle
        info["prefill_tok_per_s"] = cell.batch * cell.prompt_len / middle
        progress(f"{cell.id}: prefill median {middle * 1e3:.1f} ms ({world} ranks, {how})")
    else:
        info["decode_step_s"] = middle
        info["decode_tok_per_s"] = cell.batch / middle
        info["context_len"] = cell.prompt_len
        progress(f"{cell.id}: decode step median {middle * 1e3:.2f} ms ({world} ranks, {how})")
    info.update(
        tp_roofline_fields(
            result,
            run.config,
            peaks,
            device_type=cell.device.split(":")[0],
            batch=cell.batch,
            prompt_len=cell.prompt_len,
            new_tokens=cell.new_tokens,
            measurement=measurement,
            median_s=middle,
        )
    )
    return info
