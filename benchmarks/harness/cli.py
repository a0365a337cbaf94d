"""`python -m benchmarks.harness`: the KV calculator and the model build timer.

    kv CONFIG [--dtype float16] [--prompt-len 512] [--new-tokens 32] [--batch 1]
              [--measure] [--device cpu] [--seed 0] [--quant Q]
              [--kv-quant K [--kv-group-size 64] [--kv-residual 128]]
    build-time MODEL [--dtype bfloat16] [--device cpu] [--repeat 1]
    doctor [--device D] [--json FILE] [--quick | --full] [--dtype D]
           [--self-check [--matrix F] [--probe-model M] [--also-transformers V[,V]]]

`kv` (DESIGN §4) prints one JSON object: the analytic `bytes_per_token` (bytes added per cached
position while no sliding window is full), `after_prefill_bytes` (P positions), `final_bytes`
(after N new tokens: P + N - 1 positions), `per_step_bytes` (after prefill and after each of the
N - 1 decode steps), `layers` (the final per-layer layout), and, beside the KV, `state_bytes`
(the fixed conv + recurrent state of linear-attention / Mamba layers, 0 for pure attention
models) with `state_layers` (per stateful layer), and the weights: `weights_bytes` (stored, as
`--quant` leaves them on `--device`'s layout; dense models too), `weights_dense_bytes` and
`weight_layers` (per Linear; those left dense say why). CONFIG is a Hugging Face config.json path, a
model YAML path, or a model name from matrix/models/. With `--measure` it builds the model with
random weights on `--device`, runs the engine's real prefill/decode loop, and adds `measured`
(with its `state_bytes` and `weights_bytes`: the model quantized with `--quant`) and `match`; it
exits 1 when measured and analytic bytes differ (KV at any point, the state, or the weights).
`--kv-quant` (fp8, hqq2/4/8, quanto2/4) replaces the KV timeline with a quantized cache's
(packed data, scales, zero points, the residual window, every flush; `layers` per part) and
`kv_quant_bytes_per_token`; `--measure` runs the loop from an empty `QuantizedCache`.

`--device meta` runs that loop on the meta device instead: no memory, no values, only shapes, so
a 7B/8B cache can be checked on a laptop in about a second (transformers 5.x; 4.46 cannot run a
meta forward). Nothing is timed on meta; the engine's timed loop needs a real device.

`build-time` builds MODEL twice, the standard way (`AutoModelForCausalLM.from_config`) and with
phasebench's fast random init, and prints both wall times.

Bad input (an unknown model, dtype or device, N <= 0, P + N beyond the model's positions, an
unreadable or unknown-schema file) prints one line naming the field and the fix and exits 2.
`doctor` (DESIGN §10, docs/doctor.md) says whether this machine can be trusted to benchmark: one
line per finding with what to do; exit 0 fit, 1 a finding makes results untrustworthy, 2 bad
input. `doctor --self-check` adds the first-contact probes (graph breaks per compiled step, CUDA
graphs over two cells, the energy counter's period, throttling under load, % of peak on the
matrix's biggest cell, FA2 against sdpa, the engine's tokens against `generate`).

It deliberately does not benchmark anything: timing belongs to the pytest-benchmark suite.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
import transformers

from benchmarks.harness.cache.kv import analytic_kv, kv_bytes_per_token
from benchmarks.harness.cache.measure import measure_kv
from benchmarks.harness.cache.state import StateLayout, analytic_state
from benchmarks.harness.device.devices import DTYPES, resolve_device
from benchmarks.harness.doctor.run import add_arguments as add_doctor_arguments
from benchmarks.harness.doctor.run import run_doctor
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.errors import KVError, PhasebenchError
from benchmarks.harness.kvquant.backends import KV_QUANT
from benchmarks.harness.kvquant.report import add_quantized_kv
from benchmarks.harness.model import compat
from benchmarks.harness.model.models import (
    ModelSpec,
    build_model,
    build_model_reference,
    load_model_spec,
    parameter_count,
)
from benchmarks.harness.quant.methods import apply_quant, quant_skip_reason
from benchmarks.harness.quant.names import METHODS
from benchmarks.harness.quant.weights_cli import weights_measured, weights_report
from benchmarks.harness.runmode.kvlayout import run_static_cli

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2


class UsageError(PhasebenchError):
    """A command-line argument is missing or malformed."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line (UsageError) instead of usage + exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}; see --help.")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m benchmarks.harness", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    kv = commands.add_parser("kv", help="analytic (and optionally measured) KV-cache bytes")
    kv.add_argument("config", help="config.json path, model YAML path, or matrix/models/ name")
    kv.add_argument("--dtype", default="float16", help="float32 | float16 | bfloat16")
    kv.add_argument("--prompt-len", type=int, default=512, help="P, prompt positions")
    kv.add_argument("--new-tokens", type=int, default=32, help="N, generated tokens (>= 1)")
    kv.add_argument("--batch", type=int, default=1, help="B, sequences")
    kv.add_argument("--measure", action="store_true", help="also run the real loop and compare")
    kv.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N | mps | meta")
    kv.add_argument("--seed", type=int, default=0, help="seed of the weights and prompt")
    kv.add_argument(
        "--cache", choices=("dynamic", "static"), default="dynamic", help="cache (DESIGN §9)"
    )
    kv.add_argument("--max-cache-len", type=int, default=None, help="static: positions")
    kv.add_argument("--quant", default="none", help=f"weights: {' | '.join(METHODS)}")
    kv.add_argument("--kv-quant", default="none", help=f"cache: none | {' | '.join(KV_QUANT)}")
    kv.add_argument("--kv-group-size", type=int, default=64, help="quantized cache: group size")
    kv.add_argument("--kv-residual", type=int, default=128, help="quantized cache: residual")

    build = commands.add_parser("build-time", help="time from_config vs phasebench's fast init")
    build.add_argument("model", help="model YAML path or matrix/models/ name (source: config)")
    build.add_argument("--dtype", default="bfloat16", help="float32 | float16 | bfloat16")
    build.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N | mps")
    build.add_argument("--repeat", type=int, default=1, help="builds of each kind")

    doctor = commands.add_parser("doctor", help="is this machine fit to benchmark?")
    add_doctor_arguments(doctor)
    return parser


