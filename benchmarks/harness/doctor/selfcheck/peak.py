"""The self-check's roofline probe: % of peak on a matrix's biggest cell without a false
`RooflineError` (issue 30, row 9).

The biggest cell of the device's matrix is the one with the most prompt tokens B x P (ties: the
most linear FLOPs per token, then file order): its prefill's GEMMs run at B x P rows, while the
suite's peak is the best `F.linear` rate over its policy's shapes, grown to the matrix's largest
B x P (`MeasurePolicy.for_device(device, tokens=...)`, as `benchmarks.suite.peaks` asks). The probe
measures the peak that way (in the doctor's budget unless `--full`) and the cell's two MLP
GEMMs (`[B*P, h] x [I, h]` and `[B*P, I] x [h, I]`, the largest of a prefill) at B x P rows,
and puts the GEMM rate against that peak. Both are measurements, each a few per cent apart from
one run to the next on a quiet machine, so one reading of each cannot tell an excess from noise
(the first rule, GEMMs above the peak re-measured once, called 2 of 3 quiet runs `bad` at
101-102 %). On an excess both are read twice more, interleaved (`Readings`): the excess counts
only where the GEMMs' lowest reading beats the peak's highest by more than the spread both
readings show (`Readings.excess_beyond_noise`). Beyond the noise but within `MATERIAL_EXCESS`
the cell's % of peak is overstated by that much (`warn`); beyond it the suite's peak is below
what the cell's own GEMMs reach and can raise a false `RooflineError` (`bad`). It also bounds
the cell's recorded prefill % of peak: every FLOP at the GEMM rate (at most the peak's, within
the noise), the FLOPs counted as the roofline counts them (`roofline.flops.prefill_flops`,
attention as `prefill_attention_pairs` says) against those a CUDA kernel executes (causal
attention skips masked tiles: P(P+1)/2 pairs).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn import functional

from benchmarks.harness.device.devices import dtype_unsupported_reason, parse_dtype
from benchmarks.harness.doctor import peakcheck
from benchmarks.harness.doctor.findings import Finding, JsonValue, ok, skip
from benchmarks.harness.matrix.cells import Cell, Matrix
from benchmarks.harness.matrix.parse import load_matrix
from benchmarks.harness.model.models import MODELS_DIR, load_model_spec
from benchmarks.harness.roofline.flops import (
    ModelShape,
    UnsupportedArchitectureError,
    prefill_attention_pairs,
    prefill_flops,
)
from benchmarks.harness.roofline.peakmeasure import (
    MeasurePolicy,
    Shape,
    best_rate,
    linear_flop,
    linear_operands,
    release_cached_memory,
)
from benchmarks.harness.roofline.peaks import measure_peaks

CHECK = "selfcheck.peak_biggest_cell"
#: Readings of each of the peak and the GEMM rate once an excess is seen (module docstring).
NOISE_READINGS = 3
#: A GEMM excess beyond the readings' noise up to this fraction overstates the cell's % of peak
#: by that much (`warn`); beyond it the peak is wrong for the cell (`bad`).
MATERIAL_EXCESS = 0.10


@dataclass(frozen=True)
class Readings:
    """Interleaved readings of the suite's peak and of the cell's GEMM rate, FLOP/s."""

    peak_flop_per_s: tuple[float, ...]
    gemm_flop_per_s: tuple[float, ...]

    @property
    def peak(self) -> float:
        """The peak the suite would use: the higher reading (a re-measure keeps the higher)."""
        return max(self.peak_flop_per_s)

    @property
    def gemm(self) -> float:
        """The GEMMs' best reading."""
        return max(self.gemm_flop_per_s)

    @property
    def noise(self) -> float:
        """The spread both readings show: each one's (max - min) / max, added."""
        return _spread(self.peak_flop_per_s) + _spread(self.gemm_flop_per_s)

    @property
    def excess(self) -> float:
        """How far the GEMMs' lowest reading beats the peak's highest (negative: it does not)."""
        return min(self.gemm_flop_per_s) / self.peak - 1.0

    @property
    def excess_beyond_noise(self) -> bool:
        """Whether the GEMMs beat the peak by more than the readings' spread."""
        return self.gemm > self.peak and self.excess > self.noise

    @property
    def excess_level(self) -> str:
        """`bad` beyond the noise and `MATERIAL_EXCESS`, `warn` beyond the noise only, else
        `ok` (the GEMMs at or below the peak)."""
        if not self.excess_beyond_noise:
            return "ok"
        return "bad" if self.excess > MATERIAL_EXCESS else "warn"


