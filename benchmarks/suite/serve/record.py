"""A serving cell's record (DESIGN §13).

* `serve_fields(load, passes)`: the record. The summary fields (`ttft_p50_s`, ...,
  `goodput_req_per_s`, `errors` by reason) pool the timed passes' requests (throughputs over
  their summed durations); `round_series` holds the gate's per-round series (`JUDGED`: TTFT
  p50/p90, TPOT p50, E2EL p50, the chunk-gap p99 (stalls), TTFT p90 from the schedule
  (coordinated omission) and goodput; each round one pass, judged like a timing's rounds; a
  round without a figure is kept as null, never dropping its series); `serve_rounds` every
  figure of every round. A finite-rate cell's rounds are its passes' E2EL p50
  (`rounds_statistic`): what the server controls, where the pass's wall time is mostly the
  arrival schedule; at rate inf the pass's wall time (`serve_pass_s`) is the server's.
* `ServerCpu`: the server's own CPU over the rounds (`server_cpu_s`), taken out of the
  other-process CPU the busy rule reads: the server is the measured work, not a neighbour.
* `client_overhead` (session fixture): the client against the fake server's scripted token
  times at the matrix's highest load (rate, concurrency, prompts, N), once per run; every
  serving record carries it (`client_overhead_s`: the median of measured - scripted E2EL).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import psutil
import pytest

from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.records import median
from benchmarks.harness.serve.client import LoadSpec, PassResult, run_load
from benchmarks.harness.serve.launcher import FAKE_MODEL_ID, Server, fake_command
from benchmarks.harness.serve.metrics import calculate_metrics
from benchmarks.suite.rounds import MATRIX, Progress
from benchmarks.suite.serve.cells import DEFAULT_PROMPTS, log_dir
from benchmarks.suite.serve.load import Load

#: The gate's per-round series of a serving record (DESIGN §13). Errors are judged apart, exactly
#: (`errors`), and fail the cell (`benchmarks/test_serve.py`).
JUDGED = (
    "ttft_p50_s",
    "ttft_p90_s",
    "tpot_p50_s",
    "e2el_p50_s",
    "itl_chunk_p99_s",
    "ttft_from_schedule_p90_s",
    "goodput_req_per_s",
)
#: A finite-rate cell's rounds (`rounds_statistic`): a pass's E2EL p50.
FINITE_RATE_STATISTIC = "e2el_p50_s"
# The fake server's script for the overhead pass: a fast server (20 ms to the first token, 2 ms
# a token), so what the client adds is not hidden by slow tokens.
OVERHEAD_TTFT_S = 0.02
OVERHEAD_ITL_S = 0.002


class ServerCpu:
    """CPU seconds the server's processes used between `start` and `stop` (psutil)."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.processes = []
        for pid in pids:
            try:
                self.processes.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                continue
        self._start = 0.0

    def _total(self) -> float:
        total = 0.0
        for process in self.processes:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    def start(self) -> None:
        """Begin the window."""
        self._start = self._total()

    def stop(self) -> float:
        """The server's CPU seconds since `start`."""
        return max(self._total() - self._start, 0.0)


def without_server(others: Mapping[str, Any], server_cpu_s: float) -> dict[str, Any]:
    """The other-process CPU fields with the server's CPU taken out (module docstring)."""
    out = dict(others)
    window = out.get("others_window_s") or 0.0
    out["others_cpu_s"] = max((out.get("others_cpu_s") or 0.0) - server_cpu_s, 0.0)
    if out.get("others_cores") is not None and window > 0:
        out["others_cores"] = out["others_cpu_s"] / window
        out["other_cpu_pct"] = (
            100.0 * out["others_cores"] / max(int(out.get("others_cpus") or 1), 1)
        )
    out["server_cpu_s"] = server_cpu_s
    out["server_cores"] = server_cpu_s / window if window > 0 else None
    return out