@dataclass(frozen=True)
class KVRequest:
    """The validated arguments of `kv`."""

    spec: ModelSpec
    config: Any
    dtype_name: str
    dtype: torch.dtype
    prompt_len: int
    new_tokens: int
    batch: int
    device: torch.device | None  # None: analytic only
    seed: int
    quant: str = "none"
    layout_device: str = "cpu"  # whose packing the analytic weights follow (int4 differs)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> KVRequest:
        """Validate `kv`'s arguments; UsageError/ModelError/DeviceError name the field."""
        dtype = _dtype(args.dtype)
        for flag, value in (("--prompt-len", args.prompt_len), ("--batch", args.batch)):
            if value < 1:
                raise UsageError(f"{flag} is {value}; use a positive integer.")
        if args.new_tokens < 1:
            raise UsageError(
                f"--new-tokens is {args.new_tokens}; use at least 1 (the prefill already "
                "produces token 1)."
            )
        device = _device(args.device) if args.measure else None
        if args.quant not in METHODS:
            raise UsageError(f"--quant is {args.quant!r}; use one of {', '.join(METHODS)}.")
        spec = load_model_spec(args.config)
        config = spec.hf_config()
        limit = compat.max_positions(config)
        # The last token is produced but never fed back, so P + N - 1 positions pass the model.
        positions = args.prompt_len + args.new_tokens - 1
        if limit is not None and positions > limit:
            raise UsageError(
                f"--prompt-len + --new-tokens - 1 = {positions} positions exceed {spec.name}'s "
                f"{limit} (max_position_embeddings); lower --prompt-len or --new-tokens."
            )
        return cls(
            spec=spec,
            config=config,
            dtype_name=args.dtype,
            dtype=dtype,
            prompt_len=args.prompt_len,
            new_tokens=args.new_tokens,
            batch=args.batch,
            device=device,
            seed=args.seed,
            quant=args.quant,
            layout_device=str(args.device).split(":")[0],
        )

    def positions_per_step(self) -> list[int]:
        """Cached positions after prefill and after each of the N - 1 decode steps."""
        return [self.prompt_len + step for step in range(self.new_tokens)]