def _spread(values: tuple[float, ...]) -> float:
    return (max(values) - min(values)) / max(values)


def default_matrix(device: torch.device) -> Path:
    """The device's shipped matrix: matrix/cuda.yaml, matrix/mps.yaml, matrix/cpu.yaml."""
    return MODELS_DIR.parent / f"{device.type}.yaml"


def _linear_per_token(cell: Cell) -> int:
    try:
        return ModelShape.from_config(
            load_model_spec(cell.model).hf_config()
        ).linear_flops_per_token()
    except UnsupportedArchitectureError:
        return 0


def biggest_cell(matrix: Matrix, device_type: str) -> Cell | None:
    """The device's cell with the most prompt tokens (module docstring), or None."""
    cells = [c for c in matrix.cells if c.device.split(":")[0] == device_type]
    if not cells:
        return None
    return max(cells, key=lambda c: (c.batch * c.prompt_len, _linear_per_token(c)))


def mlp_shapes(shape: ModelShape, tokens: int) -> tuple[Shape, ...]:
    """The prefill's largest GEMMs at `tokens` rows: the MLP's up/gate and down projections."""
    h, inner = shape.hidden_size, shape.intermediate_size
    return ((tokens, h, inner), (tokens, inner, h))


def executed_share(cell: Cell, device_type: str) -> float:
    """Counted FLOPs over the FLOPs the device's kernels execute for the cell's prefill."""
    config = load_model_spec(cell.model).hf_config()
    counted = prefill_flops(config, batch=cell.batch, prompt_len=cell.prompt_len)
    if device_type != "cuda":  # CPU and MPS SDPA compute every score (roofline docstring)
        return 1.0
    p = cell.prompt_len
    causal = p * (p + 1) // 2
    attention = counted.attention_flops * causal / prefill_attention_pairs(p)
    executed = counted.linear_flops + attention + counted.lm_head_flops
    return counted.total_flops / executed


def suite_policy(device: torch.device, tokens: int, *, full: bool) -> MeasurePolicy:
    """The suite's peak policy for a matrix whose largest prefill is `tokens` rows (its shapes
    grown to them, `MeasurePolicy.for_device`), in the doctor's budget unless `full`."""
    policy = MeasurePolicy.for_device(device, tokens=tokens)
    if full:
        return policy
    quick = min(policy.budget_s, peakcheck.QUICK_BUDGET_S)
    return dataclasses.replace(policy, budget_s=quick, repeats=peakcheck.QUICK_REPEATS)


def gemm_rate(
    device: torch.device, dtype: torch.dtype, shapes: tuple[Shape, ...], policy: MeasurePolicy
) -> float:
    """The best F.linear FLOP/s over `shapes`, each measured as the peak is (`best_rate`)."""
    deadline = time.perf_counter() + policy.budget_s
    best = 0.0
    try:
        with torch.inference_mode():
            for shape in shapes:  # one shape's operands die before the next's are made
                best = max(best, _shape_rate(device, dtype, shape, policy, deadline))
    finally:
        release_cached_memory(device)
    return best


def _shape_rate(
    device: torch.device, dtype: torch.dtype, shape: Shape, policy: MeasurePolicy, deadline: float
) -> float:
    x, w = linear_operands(shape, dtype, device)
    return best_rate(lambda: functional.linear(x, w), linear_flop(shape), device, policy, deadline)


