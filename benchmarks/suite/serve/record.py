"""A serving cell's load passes and its record (DESIGN §13).

* `Load.of(cell, ...)`: the cell's load (its rate, burstiness, cap, prompts, SLOs, or the
  defaults: rate inf, Poisson, no cap, 16 prompts, no SLO) and `Load.spec(seed)`, one pass's
  `LoadSpec` with prompts of P words of the served vocabulary seeded by `seed`, so every round
  sends other prompts (no prefix-cache hit) and round k of every run the same ones.
* `serve_fields(cell, load, passes, ...)`: the record. The summary fields (`ttft_p50_s`, ...,
  `goodput_req_per_s`, `errors`) pool the timed passes' requests (throughputs over their summed
  durations); `round_series` holds the gate's per-round series (`ttft_p50_s`, `ttft_p90_s`,
  `tpot_p50_s`, `goodput_req_per_s`: each round one pass, judged like a timing's rounds);
  `serve_rounds` every figure of every round. The server's own CPU over the rounds
  (`server_cpu_s`) is taken out of the other-process CPU the busy rule reads: the server is
  the measured work, not a neighbour.
* `client_overhead` (session fixture): the client against the fake server's scripted token
  times at the matrix's highest load (rate, concurrency, prompts, N), once per run; every
  serving record carries it (`client_overhead_s`: the median of measured - scripted E2EL).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psutil
import pytest

from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import MODELS_DIR, load_model_spec
from benchmarks.harness.records import median
from benchmarks.harness.serve.client import LoadSpec, PassResult, run_load
from benchmarks.harness.serve.launcher import FAKE_MODEL_ID, Server, fake_command
from benchmarks.harness.serve.metrics import Slo, calculate_metrics
from benchmarks.harness.serve.modeldir import prompt_text, vocab_size
from benchmarks.suite.configure import models_dir_option
from benchmarks.suite.rounds import MATRIX, Progress
from benchmarks.suite.serve.cells import DEFAULT_PROMPTS, Running, log_dir

#: The gate's per-round series of a serving record (DESIGN §13).
JUDGED = ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "goodput_req_per_s")
# The fake server's script for the overhead pass: a fast server (20 ms to the first token, 2 ms
# a token), so what the client adds is not hidden by slow tokens.
OVERHEAD_TTFT_S = 0.02
OVERHEAD_ITL_S = 0.002


@dataclass(frozen=True)
class Load:
    """One cell's load (module docstring)."""

    base_url: str
    model_id: str
    prompt_len: int
    new_tokens: int
    vocab: int
    request_rate: float
    burstiness: float
    max_concurrency: int | None
    num_prompts: int
    slo: Slo
    api: str = "completions"
    continuous_usage: bool = False
    extra_body: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, cell: Cell, running: Running, vocab: int, options: Mapping[str, Any]) -> Load:
        """The load of `cell` on `running` (defaults in the module docstring)."""
        vllm = running.label == "vllm serve"
        extra = dict(options.get("extra_body") or {})
        if vllm:
            extra.setdefault("ignore_eos", True)  # vLLM's own field: exact N on any model
        return cls(
            base_url=running.base_url,
            model_id=running.model_id,
            prompt_len=cell.prompt_len,
            new_tokens=cell.new_tokens,
            vocab=vocab,
            request_rate=math.inf if cell.request_rate is None else cell.request_rate,
            burstiness=1.0 if cell.burstiness is None else cell.burstiness,
            max_concurrency=cell.max_concurrency,
            num_prompts=cell.num_prompts or DEFAULT_PROMPTS,
            slo=Slo(*(None if v is None else v / 1e3 for v in _slos(cell))),
            api=str(options.get("api") or "completions"),
            continuous_usage=vllm,
            extra_body=extra,
        )

    def spec(self, seed: int) -> LoadSpec:
        """One pass: prompts and arrivals seeded by `seed`."""
        prompts = tuple(
            prompt_text(self.prompt_len, self.vocab, seed=seed, index=i)
            for i in range(self.num_prompts)
        )
        return LoadSpec(
            base_url=self.base_url,
            model=self.model_id,
            prompts=prompts,
            new_tokens=self.new_tokens,
            request_rate=self.request_rate,
            burstiness=self.burstiness,
            max_concurrency=self.max_concurrency,
            seed=seed,
            api=self.api,
            continuous_usage=self.continuous_usage,
            extra_body=dict(self.extra_body or {}),
        )

    def fields(self) -> dict[str, Any]:
        """The load as record fields (inf as the string "inf")."""
        rate = "inf" if math.isinf(self.request_rate) else self.request_rate
        return {
            "load_request_rate_req_per_s": rate,
            "load_burstiness": self.burstiness,
            "load_max_concurrency": self.max_concurrency,
            "load_num_prompts": self.num_prompts,
            "slo_ttft_s": self.slo.ttft_s,
            "slo_tpot_s": self.slo.tpot_s,
            "slo_e2el_s": self.slo.e2el_s,
            "serve_api": self.api,
        }


def _slos(cell: Cell) -> tuple[float | None, float | None, float | None]:
    return cell.slo_ttft_ms, cell.slo_tpot_ms, cell.slo_e2el_ms


def cell_vocab(config: pytest.Config, cell: Cell) -> int:
    """The vocabulary the cell's prompts draw words from (the matrix model's)."""
    spec = load_model_spec(cell.model, models_dir_option(config) or MODELS_DIR)
    return vocab_size(spec)


def round_seed(cell: Cell, index: int, *, warmup: bool = False) -> int:
    """Pass `index`'s seed: timed round k of every run sends the same prompts and arrivals."""
    return cell.seed * 1_000 + index + (500 if warmup else 0)


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
        "prompt_len": load.prompt_len,
    }
    rounds = [calculate_metrics(p.records, duration_s=p.duration_s, **kwargs) for p in passes]
    pooled = calculate_metrics(
        [r for p in passes for r in p.records],
        duration_s=sum(p.duration_s for p in passes),
        **kwargs,
    )
    pooled.pop("pass_duration_s")  # each round's is in `serve_rounds`; the rounds' statistic
    series = {name: [r[name] for r in rounds] for name in JUDGED}
    # A round whose figure does not exist (no request completed) has no value to judge.
    series = {k: v for k, v in series.items() if all(isinstance(x, float) for x in v)}
    return {**pooled, "round_series": series, "serve_rounds": rounds}


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
    extra = [(r.done_s or 0.0) - r.sent_s - scripted_e2el for r in done]
    first = [r.chunks[0].at_s - r.sent_s - OVERHEAD_TTFT_S for r in done]
    return {
        "client_overhead_s": median(extra),
        "client_overhead_ttft_s": median(first),
        "client_overhead_p90_s": sorted(extra)[int(0.9 * (len(extra) - 1))],
    }


def _highest_load(cells: Sequence[Cell]) -> tuple[float, int | None, int, int, int]:
    served = [c for c in cells if c.serve is not None]
    rate = max((math.inf if c.request_rate is None else c.request_rate) for c in served)
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
