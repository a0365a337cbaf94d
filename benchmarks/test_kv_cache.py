"""KV cache: analytic bytes == measured bytes after prefill and after every decode step.

The cell's weights too: stored bytes (`quant.stored`, quantized tensors at their real size)
equal the analytic prediction from the config (`quant.predict`), dense or quantized.

Not timed and not a history record (nothing in it is a performance figure; the `kv_*_bytes`
fields of the other measurements carry the exact byte counts into history). One untimed
generation of N tokens gives the measured logical bytes of every K/V tensor of the cache after
prefill (P positions) and after each decode step (P + i positions); `kv.analytic_kv` gives what
the architecture's config says they must be. Every cell asserts equality at every point
(DESIGN §4), and the fixed conv/recurrent state of hybrid models (`state.analytic_state`)
against the final cache's measured state.
"""

from __future__ import annotations

from benchmarks.harness.cache.kv import kv_bytes_per_token
from benchmarks.harness.cache.measure import measure_kv
from benchmarks.harness.cache.state import state_fields, state_mismatch
from benchmarks.harness.records import KVCheck
from benchmarks.harness.runmode.kvlayout import analytic_layout, static_check
from benchmarks.suite.rounds import CellRun


def test_kv_cache(run: CellRun) -> None:
    """Analytic and measured KV bytes agree after prefill and after every decode step."""
    cell, loaded = run.cell, run.loaded
    result = loaded.engine.generate(run.prompt, cell.new_tokens)
    analytic = tuple(
        analytic_layout(
            cell, loaded.config, dtype=loaded.dtype, seq_len=cell.prompt_len + step
        ).total_bytes
        for step in range(cell.new_tokens)
    )
    final = measure_kv(result.cache)
    check = KVCheck(
        bytes_per_token=kv_bytes_per_token(loaded.config, dtype=loaded.dtype, batch=cell.batch),
        analytic_bytes=analytic,
        measured_bytes=(result.kv_bytes_after_prefill, *result.kv_bytes_per_step),
        storage_final_bytes=final.storage_bytes,
    )
    mismatches = check.mismatches()
    state = state_mismatch(state_fields(loaded.config, loaded.dtype, cell.batch, final.state_bytes))
    if state is not None:
        mismatches.append(f"after {cell.new_tokens} tokens: {state}")
    # Weights: stored bytes (quantized tensors at their real size) == the analytic prediction.
    weights = loaded.weights_mismatch()
    if weights is not None:
        mismatches.append(weights)
    if cell.cache == "static":  # allocated and used bytes, per layer, at every point (§9)
        mismatches.extend(static_check(loaded.model, run.prompt, cell, loaded.dtype))
    run.progress(
        f"{cell.id}: KV {check.measured_bytes[-1]} bytes after {cell.new_tokens} tokens, "
        f"{len(analytic) - len(mismatches)}/{len(analytic)} points match"
    )
    assert not mismatches, f"{cell.id}: KV bytes differ: " + "; ".join(mismatches)