def judge_peak(
    cell: Cell,
    readings: Readings,
    *,
    sheet_flop_per_s: float | None,
    share: float,
    peak_tokens: int | None = None,
) -> Finding:
    """`bad` when the GEMMs at the cell's B x P beat the suite's peak beyond the readings' noise
    by more than `MATERIAL_EXCESS` (a false RooflineError); `warn` below that, or when the bound
    on the prefill's % of peak passes 100 %; else `ok`."""
    tokens = cell.batch * cell.prompt_len
    gemm, peak = readings.gemm, readings.peak
    data: dict[str, JsonValue] = {
        "cell": cell.id,
        "tokens": tokens,
        "gemm_flop_per_s": gemm,
        "peak_flop_per_s": peak,
        "datasheet_flop_per_s": sheet_flop_per_s,
        "peak_remeasured": len(readings.peak_flop_per_s) > 1,
        "peak_flop_tokens": peak_tokens,
        "readings": len(readings.peak_flop_per_s),
        "noise_pct": readings.noise * 100.0,
        "excess_beyond_noise": readings.excess_beyond_noise,
    }
    sheet = (
        "no datasheet row"
        if sheet_flop_per_s is None
        else f"{_t(sheet_flop_per_s)} on the datasheet"
    )
    count = len(readings.peak_flop_per_s)
    spread = f"their spreads adding to {readings.noise * 100:.1f} %"
    text = (
        f"{cell.id} (B*P = {tokens}): peak {_t(peak)} measured"
        f"{'' if peak_tokens is None else f' at up to {peak_tokens} rows'}"
        f"{f' ({count} readings each, {spread})' if count > 1 else ''}"
        f" ({sheet}), its MLP GEMMs at {tokens} rows {_t(gemm)}"
    )
    pct = data["gemm_pct_of_peak"] = gemm / peak * 100.0
    if readings.excess_level != "ok":
        beyond = f"{text} = {pct:.0f} % of it, {readings.excess * 100:.1f} % beyond the noise"
        if readings.excess_level == "bad":
            return Finding(
                CHECK,
                "bad",
                f"{beyond}: the suite's peak is below what this cell's own GEMMs reach, so its "
                "prefill_pct_of_peak_flops is overstated and can pass 100 % (a false "
                "RooflineError)",
                "measure the peak at the matrix's largest B*P (roofline/peakmeasure.py), or leave "
                "this cell out until the roofline does",
                data,
            )
        return Finding(
            CHECK,
            "warn",
            f"{beyond}: this cell's prefill_pct_of_peak_flops reads up to "
            f"{readings.excess * 100:.0f} % high (its GEMM shapes run faster than the peak's)",
            "read this cell's % of peak with that in mind, or measure the peak with --full",
            data,
        )
    # Within the noise the GEMMs run at the peak: the bound takes them at 100 % of it.
    at_most = min(pct, 100.0)
    bound = at_most * share
    data["prefill_pct_of_peak_bound"] = bound
    within = " (within the readings' noise: at the peak)" if pct > 100.0 else ""
    text += (
        f" = {pct:.0f} % of it{within}; the prefill's recorded % of peak is at "
        f"most {bound:.0f} % (all its FLOPs at that rate, attention counted as the roofline "
        f"counts it: {share:.2f}x what the kernel executes)"
    )
    if bound > 100.0:
        return Finding(
            CHECK,
            "warn",
            f"{text}: above 100 %, so a fast prefill raises RooflineError after a re-measure",
            "count causal attention pairs (roofline/flops.py) before running this cell here",
            data,
        )
    return ok(CHECK, text, **data)


def probe_peak(device: torch.device, matrix_path: Path | None, *, full: bool) -> Finding:
    """% of peak on the biggest cell of the matrix (module docstring)."""
    path = matrix_path or default_matrix(device)
    cell = biggest_cell(load_matrix(path), device.type)
    if cell is None:
        return skip(CHECK, f"{path} has no {device.type} cell")
    dtype = parse_dtype(cell.dtype)
    reason = dtype_unsupported_reason(device, dtype)
    if reason is not None:
        return skip(CHECK, f"{cell.id}: {reason}")
    try:
        shape = ModelShape.from_config(load_model_spec(cell.model).hf_config())
        share = executed_share(cell, device.type)
    except UnsupportedArchitectureError as error:
        return skip(CHECK, f"{cell.id}: {error}")
    tokens = cell.batch * cell.prompt_len
    policy = suite_policy(device, tokens, full=full)
    shapes = mlp_shapes(shape, tokens)
    sheet = peakcheck.datasheet(device, dtype)
    peaks: list[float] = []
    gemms: list[float] = []
    for _ in range(NOISE_READINGS):  # interleaved, so a drifting machine moves both alike
        peak = measure_peaks(device, dtype, policy).flop_per_s
        if peak is None:
            return Finding(
                CHECK, "warn", f"{cell.id}: the peak was not measured", "rerun with --full"
            )
        peaks.append(peak)
        gemms.append(gemm_rate(device, dtype, shapes, policy))
        if gemms[0] <= peaks[0]:  # no excess: nothing for the noise to explain
            break
    return judge_peak(
        cell,
        Readings(tuple(peaks), tuple(gemms)),
        sheet_flop_per_s=None if sheet is None else sheet.flop_per_s,
        share=share,
        peak_tokens=max(rows for rows, _, _ in policy.linear_shapes),
    )


def _t(flop_per_s: float) -> str:
    if flop_per_s >= 1e12:
        return f"{flop_per_s / 1e12:,.1f} TFLOP/s"
    return f"{flop_per_s / 1e9:,.1f} GFLOP/s"
