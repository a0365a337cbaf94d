"""A serving cell's load passes, each checked before the next, and their per-request export.

`CellPasses(cell, load, pool, running, options)` runs what `benchmarks/test_serve.py` times:

* `first_request()`: one request alone, before anything else, within `FIRST_REQUEST_TIMEOUT_S`
  (or `--serve-timeout-s`). Its E2EL sets every later limit (`load.timeouts`) and a capacity
  search's start rate. If it fails, the server fails the cell at once, with its reason: a
  server that accepts requests and never answers costs two minutes, a refused port or a 200
  that is not an event stream one request.
* `send(seed, ...)`: one pass and nothing else (what a timed round brackets); `check(result,
  label)`: the checks no later pass may wait on, outside any timed round: every request timed
  out (hung), every request refused, or the server no longer answering `GET /v1/models` (dead)
  fails the cell now (`ServerPool.fail`: the server's later cells fail at once with the same
  reason). `run` is both, for untimed passes.
* `export(path)`: every request of every pass (warmup, first request, timed rounds, capacity
  probes) as JSON Lines (`export.write_export`): scheduled, sent, first token, every chunk's time
  and tokens, end, usage, error. The record names the file (`serve_requests_file`).
* `error_verdict(info, allow)`: a cell with failed requests fails (reasons counted) unless
  `--serve-allow-errors` allows their share.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.serve.client import PassResult, run_load
from benchmarks.harness.serve.export import request_rows, write_export
from benchmarks.harness.serve.metrics import calculate_metrics
from benchmarks.suite.serve.cells import Running, ServerPool
from benchmarks.suite.serve.load import Load, Timeouts, timeouts


class CellPasses:
    """The passes of one serving cell (module docstring)."""

    def __init__(
        self,
        cell: Cell,
        load: Load,
        pool: ServerPool,
        running: Running,
        options: Mapping[str, Any],
    ) -> None:
        self.cell = cell
        self.load = load
        self.pool = pool
        self.running = running
        self.override_s: float | None = options.get("timeout_s")
        self.limits: Timeouts = timeouts(None, 1, None, self.override_s)  # the first request's
        self.single_e2el_s: float | None = None
        self.rows: list[dict[str, Any]] = []

    def first_request(self, seed: int) -> float:
        """Send one request alone (module docstring); its E2EL in seconds."""
        result = run_load(self.load.spec(seed, self.limits, count=1))
        self._keep(result, "first")
        figures = calculate_metrics(
            result.records, new_tokens=self.load.new_tokens, duration_s=result.duration_s
        )
        e2el = figures.get("e2el_p50_s")
        if figures["errors"] or not isinstance(e2el, float):
            why = str(result.records[0].error or figures["error_examples"] or figures["errors"])
            if why.startswith("timeout"):
                why += " (a model slower than that: --serve-timeout-s)"
            self.pool.fail(self.cell, f"its first request, sent alone, failed: {why}")
        self.single_e2el_s = e2el
        self.limits = timeouts(
            e2el, self.load.num_prompts, self.load.max_concurrency, self.override_s
        )
        return e2el

    def send(
        self, seed: int, *, pass_index: int = 0, rate: float | None = None, count: int | None = None
    ) -> PassResult:
        """One pass, unchecked (module docstring)."""
        spec = self.load.spec(seed, self.limits, pass_index=pass_index, rate=rate, count=count)
        return run_load(spec)

    def run(
        self,
        seed: int,
        *,
        label: str,
        pass_index: int = 0,
        rate: float | None = None,
        count: int | None = None,
    ) -> PassResult:
        """One pass, checked before it returns (module docstring)."""
        result = self.send(seed, pass_index=pass_index, rate=rate, count=count)
        self.check(result, label)
        return result

    def check(self, result: PassResult, label: str) -> None:
        """Keep the pass's requests for the export under `label`, then fail the cell if the
        server hung, refused every request or died (module docstring)."""
        self._keep(result, label)
        if result.all_timed_out:
            self.pool.fail(
                self.cell,
                f"hung: every request of a pass timed out ({self.limits.request_s:.0f} s each; "
                f"--serve-timeout-s raises it): {result.records[0].error}",
            )
        dead = self.running.dead_reason()
        if result.all_refused:
            why = dead or "is the server still listening? (--serve-url, or its log)"
            self.pool.fail(
                self.cell, f"every request of a pass was refused: {result.records[0].error}; {why}"
            )
        if dead is not None:
            self.pool.fail(self.cell, dead)

    def _keep(self, result: PassResult, label: str) -> None:
        # label: "first", "warmup 0", "round 2", "round 1 probe 3"
        warmup = label.startswith("warmup")
        self.rows.extend(request_rows(result.records, round_index=label, warmup=warmup))

    def export(self, path: Path, header: Mapping[str, Any]) -> Path:
        """Write every request kept so far (module docstring); the file's path."""
        write_export(path, header, self.rows)
        return path


def error_verdict(info: Mapping[str, Any], allow: float) -> str | None:
    """Why the cell fails on its failed requests (module docstring), or None."""
    errors = int(info.get("errors") or 0)
    requests = int(info.get("requests") or 0)
    if errors == 0 or (requests and errors <= allow * requests):
        return None
    reasons = info.get("error_reasons") or {}
    counted = ", ".join(f"{count} x {reason}" for reason, count in sorted(reasons.items()))
    examples = info.get("error_examples") or {}
    example = next(iter(examples.values()), "")
    allowed = f" (--serve-allow-errors {allow:g} allows {allow * requests:.1f})" if allow else ""
    return f"{errors} of {requests} requests failed{allowed}: {counted}" + (
        f"; e.g. {example}" if example else ""
    )
