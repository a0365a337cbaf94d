"""Measure the accuracy behind `quant.accuracy.ACCURACY_BOUNDS` and `SQNR_BOUNDS_DB`.

`python -m benchmarks.calibration.accuracy_bounds [--models a,b] [--models-dir DIR] [--seeds
0,1,2] [--prompt-len 64] [--new-tokens 24] [--kv-residual 16] [--json FILE]` builds each model
(random weights, each seed; a `source: checkpoint` model file in `--models-dir` loads its real
weights) in float32 and bfloat16 (float32 only for models above 50M parameters: bfloat16 is
emulated on AVX2 CPUs), runs the dense reference, then every weight method and every KV method
that runs here through `measure_accuracy`, and prints per method the worst and median |Δ logit|
in reference standard deviations, the least agreement, the least per-tensor SQNR, the largest
mean KL, and the bounds the rules give (logits: 1.5 x worst, half the least agreement; SQNR:
the least value less 6 dB, rounded down, at most the field's figure). Nothing is timed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.engine import make_prompt
from benchmarks.harness.kvquant.backends import (
    KV_QUANT,
    kv_quant_unsupported_reason,
    make_quantized_cache,
)
from benchmarks.harness.model.models import (
    MODELS_DIR,
    build_model,
    load_model_spec,
    parameter_count,
)
from benchmarks.harness.quant.accuracy import Bound, measure_accuracy, reference_outputs
from benchmarks.harness.quant.methods import apply_quant, quant_skip_reason
from benchmarks.harness.quant.names import METHODS

CPU = torch.device("cpu")
LARGE_PARAMETERS = 50_000_000


def _rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in args.models.split(","):
        spec = load_model_spec(name, args.models_dir or MODELS_DIR)
        large = parameter_count(build_model(spec, torch.device("meta"), torch.float32))
        dtypes = [torch.float32] if large > LARGE_PARAMETERS else [torch.float32, torch.bfloat16]
        if args.dtypes:
            dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
        for dtype in dtypes:
            for seed in (int(s) for s in args.seeds.split(",")):
                rows.extend(_one(args, name, dtype, seed))
                print(f"{name} {dtype} seed {seed} done", file=sys.stderr)
    return rows


def _one(
    args: argparse.Namespace, name: str, dtype: torch.dtype, seed: int
) -> list[dict[str, Any]]:
    spec = load_model_spec(name, args.models_dir or MODELS_DIR)
    dense = build_model(spec, CPU, dtype, seed=seed)
    vocab = int(dense.config.get_text_config().vocab_size)
    reference = reference_outputs(
        dense, CPU, make_prompt(1, args.prompt_len, vocab, seed), args.new_tokens
    )
    spread = float(reference.logits.std())
    found = []
    for method in METHODS[1:]:
        if quant_skip_reason(method, CPU, dtype) is not None:
            continue
        model = apply_quant(build_model(spec, CPU, dtype, seed=seed), method, CPU)
        found.append(
            (method, measure_accuracy(model, reference, CPU, None, Bound(0, 0), quant=method))
        )
    for kv in KV_QUANT:
        if kv_quant_unsupported_reason(kv, dense.config, "cpu") is not None:
            continue
        cache = make_quantized_cache(dense, kv, group_size=64, residual=args.kv_residual, batch=1)
        found.append((kv, measure_accuracy(dense, reference, CPU, cache, Bound(0, 0), kv_quant=kv)))
    return [
        {
            "model": name,
            "dtype": str(dtype).removeprefix("torch."),
            "seed": seed,
            "method": method,
            "delta_std": accuracy.max_abs_logit_delta / spread,
            "agreement_ratio": accuracy.top1_agreement_ratio,
            "sqnr_db_min": accuracy.sqnr_db_min,
            "logits_kl": accuracy.logits_kl,
        }
        for method, accuracy in found
    ]


def summary(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per method: worst and median delta, least agreement, the bound the rule gives."""
    lines = []
    for method in dict.fromkeys(row["method"] for row in rows):
        mine = [row for row in rows if row["method"] == method]
        deltas = sorted(row["delta_std"] for row in mine)
        least = min(row["agreement_ratio"] for row in mine)
        sqnr = min(row["sqnr_db_min"] for row in mine if row["sqnr_db_min"] is not None)
        kl = max(row["logits_kl"] for row in mine)
        lines.append(
            f"{method:12s} worst {deltas[-1]:.3f} std (median {deltas[len(deltas) // 2]:.3f}), "
            f"least agreement {least:.3f}, least SQNR {sqnr:.1f} dB, largest KL {kl:.2e}, "
            f"n={len(mine)} -> Bound({math.ceil(15 * deltas[-1]) / 10}, "
            f"{math.floor(10 * least) / 20}), SQNR >= {sqnr_bound(method, sqnr):.0f} dB"
        )
    return lines


#: The field's figure per method (int8 and fp8 at 30 dB, 4 bits at 15): a bound never above it.
FIELD_DB = {"fp8": 30.0, "hqq8": 30.0, "int8wo": 30.0, "int8dq": 30.0, "bnb8": 30.0,
            "fp8wo": 30.0, "fp8dq": 30.0}  # fmt: skip
FOUR_BIT_DB = 15.0
MARGIN_DB = 6.0  # one bit


def sqnr_bound(method: str, least_db: float) -> float:
    """The SQNR bound the rule gives: the least measured less one bit (6 dB; half the least
    where that is smaller, so a 2-bit bound stays above the 0 dB of a doubled scale), rounded
    down to a whole dB, at most the field's figure (30 dB for 8-bit, 15 dB for 4 and 2 bits)."""
    margin = min(MARGIN_DB, least_db / 2)
    return min(FIELD_DB.get(method, FOUR_BIT_DB), math.floor(least_db - margin))


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the summary (and the rows as JSON with --json)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calibration.accuracy_bounds")
    parser.add_argument("--models", default="tiny-llama,tiny-qwen2,smollm2-135m")
    parser.add_argument("--models-dir", type=Path, default=None)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--dtypes", default="", help="e.g. float32,bfloat16 (default: by size)")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--kv-residual", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = _rows(args)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