def _dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise UsageError(f"--dtype is {name!r}; use one of {', '.join(DTYPES)}.")
    return DTYPES[name]


def _device(name: str) -> torch.device:
    if name == "meta":
        return torch.device("meta")
    try:
        return resolve_device(name)
    except PhasebenchError:
        raise UsageError(f"--device is {name!r}; use cpu, cuda, cuda:N, mps or meta.") from None


def kv_report(request: KVRequest) -> dict[str, Any]:
    """The analytic part of `kv`'s JSON object."""
    config, dtype, batch = request.config, request.dtype, request.batch
    per_step = [
        analytic_kv(config, dtype=dtype, batch=batch, seq_len=t).total_bytes
        for t in request.positions_per_step()
    ]
    final = analytic_kv(config, dtype=dtype, batch=batch, seq_len=request.positions_per_step()[-1])
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    try:
        state: StateLayout | None = analytic_state(config, dtype=dtype, batch=batch)
        state_note = None
    except KVError as error:  # a stateful family without a verified rule: say so, no guess
        state, state_note = None, str(error)
    report = {
        "model": request.spec.name,
        "model_type": getattr(text, "model_type", None),
        "transformers": transformers.__version__,
        "dtype": request.dtype_name,
        "batch": batch,
        "prompt_len": request.prompt_len,
        "new_tokens": request.new_tokens,
        "bytes_per_token": kv_bytes_per_token(config, dtype=dtype, batch=batch),
        "after_prefill_bytes": per_step[0],
        "final_bytes": per_step[-1],
        "per_step_bytes": per_step,
        "layers": [layer.to_json() for layer in final.layers],
        "state_bytes": None if state is None else state.total_bytes,
        "state_layers": [] if state is None else [layer.to_json() for layer in state.layers],
        **weights_report(request.spec, request.quant, request.dtype, request.layout_device),
    }
    if state_note is not None:
        report["state_note"] = state_note
    return report


def measure(request: KVRequest) -> dict[str, Any]:
    """Build the model on the request's device, run the loop, return `measured`."""
    assert request.device is not None
    model = build_model(request.spec, request.device, request.dtype, seed=request.seed)
    if request.quant != "none":
        reason = quant_skip_reason(request.quant, request.device, request.dtype)
        if reason is not None:
            raise UsageError(f"--quant {request.quant} cannot run on {request.device}: {reason}")
        apply_quant(model, request.quant, request.device)
    vocab = int(model.config.get_text_config(decoder=True).vocab_size)
    prompt = make_prompt(request.batch, request.prompt_len, vocab, request.seed)
    if request.device.type == "meta":
        per_step, cache = _meta_loop(model, prompt.to("meta"), request.new_tokens)
    else:
        result = Engine(model, request.device).generate(prompt, request.new_tokens)
        per_step = [result.kv_bytes_after_prefill, *result.kv_bytes_per_step]
        cache = result.cache
    return {
        "device": str(request.device),
        "after_prefill_bytes": per_step[0],
        "final_bytes": per_step[-1],
        "per_step_bytes": per_step,
        "storage_final_bytes": measure_kv(cache).storage_bytes,
        "state_bytes": measure_kv(cache).state_bytes,
        **weights_measured(model, request.dtype),
    }


def _meta_loop(model: Any, prompt: torch.Tensor, new_tokens: int) -> tuple[list[int], Any]:
    """The engine's loop without timing (nothing runs on meta): 1 prefill + N - 1 steps."""
    cache_kwarg = compat.cache_kwarg(model)
    try:
        with torch.inference_mode():
            outputs = model(input_ids=prompt, use_cache=True)
            cache = compat.adopt_cache(model, compat.output_cache(outputs))
            per_step = [measure_kv(cache).logical_bytes]
            for _ in range(new_tokens - 1):
                token = outputs.logits[:, -1:, :].argmax(dim=-1)
                outputs = model(input_ids=token, use_cache=True, **{cache_kwarg: cache})
                cache = compat.output_cache(outputs)
                per_step.append(measure_kv(cache).logical_bytes)
    except (RuntimeError, NotImplementedError) as error:
        raise UsageError(
            f"--device meta: transformers {transformers.__version__} cannot run this model on "
            f"the meta device ({str(error).splitlines()[0]}); use --device cpu or transformers 5.x."
        ) from error
    return per_step, cache