def serve_fields(load: Load, passes: Sequence[PassResult]) -> dict[str, Any]:
    """The summary, `round_series` and `serve_rounds` of the timed passes (module docstring)."""
    kwargs: dict[str, Any] = {
        "new_tokens": load.new_tokens,
        "slo": load.slo,
        "prompt_len": load.prompt_len if load.workload.uniform_prompts else None,
    }
    rounds = [calculate_metrics(p.records, duration_s=p.duration_s, **kwargs) for p in passes]
    pooled = calculate_metrics(
        [r for p in passes for r in p.records],
        duration_s=sum(p.duration_s for p in passes),
        **kwargs,
    )
    pooled.pop("pass_duration_s")  # each round's is in `serve_rounds`; the rounds' statistic
    series = {name: [r.get(name) for r in rounds] for name in JUDGED}
    out = {**pooled, "round_series": series, "serve_rounds": rounds}
    if math.isfinite(load.request_rate) and not load.capacity:
        out["rounds_statistic"] = FINITE_RATE_STATISTIC
    return out


def overhead_fields(result: PassResult, new_tokens: int) -> dict[str, Any]:
    """The client's overhead against the scripted times (module docstring)."""
    scripted_e2el = OVERHEAD_TTFT_S + (new_tokens - 1) * OVERHEAD_ITL_S
    done = [r for r in result.records if r.error is None and r.done_s is not None and r.chunks]
    if not done:
        reasons = sorted({str(r.error) for r in result.records})
        return {
            "client_overhead_s": None,
            "client_overhead_note": f"no request completed: {reasons}",
        }
    # E2EL ends at the last content chunk (metrics): the scripted last token, not the usage
    # chunk and the body's close after it.
    extra = [(r.last_content_s or 0.0) - r.sent_s - scripted_e2el for r in done]
    first = [r.chunks[0].at_s - r.sent_s - OVERHEAD_TTFT_S for r in done]
    return {
        "client_overhead_s": median(extra),
        "client_overhead_ttft_s": median(first),
        "client_overhead_p90_s": sorted(extra)[int(0.9 * (len(extra) - 1))],
    }


def _highest_load(cells: Sequence[Cell]) -> tuple[float, int | None, int, int, int]:
    served = [c for c in cells if c.serve is not None]
    # A capacity cell's probes may reach any rate: measure the client at its worst, all at once.
    rate = max(c.request_rate if isinstance(c.request_rate, float) else math.inf for c in served)
    caps = [c.max_concurrency for c in served]
    cap = None if any(c is None for c in caps) else max(c for c in caps if c is not None)
    prompts = max((c.num_prompts or DEFAULT_PROMPTS) for c in served)
    return rate, cap, prompts, max(c.new_tokens for c in served), max(c.prompt_len for c in served)


@pytest.fixture(scope="session")
def client_overhead(pytestconfig: pytest.Config, progress: Progress) -> dict[str, Any]:
    """The client's overhead at the matrix's highest load (module docstring), measured once."""
    rate, cap, prompts, new_tokens, prompt_len = _highest_load(pytestconfig.stash[MATRIX].cells)
    script = ["--ttft-s", str(OVERHEAD_TTFT_S), "--itl-s", str(OVERHEAD_ITL_S)]
    log = log_dir(pytestconfig) / "client-overhead-fake.log"
    progress(f"client overhead: the fake server at rate {rate:g}, cap {cap}, {prompts} prompts")
    with Server(fake_command(script), log, ready_timeout_s=60) as fake:
        prompt_texts = tuple(" ".join(["w1"] * prompt_len) for _ in range(prompts))
        spec = LoadSpec(
            fake.base_url, FAKE_MODEL_ID, prompt_texts,
            new_tokens, request_rate=rate, max_concurrency=cap, seed=0,
        )  # fmt: skip
        run_load(spec)  # warm: the first pass opens connections and imports
        fields = overhead_fields(run_load(spec), new_tokens)
    fields["client_overhead_load"] = {
        "request_rate": "inf" if math.isinf(rate) else rate,
        "max_concurrency": cap,
        "num_prompts": prompts,
        "new_tokens": new_tokens,
        "scripted_ttft_s": OVERHEAD_TTFT_S,
        "scripted_itl_s": OVERHEAD_ITL_S,
    }
    return fields
