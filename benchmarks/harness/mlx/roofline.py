"""Roofline fields of an MLX cell: the same names and rules as torch's (`roofline.roofline`).

FLOPs are the architecture's (`roofline.flops`, from the config; the prefill's logits at the
last position only, as the MLX engine computes them). Bytes are MLX's own: the weights at their
stored size (`weights.stored_bytes`: an mlx4 / mlx8 layer's packed words, scales and biases),
an embedding that is not the LM head read for one row per token; the KV read and written at the
used positions' bytes of mlx-lm's cache (`account.MlxKV.predict`: a layer whose window mlx-lm
ignores reads every position; a quantized cache its packed bytes). The peaks are the machine's,
the same figures the torch cells of the run are judged against, so the two engines' achieved
bandwidth is comparable.

It deliberately imports no mlx at module level.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.harness.roofline.flops import (
    UnsupportedArchitectureError,
    decode_step_flops,
    prefill_flops,
)
from benchmarks.harness.roofline.peaks import Peaks
from benchmarks.harness.roofline.roofline import (
    achieved_fraction,
    bandwidth_fraction,
    peak_fields,
)


def weights_read_bytes(model: Any, *, rows: int) -> int:
    """Stored bytes one forward of `rows` tokens reads: every parameter array once, except an
    embedding table that is not the LM head (the model has an `lm_head`), read for `rows` rows."""
    from mlx.nn.layers.embedding import Embedding  # noqa: PLC0415 - optional dependency
    from mlx.nn.layers.quantized import QuantizedEmbedding  # noqa: PLC0415 - optional dependency

    modules = dict(model.named_modules())
    untied = "lm_head" in modules
    total = 0
    for module in modules.values():
        own = [v for k, v in module.parameters().items() if not isinstance(v, dict | list)]
        nbytes = sum(int(v.nbytes) for v in own)
        if untied and isinstance(module, Embedding | QuantizedEmbedding):
            table_rows = int(module.weight.shape[0])
            nbytes = nbytes // table_rows * min(rows, table_rows)
        total += nbytes
    return total


def roofline_fields(
    *,
    model: Any,
    config: Any,
    batch: int,
    prompt_len: int,
    peaks: Peaks,
    used_kv: Callable[[int], int],
    prefill_s: float | None = None,
    decode_step_s: float | None = None,
) -> dict[str, float | str | None]:
    """`roofline_extra_info`'s fields for an MLX cell (`used_kv(positions)`: used KV bytes)."""
    fields = peak_fields(peaks)
    try:
        if prefill_s is not None and prefill_s > 0:
            flops = prefill_flops(config, batch=batch, prompt_len=prompt_len).total_flops
            moved = weights_read_bytes(model, rows=batch * prompt_len) + used_kv(prompt_len)
            rate = flops / prefill_s
            fields.update(prefill_flop=flops, prefill_bytes=moved, prefill_flop_per_s=rate)
            fields["prefill_pct_of_peak_flops"] = achieved_fraction(
                rate, peaks.flop_per_s, what="prefill FLOP/s"
            )
        if decode_step_s is not None and decode_step_s > 0:
            step = decode_step_flops(config, batch=batch, context_len=prompt_len).total_flops
            read = used_kv(prompt_len)
            written = used_kv(prompt_len + 1) - read
            moved = weights_read_bytes(model, rows=batch) + read + written
            rate = moved / decode_step_s
            fields.update(decode_flop=step, decode_bytes=moved, decode_bytes_per_s=rate)
            pct, note = bandwidth_fraction(
                moved, rate, peaks, mover="decode moves", what="decode bytes/s"
            )
            fields["decode_pct_of_peak_bandwidth"] = pct
            if note is not None:
                fields["roofline_note"] = note
    except UnsupportedArchitectureError as unsupported:
        fields["roofline_note"] = str(unsupported)
    return fields