def run_kv(args: argparse.Namespace) -> int:
    """`kv`: print the JSON object; 1 when measured bytes differ from analytic ones."""
    request = KVRequest.from_args(args)
    if args.cache == "static":  # allocated and used bytes (runmode_kv, DESIGN §9)
        return run_static_cli(request, args.max_cache_len)
    if args.max_cache_len is not None:
        raise UsageError("--max-cache-len sizes a static cache; add --cache static.")
    report = kv_report(request)
    if args.kv_quant != "none":
        return _run_kv_quant(args, request, report)
    status = EXIT_OK
    if request.device is not None:
        measured = measure(request)
        report["measured"] = measured
        report["match"] = (
            measured["per_step_bytes"] == report["per_step_bytes"]
            and report["state_bytes"] in (None, measured["state_bytes"])
            and measured["weights_bytes"] == report["weights_bytes"]
        )
        status = EXIT_OK if report["match"] else EXIT_MISMATCH
    print(json.dumps(report, indent=2))
    return status


def _run_kv_quant(args: argparse.Namespace, request: KVRequest, report: dict[str, Any]) -> int:
    """`kv --kv-quant K`: the quantized cache's timeline replaces the dense one."""
    if args.kv_quant not in KV_QUANT:
        raise UsageError(
            f"--kv-quant is {args.kv_quant!r}; use none or one of {', '.join(KV_QUANT)}."
        )
    for flag, value in (
        ("--kv-group-size", args.kv_group_size),
        ("--kv-residual", args.kv_residual),
    ):
        if value < 1:
            raise UsageError(f"{flag} is {value}; use a positive integer.")
    match = add_quantized_kv(report, request, args.kv_quant, args.kv_group_size, args.kv_residual)
    print(json.dumps(report, indent=2))
    return EXIT_OK if match else EXIT_MISMATCH


def run_build_time(args: argparse.Namespace) -> int:
    """`build-time`: wall time of from_config vs phasebench's fast init, both in this process."""
    dtype = _dtype(args.dtype)
    device = _device(args.device)
    if device.type == "meta":
        raise UsageError("--device meta builds nothing real; use cpu, cuda, cuda:N or mps.")
    if args.repeat < 1:
        raise UsageError(f"--repeat is {args.repeat}; use a positive integer.")
    spec = load_model_spec(args.model)
    if spec.source != "config":
        raise UsageError(f"{spec.name} is a checkpoint; build-time compares random-weight builds.")
    # A meta build first imports the modeling code, so neither timed build pays for imports.
    params = parameter_count(build_model(spec, torch.device("meta"), dtype))
    naive_s: list[float] = []
    fast_s: list[float] = []
    for _ in range(args.repeat):
        naive_s.append(_timed_build(lambda: build_model_reference(spec, device, dtype)))
        fast_s.append(_timed_build(lambda: build_model(spec, device, dtype)))
    report = {
        "model": spec.name,
        "dtype": args.dtype,
        "device": str(device),
        "parameters": params,
        "threads": torch.get_num_threads(),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "naive_from_config_s": naive_s,
        "phasebench_build_s": fast_s,
        "ratio": min(fast_s) / min(naive_s),
    }
    print(json.dumps(report, indent=2))
    return EXIT_OK


def _timed_build(build: Any) -> float:
    gc.collect()
    start_s = time.perf_counter()
    model = build()
    if next(model.parameters()).device.type == "cuda":
        torch.cuda.synchronize()
    elapsed_s = time.perf_counter() - start_s
    del model
    gc.collect()
    return elapsed_s


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 KV mismatch or unfit machine, 2 bad input)."""
    try:
        args = _parser().parse_args(argv)
        if args.command == "kv":
            return run_kv(args)
        if args.command == "doctor":
            return run_doctor(args)
        return run_build_time(args)
    except PhasebenchError as error:
        print(str(error).replace("\n", " "), file=sys.stderr)
        return EXIT_BAD_INPUT
