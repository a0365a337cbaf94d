"""Serve: a real OpenAI-compatible server under load, one load pass per round (DESIGN §13).

Per serving cell (a matrix with a `serve` axis): the session's server for the cell's model,
device, dtype, server and continuous batching (`benchmarks/suite/serve/cells.py`: started once
for the cells that share it, stopped before another starts and when the session ends), then
`warmup` untimed passes, then `rounds` timed passes through `benchmark.pedantic`: what the
benchmark's timer brackets is one whole pass (its statistic, `serve_pass_s`, the time from the
first scheduled arrival to the last response), so A/B mode's turnstile alternates the two
sides' passes, one server per side. The record (`benchmarks/suite/serve/record.py`): TTFT,
TPOT, ITL per token and per chunk, E2EL percentiles, TTFT and E2EL from the scheduled arrival,
throughputs, goodput, errors by reason, the per-round series the gate judges (`round_series`),
the client's overhead, the server's log and CPU.

A test fails when no request of its passes completed (its reasons in the message); requests
that failed or came back short otherwise stay in the record as error rows.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from benchmarks.harness.device.cpustate import OthersCpuMeter
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.serve.client import PassResult, run_load
from benchmarks.suite.rounds import EXTRA_INFO_SCHEMA, Progress, thread_policy
from benchmarks.suite.serve.cells import ServerPool, serve_options
from benchmarks.suite.serve.record import (
    Load,
    ServerCpu,
    cell_vocab,
    round_seed,
    serve_fields,
    without_server,
)

MEASUREMENT = "serve"
SERVE_TEST = True  # collection gives this module the serving cells, and only those


def _record_skeleton(benchmark: Any, cell: Cell) -> dict[str, Any]:
    benchmark.params = cell.axes()
    benchmark.group = MEASUREMENT
    info: dict[str, Any] = benchmark.extra_info
    info.update(
        {
            "schema": EXTRA_INFO_SCHEMA,
            "cell_id": cell.id,
            "measurement": MEASUREMENT,
            "warmup": cell.warmup,
            "rounds": cell.rounds,
            "seed": cell.seed,
            "timer": "perf_counter",
            "sync": "none in this process: the server's responses are the measurement",
            **thread_policy(),
        }
    )
    return info


def test_serve(
    cell: Cell,
    *,
    serve_pool: ServerPool,
    client_overhead: dict[str, Any],
    progress: Progress,
    pytestconfig: pytest.Config,
    benchmark: Any,
) -> None:
    """One load pass per round against the cell's server; the record of DESIGN §13."""
    info = _record_skeleton(benchmark, cell)
    running = serve_pool.get(cell)
    load = Load.of(cell, running, cell_vocab(pytestconfig, cell), serve_options(pytestconfig))
    info.update(load.fields())
    info.update(
        {
            "serve": running.label,
            "serve_model_id": running.model_id,
            "serve_url": running.base_url if running.server is None else None,
            "serve_log": None if running.log_path is None else str(running.log_path),
            "serve_ready_s": running.ready_s,
            "serve_started_for": running.started_for,
            "serve_cb_num_blocks": running.cb_num_blocks,
            **client_overhead,
        }
    )
    started = time.perf_counter()
    for k in range(cell.warmup):
        run_load(load.spec(round_seed(cell, k, warmup=True)))
    info["warmup_s"] = time.perf_counter() - started
    progress(
        f"{cell.id}: {load.num_prompts} requests a pass at {load.request_rate:g} req/s, "
        f"{cell.rounds} round(s) ..."
    )
    passes: list[PassResult] = []

    def one_pass() -> None:
        passes.append(run_load(load.spec(round_seed(cell, len(passes)))))

    others = OthersCpuMeter()
    server_cpu = ServerCpu(running.pids())
    others.start()
    server_cpu.start()
    benchmark.pedantic(one_pass, rounds=cell.rounds, warmup_rounds=0, iterations=1)
    info.update(without_server(others.stop_extra_info(), server_cpu.stop()))
    info.update(serve_fields(load, passes))
    progress(
        f"{cell.id}: ttft p50 {_ms(info['ttft_p50_s'])}, tpot p50 {_ms(info['tpot_p50_s'])}, "
        f"goodput {info['goodput_req_per_s']:.2f} req/s, {info['errors']} error(s)"
    )
    assert info["requests_completed"] > 0, (
        f"no request of {cell.id} completed: {info['error_reasons']} (server log: "
        f"{info['serve_log']})"
    )


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e3:.1f} ms"
