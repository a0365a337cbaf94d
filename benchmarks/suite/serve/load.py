"""A serving cell's load: what each pass sends, how fast, and how long it may take (DESIGN §13).

* `Load.of(cell, ...)`: the cell's load (its rate, burstiness, cap, prompts, SLOs, workload, or
  the defaults: rate inf, Poisson, no cap, 16 prompts, fixed P and N, no SLO) and
  `Load.spec(seed, limits)`, one pass's `LoadSpec`: the workload's prompts (`workload`) seeded
  by `seed`, so every round sends other prompts (no prefix-cache hit, the shared prefix aside)
  and round k of every run the same ones. A capacity cell (`request_rate: sla`) names each
  probe's rate.
* `timeouts(...)`: a request's and a pass's limits, derived from the cell and the single
  request's E2EL on this server (measured first, alone, within `FIRST_REQUEST_TIMEOUT_S`), or
  `--serve-timeout-s`: a server that accepts requests and never answers costs two minutes, not
  the hours of fixed 600 s requests in 3600 s passes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.matrix.serving import DEFAULT_SLA_SHARE, SLA
from benchmarks.harness.model.models import MODELS_DIR, load_model_spec
from benchmarks.harness.serve.client import LoadSpec
from benchmarks.harness.serve.metrics import Slo
from benchmarks.harness.serve.modeldir import vocab_size
from benchmarks.harness.serve.workload import Workload
from benchmarks.suite.configure import models_dir_option
from benchmarks.suite.serve.cells import DEFAULT_PROMPTS, Running, cell_workload


@dataclass(frozen=True)
class Timeouts:
    """How long one request and one pass may take (`timeouts`): never the hour a hung server
    used to cost, never so short that a slow but working server fails."""

    # A whole request, from its send; also the longest silence once its response began (a
    # stall then says so, not "did not end").
    request_s: float

    def pass_s(self, num_prompts: int, rate: float) -> float:
        """The pass: its arrival schedule, then two requests' worth (a request queued behind a
        slow one is sent late and still gets its own `request_s`)."""
        span = 0.0 if math.isinf(rate) else (num_prompts - 1) / rate
        return span + 2 * self.request_s


#: A request alone may take this long before a server counts as hung (`--serve-timeout-s`).
FIRST_REQUEST_TIMEOUT_S = 120.0
#: Under load a request may take this many times the single request's E2EL per wave of
#: `max_concurrency` requests ahead of it, and never less than MIN_REQUEST_TIMEOUT_S.
LOAD_TIMEOUT_FACTOR = 10.0
MIN_REQUEST_TIMEOUT_S = 30.0


def timeouts(
    single_e2el_s: float | None,
    num_prompts: int,
    max_concurrency: int | None,
    override_s: float | None = None,
) -> Timeouts:
    """The pass's timeouts from the cell (its requests, its cap) and the single request's E2EL
    on this server (None: not measured yet, the first request's own limit); `override_s`
    (`--serve-timeout-s`) replaces the derived request timeout."""
    if override_s is not None:
        return Timeouts(override_s)
    if single_e2el_s is None:
        return Timeouts(FIRST_REQUEST_TIMEOUT_S)
    waves = math.ceil(num_prompts / max(min(max_concurrency or num_prompts, num_prompts), 1))
    return Timeouts(max(MIN_REQUEST_TIMEOUT_S, LOAD_TIMEOUT_FACTOR * single_e2el_s * waves))


@dataclass(frozen=True)
class Load:
    """One cell's load (module docstring)."""

    base_url: str
    model_id: str
    workload: Workload
    request_rate: float  # inf; a capacity cell's passes name their own rate
    burstiness: float
    max_concurrency: int | None
    num_prompts: int
    slo: Slo
    api: str = "completions"
    continuous_usage: bool = False
    extra_body: Mapping[str, Any] | None = None
    capacity: bool = False  # `request_rate: sla`
    sla_share: float = DEFAULT_SLA_SHARE

    @property
    def prompt_len(self) -> int:
        """The cell's P."""
        return self.workload.prompt_len

    @property
    def new_tokens(self) -> int:
        """The cell's N."""
        return self.workload.new_tokens

    @classmethod
    def of(cls, cell: Cell, running: Running, vocab: int, options: Mapping[str, Any]) -> Load:
        """The load of `cell` on `running` (defaults in the module docstring)."""
        vllm = running.label == "vllm serve"
        extra = dict(options.get("extra_body") or {})
        if vllm:
            extra.setdefault("ignore_eos", True)  # vLLM's own field: exact N on any model
        capacity = cell.request_rate == SLA
        rate = cell.request_rate if isinstance(cell.request_rate, float) else math.inf
        return cls(
            base_url=running.base_url,
            model_id=running.model_id,
            workload=cell_workload(cell, vocab),
            request_rate=rate,
            burstiness=1.0 if cell.burstiness is None else cell.burstiness,
            max_concurrency=cell.max_concurrency,
            num_prompts=cell.num_prompts or DEFAULT_PROMPTS,
            slo=Slo(*(None if v is None else v / 1e3 for v in _slos(cell))),
            api=str(options.get("api") or "completions"),
            continuous_usage=vllm,
            extra_body=extra,
            capacity=capacity,
            sla_share=cell.sla_share or DEFAULT_SLA_SHARE,
        )

    def spec(
        self,
        seed: int,
        limits: Timeouts,
        *,
        pass_index: int = 0,
        rate: float | None = None,
        count: int | None = None,
    ) -> LoadSpec:
        """One pass: prompts and arrivals seeded by `seed`, at `rate` (default the cell's), of
        `count` requests (default `num_prompts`)."""
        rate = self.request_rate if rate is None else rate
        count = self.num_prompts if count is None else count
        requests = self.workload.requests(count, seed, pass_index)
        return LoadSpec(
            base_url=self.base_url,
            model=self.model_id,
            prompts=requests.prompts,
            new_tokens=self.new_tokens,
            new_tokens_each=requests.new_tokens,
            request_rate=rate,
            burstiness=self.burstiness,
            max_concurrency=self.max_concurrency,
            seed=seed,
            api=self.api,
            continuous_usage=self.continuous_usage,
            extra_body=dict(self.extra_body or {}),
            request_timeout_s=limits.request_s,
            read_timeout_s=limits.request_s,
            pass_timeout_s=limits.pass_s(count, rate),
        )

    def fields(self) -> dict[str, Any]:
        """The load as record fields (inf as the string "inf", a capacity search as "sla")."""
        rate: Any = "inf" if math.isinf(self.request_rate) else self.request_rate
        return {
            "load_request_rate_req_per_s": SLA if self.capacity else rate,
            "load_burstiness": self.burstiness,
            "load_max_concurrency": self.max_concurrency,
            "load_num_prompts": self.num_prompts,
            "load_workload": self.workload.kind,
            "load_range_ratio": self.workload.range_ratio,
            "load_prefix_len": self.workload.prefix_len,
            "slo_ttft_s": self.slo.ttft_s,
            "slo_tpot_s": self.slo.tpot_s,
            "slo_e2el_s": self.slo.e2el_s,
            "sla_share": self.sla_share if self.capacity else None,
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
