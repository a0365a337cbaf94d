"""KV cache: analytic bytes == measured bytes after prefill and after every decode step.

The cell's weights too: stored bytes (`quant.stored`, quantized tensors at their real size)
equal the analytic prediction from the config (`quant.predict`), dense or quantized.

Not timed and not a history record (nothing in it is a performance figure; the `kv_*_bytes`
fields of the other measurements carry the exact byte counts into history). One untimed
generation of N tokens (the asserting pass the cell's `test_generate` ran just before it,
`suite.handoff`; its own where it runs alone, or with a static cache read at every point) gives
the measured logical bytes of every K/V tensor of the cache after
prefill (P positions) and after each decode step (P + i positions); `kv.analytic_kv` gives what
the architecture's config says they must be. Every cell asserts equality at every point
(DESIGN §4), and the fixed conv/recurrent state of hybrid models (`state.analytic_state`)
against the final cache's measured state. An MLX cell (DESIGN §14) asserts mlx-lm's arrays
(their step-256 allocation) against the prediction at every point, and the used positions'
bytes beside them, through the same calls (`CellModel.kv`).
"""

from __future__ import annotations

from benchmarks.harness.records import KVCheck
from benchmarks.suite import handoff
from benchmarks.suite.rounds import CellRun


def test_kv_cache(run: CellRun) -> None:
    """Analytic and measured KV bytes agree after prefill and after every decode step."""
    cell, loaded = run.cell, run.loaded
    kv = loaded.kv(cell)
    # The pass the cell's test_generate just ran (`suite.handoff`), unless this check reads
    # more of the cache at each point than that pass did (a static cell's probe).
    kept = handoff.take(cell.id)
    probe = kv.probe
    result = (
        kept
        if kept is not None and probe is None
        else loaded.engine.generate(run.prompt, cell.new_tokens, probe=probe)
    )
    del kept
    analytic = tuple(kv.analytic_bytes(cell.prompt_len + step) for step in range(cell.new_tokens))
    final = kv.point(result.cache, cell.final_positions)
    check = KVCheck(
        bytes_per_token=kv.bytes_per_token,
        analytic_bytes=analytic,
        measured_bytes=(result.kv_bytes_after_prefill, *result.kv_bytes_per_step),
        storage_final_bytes=final.storage_bytes,
    )
    mismatches = [*check.mismatches(), *final.mismatches]  # the final state, static fields
    # Weights: stored bytes (quantized tensors at their real size) == the analytic prediction.
    weights = loaded.weights_mismatch()
    if weights is not None:
        mismatches.append(weights)
    # Every point: a static cache's allocated and used bytes (§9), MLX's used bytes (§14).
    mismatches.extend(kv.checks(run.prompt, result))
    run.progress(
        f"{cell.id}: KV {check.measured_bytes[-1]} bytes after {cell.new_tokens} tokens, "
        f"{len(analytic) - len(mismatches)}/{len(analytic)} points match"
    )
    assert not mismatches, f"{cell.id}: KV bytes differ: " + "; ".join(mismatches)
