"""Our client-observed `ttft_s` / `tpot_s` against optimum-benchmark's prefill / per-token latency.

`python -m benchmarks.suite.vs_optimum [--model smollm2-135m] [--dtypes float32 bfloat16]
[--prompt-len 256] [--new-tokens 32] [--runs 9] [--threads N] [--checkpoint DIR] [--json FILE]`

One interpreter, one checkpoint: the model file's architecture is built once with random
weights and saved with `save_pretrained` (to `--checkpoint`, or a temporary folder), then each
dtype is loaded from it the way the suite loads a `source: checkpoint` model. Per run, on the
same model object and prompt, in alternating order (ABC, CBA, ...):

* **ours**: `Engine.client_generate`, what `test_generate` times; `ttft_s` as the engine
  reports it and `tpot_s = (e2e_s - ttft_s) / (N - 1)` with `e2e_s` the synchronized time
  around the call (the benchmark timer's view);
* **optimum**: HF `generate(max_new_tokens=N, min_new_tokens=N, greedy)` under
  `torch.inference_mode`, timed as optimum-benchmark's
  `PerTokenLatencySessionTrackerLogitsProcessor` does (a minimal reimplementation:
  optimum-benchmark is not in our package index): a clock read before the call, a timestamp in
  a logits processor at every step (a CUDA event on CUDA, as optimum does, recorded on the
  current stream of the model's own device, not whichever device is current); prefill latency =
  first timestamp - start; per-token latency = the mean of successive timestamp differences
  (N - 1 per call);
* **instrumented**: `Engine.generate`, the suite's untimed asserting pass (KV bytes, memory and
  CPU at every step), to show what that bookkeeping would add if it were timed.

Medians over runs of each figure and the ratios ours / optimum are printed (and written to
`--json`) with the quartiles of the run-by-run ratios (how far the noise reaches) and the
machine's load before and after. Threads and OpenMP's wait policy are the process's defaults,
as the suite's (`--threads N` pins torch's intra-op threads), so the optimum arm is what a
default torch process gets (issue 33).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import LogitsProcessor, LogitsProcessorList

from benchmarks.harness.device.devices import resolve_device, timed
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.model.models import ModelSpec, build_model, load_model_spec

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cuda_event(device: torch.device) -> Any:
    """A timing event recorded now on `device`'s current stream (`event.record()` alone records
    on the current device's, which is cuda:0 unless something set it, whatever the model's)."""
    event = torch.cuda.Event(enable_timing=True)
    event.record(torch.cuda.current_stream(device))
    return event


class TokenTimestamps(LogitsProcessor):
    """optimum-benchmark's per-token tracker, reduced to what it measures: one timestamp per
    generation step, taken when the step's logits reach the processors (before the argmax)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.events: list[Any] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.cuda:
            self.events.append(cuda_event(self.device))
        else:
            self.events.append(time.perf_counter())
        return scores

    def since(self, start: Any) -> list[float]:
        """Seconds from `start` to each timestamp."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
            return [start.elapsed_time(e) / 1e3 for e in self.events]
        return [e - start for e in self.events]


def optimum_style_run(model: Any, ids: torch.Tensor, new_tokens: int) -> tuple[float, float]:
    """One HF `generate` timed as optimum-benchmark does: (prefill latency, mean per-token)."""
    device = ids.device
    stamps = TokenTimestamps(device)
    pad = model.generation_config.pad_token_id
    start: Any = cuda_event(device) if device.type == "cuda" else time.perf_counter()
    with torch.inference_mode():
        model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0 if pad is None else pad,
            logits_processor=LogitsProcessorList([stamps]),
        )
    at = stamps.since(start)
    per_token = [b - a for a, b in itertools.pairwise(at)]
    return at[0], statistics.fmean(per_token)


def ours_run(engine: Engine, prompt: torch.Tensor, new_tokens: int, *, checked: bool) -> Any:
    """(ttft_s, tpot_s) of the client loop, or of the instrumented pass when `checked`."""
    call = engine.generate if checked else engine.client_generate
    with timed(engine.device) as watch:
        result = call(prompt, new_tokens)
    return result.ttft_s, (watch.elapsed_s - result.ttft_s) / (new_tokens - 1)


@dataclass
class Arms:
    """Per-run (first-token, per-token) seconds of each arm."""

    runs: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def add(self, name: str, pair: tuple[float, float]) -> None:
        self.runs.setdefault(name, []).append(pair)

    def medians(self, name: str) -> tuple[float, float]:
        pairs = self.runs[name]
        return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def compare_dtype(
    spec: ModelSpec, dtype: str, args: argparse.Namespace, device: torch.device
) -> dict[str, Any]:
    """Alternating runs of every arm on one dtype; medians and ratios."""
    model = build_model(spec, device, DTYPES[dtype])
    model.generation_config.eos_token_id = None  # exactly N tokens, as the engine makes
    engine = Engine(model, device)
    prompt = make_prompt(1, args.prompt_len, model.config.vocab_size, seed=0)  # on the host
    on_device = prompt.to(device)
    arms: dict[str, Callable[[], tuple[float, float]]] = {
        "ours": lambda: ours_run(engine, prompt, args.new_tokens, checked=False),
        "optimum": lambda: optimum_style_run(model, on_device, args.new_tokens),
    }
    if not args.no_instrumented:
        arms["instrumented"] = lambda: ours_run(engine, prompt, args.new_tokens, checked=True)
    for run in arms.values():  # first calls, untimed: generate's own setup, allocator warmup
        run()
    found = Arms()
    for r in range(args.runs):
        order = list(arms) if r % 2 == 0 else list(reversed(arms))
        for name in order:
            found.add(name, arms[name]())
    ours, theirs = found.medians("ours"), found.medians("optimum")
    out: dict[str, Any] = {
        "dtype": dtype,
        "ours_ttft_s": ours[0],
        "optimum_prefill_s": theirs[0],
        "ttft_ratio": ours[0] / theirs[0],
        "ours_tpot_s": ours[1],
        "optimum_per_token_s": theirs[1],
        "tpot_ratio": ours[1] / theirs[1],
        "runs": found.runs,
    }
    for i, figure in enumerate(("ttft", "tpot")):  # run by run: how far the noise reaches
        out[f"{figure}_ratio_quartiles"] = quartiles(
            [a[i] / b[i] for a, b in zip(found.runs["ours"], found.runs["optimum"], strict=True)]
        )
    if "instrumented" in arms:
        checked = found.medians("instrumented")
        out["instrumented_tpot_s"] = checked[1]
        out["instrumented_tpot_ratio"] = checked[1] / theirs[1]
    return out


def quartiles(values: list[float]) -> list[float]:
    """[p25, p50, p75] of `values` (all three the value itself for a single run)."""
    if len(values) < 2:
        return values * 3
    low, mid, high = statistics.quantiles(values, n=4, method="inclusive")
    return [low, mid, high]


def save_checkpoint(model_name: str, folder: Path) -> ModelSpec:
    """Random weights of the model file, saved once with `save_pretrained`; its checkpoint spec."""
    if not (folder / "config.json").exists():
        source = load_model_spec(model_name)
        model = build_model(source, torch.device("cpu"), torch.float32, seed=0)
        model.save_pretrained(folder)
        del model
    data = {"schema": 1, "name": f"{model_name}-ckpt", "source": "checkpoint"}
    return ModelSpec.from_mapping({**data, "checkpoint": str(folder)})


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.suite.vs_optimum", description=__doc__
    )
    parser.add_argument("--model", default="smollm2-135m", help="a file of matrix/models/")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=DTYPES)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--runs", type=int, default=9, help="alternating runs per dtype")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's)"
    )
    parser.add_argument("--checkpoint", type=Path, help="keep the checkpoint in this folder")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--no-instrumented", action="store_true", help="skip that arm")
    args = parser.parse_args(argv)
    if args.new_tokens < 2 or args.runs < 1 or args.prompt_len < 1:
        parser.error("--new-tokens must be >= 2, --runs and --prompt-len >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; print one line per dtype and figure; 0 when it ran."""
    args = parse(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        spec = save_checkpoint(args.model, args.checkpoint or Path(scratch))
        results = [compare_dtype(spec, dtype, args, device) for dtype in args.dtypes]
    report = {
        "model": args.model,
        "source": "checkpoint",
        "device": str(device),
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "runs": args.runs,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_num_threads": torch.get_num_threads(),
        "env_OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "env_OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
        "cpu_count": os.cpu_count(),
        "loadavg_1m_before": load_before[0],
        "loadavg_1m_after": os.getloadavg()[0],
        "results": results,
    }
    print(
        f"{args.model} (checkpoint) on {device}, P={args.prompt_len}, N={args.new_tokens}, "
        f"{args.runs} alternating runs, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, {torch.get_num_threads()} thread(s), load "
        f"{report['loadavg_1m_before']:.2f} -> {report['loadavg_1m_after']:.2f}"
    )
    for r in results:
        line = (
            f"{r['dtype']:>9}: ttft {r['ours_ttft_s'] * 1e3:8.2f} ms vs optimum prefill "
            f"{r['optimum_prefill_s'] * 1e3:8.2f} ms = {r['ttft_ratio']:.3f}x | tpot "
            f"{r['ours_tpot_s'] * 1e3:7.2f} ms vs optimum per-token "
            f"{r['optimum_per_token_s'] * 1e3:7.2f} ms = {r['tpot_ratio']:.3f}x | run-by-run "
            f"quartiles ttft {_fmt(r['ttft_ratio_quartiles'])}, tpot "
            f"{_fmt(r['tpot_ratio_quartiles'])}"
        )
        if "instrumented_tpot_ratio" in r:
            line += f" | instrumented tpot {r['instrumented_tpot_ratio']:.3f}x"
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", "utf-8")
    return 0


def _fmt(values: list[float]) -> str:
    return "/".join(f"{v:.3f}" for v in values)


if __name__ == "__main__":
    sys.exit(main())
