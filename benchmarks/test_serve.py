"""Serve: a real OpenAI-compatible server under load, one load pass per round (DESIGN §13).

Per serving cell (a matrix with a `serve` axis): the session's server for the cell's model,
device, dtype, server and continuous batching (`benchmarks/suite/serve/cells.py`: started once
for the cells that share it, stopped before another starts and when the session ends, checked
alive before each cell), then one request alone (its E2EL sets the cell's timeouts: a hung,
dead or non-streaming server fails the cell at once, and its later cells without waiting), then
`warmup` untimed passes, then `rounds` timed passes through `benchmark.pedantic`, each checked
before the next (`benchmarks/suite/serve/passes.py`). What the benchmark's timer brackets is
one whole pass (`serve_pass_s`, first scheduled arrival -> last response); a finite-rate
cell's rounds are its passes' E2EL p50 instead (`rounds_statistic`), and a capacity cell's
(`request_rate: sla`) rounds are each a search for the highest rate that meets its SLOs
(`benchmarks/suite/serve/sla.py`; `sla_rate_req_per_s`). A/B mode's turnstile alternates the
two sides' rounds, one server per side. The record (`benchmarks/suite/serve/record.py`):
TTFT, TPOT, ITL per token and per chunk, E2EL percentiles, TTFT and E2EL from the scheduled
arrival, throughputs, goodput, errors by reason, the per-round series the gate judges
(`round_series`), the client's overhead, the server's log and CPU, and the per-request export
(`serve_requests_file`).

A test fails when any request failed (the reasons counted; `--serve-allow-errors` allows a
share, for servers that shed load on purpose); the record stays in the history, where the gate
compares `errors` exactly.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from benchmarks.harness.device.cpustate import OthersCpuMeter
from benchmarks.harness.errors import ServeError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.serve.client import PassResult
from benchmarks.suite.rounds import EXTRA_INFO_SCHEMA, Progress, thread_policy
from benchmarks.suite.serve.cells import ServerPool, log_dir, serve_options
from benchmarks.suite.serve.load import Load, cell_vocab, round_seed
from benchmarks.suite.serve.passes import CellPasses, error_verdict
from benchmarks.suite.serve.record import ServerCpu, serve_fields, without_server
from benchmarks.suite.serve.sla import capacity_rounds

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
    """The cell's passes against its server; the record of DESIGN §13."""
    info = _record_skeleton(benchmark, cell)
    options = serve_options(pytestconfig)
    reason = None
    try:
        _measure(
            cell, info, serve_pool=serve_pool, client_overhead=client_overhead, options=options,
            progress=progress, pytestconfig=pytestconfig, benchmark=benchmark,
        )  # fmt: skip
    except ServeError as error:  # the reason, not a traceback through the harness
        reason = str(error)
    if reason is not None:  # failed outside the `except`: no "during handling" chain
        pytest.fail(f"{cell.id}: {reason}", pytrace=False)
    progress(_summary(cell, info))
    failed = error_verdict(info, float(options["allow_errors"]))
    if failed is not None:
        pytest.fail(
            f"{cell.id}: {failed} (requests: {info['serve_requests_file']}, server log: "
            f"{info['serve_log']})",
            pytrace=False,
        )


def _measure(
    cell: Cell,
    info: dict[str, Any],
    *,
    serve_pool: ServerPool,
    client_overhead: dict[str, Any],
    options: dict[str, Any],
    progress: Progress,
    pytestconfig: pytest.Config,
    benchmark: Any,
) -> None:
    """The server, the first request, the warmup and the timed rounds, into `info`."""
    running = serve_pool.get(cell)
    load = Load.of(cell, running, cell_vocab(pytestconfig, cell), options)
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
    passes = CellPasses(cell, load, serve_pool, running, options)
    export = log_dir(pytestconfig) / f"{cell.id}.requests.jsonl"
    try:
        _passes(
            cell, info, load=load, passes=passes, server_pids=running.pids(), progress=progress,
            benchmark=benchmark,
        )  # fmt: skip
    finally:  # what was sent, whatever happened: the diagnosis of a red serving verdict
        header = {"cell_id": cell.id, "params": cell.to_params(), **load.fields()}
        info["serve_requests_file"] = str(passes.export(export, header))


def _passes(
    cell: Cell,
    info: dict[str, Any],
    *,
    load: Load,
    passes: CellPasses,
    server_pids: tuple[int, ...],
    progress: Progress,
    benchmark: Any,
) -> None:
    started = time.perf_counter()
    single_s = passes.first_request(round_seed(cell, 0, warmup=True) + 400)
    info["serve_single_e2el_s"] = single_s
    info["serve_request_timeout_s"] = passes.limits.request_s
    for k in range(cell.warmup):
        passes.run(round_seed(cell, k, warmup=True), label=f"warmup {k}", pass_index=k)
    info["warmup_s"] = time.perf_counter() - started
    others = OthersCpuMeter()
    server_cpu = ServerCpu(server_pids)
    others.start()
    server_cpu.start()
    if load.capacity:
        progress(f"{cell.id}: searching the highest rate within the SLOs, {cell.rounds} time(s)")
        info.update(capacity_rounds(benchmark, passes, cell))
    else:
        progress(
            f"{cell.id}: {load.num_prompts} requests a pass at {load.request_rate:g} req/s, "
            f"{cell.rounds} round(s) ..."
        )
        timed: list[PassResult] = []

        def one_pass() -> None:  # the timed round: the pass alone
            k = len(timed)
            timed.append(passes.send(round_seed(cell, k), pass_index=k))

        def check_last() -> None:  # untimed, before the next round (and after the last)
            if timed:
                passes.check(timed[-1], f"round {len(timed) - 1}")

        benchmark.pedantic(
            one_pass, setup=check_last, rounds=cell.rounds, warmup_rounds=0, iterations=1
        )
        check_last()
        info.update(serve_fields(load, timed))
    info.update(without_server(others.stop_extra_info(), server_cpu.stop()))


def _summary(cell: Cell, info: dict[str, Any]) -> str:
    if info.get("sla_rate_req_per_s") is not None:
        return (
            f"{cell.id}: capacity {info['sla_rate_req_per_s']:.2f} req/s within the SLOs "
            f"(bracket {info.get('sla_bracket')}), {info['errors']} error(s)"
        )
    return (
        f"{cell.id}: ttft p50 {_ms(info.get('ttft_p50_s'))}, tpot p50 "
        f"{_ms(info.get('tpot_p50_s'))}, goodput {info.get('goodput_req_per_s') or 0:.2f} req/s, "
        f"{info['errors']} error(s)"
    )


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e3:.1f} ms"
