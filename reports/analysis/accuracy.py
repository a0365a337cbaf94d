"""Accuracy beside speed: a quantized cell's distance from the unquantized model, and its flag.

Every record of a quantized cell (`params` naming `quant` or `kv_quant` other than `none`)
carries what the benchmark side measured once per cell, untimed, against the same model
unquantized on the same prompt:

- `accuracy_max_abs_logit_delta`: max |Δ logit| over the first 16 generated positions,
  teacher-forced (logits are unitless);
- `accuracy_top1_agreement_ratio`: teacher-forced top-1 agreement over the `accuracy_tokens`
  generated tokens (0..1);
- the method's documented bounds, `accuracy_bound_max_abs_logit_delta` (a largest delta) and
  `accuracy_bound_top1_agreement_ratio` (a least agreement), and `accuracy_flag` (true when the
  cell is outside a bound; the benchmark side decides it, this module reads it);
- `quant_sqnr_db_min` (dB: the lowest SQNR of any quantized Linear on the cell's own inputs or
  K/V layer as read back, against the dense model; `quant_sqnr_db_min_tensor` names it),
  `quant_sqnr_db_weights_bound` / `quant_sqnr_db_kv_bound` (the methods' least SQNR, with
  `quant_sqnr_db_weights_min` / `quant_sqnr_db_kv_min`), `quant_sqnr_db` (per kind, per layer)
  and `quant_logits_kl` (nats: the mean KL divergence of the next-token distributions);
- `weights_left_dense` (the Linears the method left dense, by kind, with the reason).

A flag is said like an implausible change (`ACCURACY` lines in the gate, the headline, the
report's box for a human), never judged:

- not against history: the bound is the reference that means something, and it is absolute, so
  a cell that is out of it is out in its first run too (no baseline needed) and a cell inside
  it is fine however its delta moved since the last run (a library upgrade moves logits by
  1e-6 with nothing broken; an exact comparison would fail that, a noise model has one value);
- not a FAIL by itself: the gate's statuses are statistical claims about speed; the bounds
  were measured on random-weight models (nearly flat logits, loose on purpose), and a flag is
  often the installed quantization library's, not the pull request's. A flag that stayed would
  turn every later run red and teach people to ignore the gate. It is a finding for a human,
  named on every status (PASS included) until it is gone.

Deliberately not here: the table of the quantization view (`reports.render.quant`), wording of
the headline (`reports.render.headline`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reports.analysis.metrics import is_accuracy_metric
from reports.history.runfile import BenchmarkResult, Scalar

QUANT_AXES = ("quant", "kv_quant")
NOT_QUANTIZED = "none"  # an axis the matrix does not name is `none` too


def quant_mode(params: Mapping[str, Scalar]) -> tuple[str, str]:
    """(quant, kv_quant) of a cell; `none` where the matrix does not name the axis."""
    quant, kv_quant = (params.get(axis) for axis in QUANT_AXES)
    return (
        NOT_QUANTIZED if quant in (None, "") else str(quant),
        NOT_QUANTIZED if kv_quant in (None, "") else str(kv_quant),
    )


def is_quantized(params: Mapping[str, Scalar]) -> bool:
    """Whether the cell quantizes its weights or its KV cache."""
    return quant_mode(params) != (NOT_QUANTIZED, NOT_QUANTIZED)


def _number(raw: object) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        return None
    return float(raw)


def _figure(value: float | None, digits: str) -> str:
    return "n/a" if value is None else f"{value:{digits}}"


@dataclass(frozen=True)
class Accuracy:
    """One quantized cell's accuracy against the unquantized model (None: not recorded)."""

    cell_id: str
    quant: str
    kv_quant: str
    max_abs_logit_delta: float | None  # logits are unitless
    top1_agreement_ratio: float | None
    tokens: int | None
    bound_max_abs_logit_delta: float | None
    bound_top1_agreement_ratio: float | None
    flagged: bool
    sqnr_db_min: float | None = None
    sqnr_db_min_tensor: str | None = None
    sqnr_weights_db: tuple[float | None, float | None] = (None, None)  # (least, bound)
    sqnr_kv_db: tuple[float | None, float | None] = (None, None)
    logits_kl: float | None = None  # nats
    sqnr_by_kind: tuple[tuple[str, tuple[float, ...]], ...] = ()
    left_dense: tuple[tuple[str, int, str], ...] = ()  # (linears, count, reason)

    @property
    def mode(self) -> str:
        """ "int4wo-g32/hqq4" """
        return f"{self.quant}/{self.kv_quant}"

    @property
    def sqnr_outside(self) -> bool:
        """Whether a quantized tensor's SQNR is under its method's bound (weights or cache)."""
        return any(
            _beyond(bound, least) for least, bound in (self.sqnr_weights_db, self.sqnr_kv_db)
        )

    def _named(self) -> bool:
        """Whether some figure is out of its bound (else the flag names none of them)."""
        return (
            _beyond(self.max_abs_logit_delta, self.bound_max_abs_logit_delta)
            or _beyond(self.bound_top1_agreement_ratio, self.top1_agreement_ratio)
            or self.sqnr_outside
        )

    @property
    def delta_outside(self) -> bool:
        """Whether max |Δ logit| is the figure out of its bound (every figure, for a flag that
        names none: the recorded flag is the benchmark side's word)."""
        if not self.flagged:
            return False
        return (
            _beyond(self.max_abs_logit_delta, self.bound_max_abs_logit_delta) or not self._named()
        )

    @property
    def agreement_outside(self) -> bool:
        """Whether the top-1 agreement is the figure out of its bound (as `delta_outside`)."""
        if not self.flagged:
            return False
        below = _beyond(self.bound_top1_agreement_ratio, self.top1_agreement_ratio)
        return below or not self._named()

    @property
    def sqnr_text(self) -> str:
        """ "18.2 dB (bound 15)"; for weights and cache both, the one nearer its bound."""
        least, bound = self._sqnr_nearest()
        if least is None:
            return "n/a"
        shown = "n/a" if bound is None else f"{bound:.0f}"
        return f"{least:.1f} dB (bound {shown})"

    def _sqnr_nearest(self) -> tuple[float | None, float | None]:
        pairs = [p for p in (self.sqnr_weights_db, self.sqnr_kv_db) if p[0] is not None]
        if not pairs:
            return self.sqnr_db_min, None
        return min(pairs, key=lambda p: (p[0] or 0.0) - (p[1] or 0.0))

    @property
    def kl_text(self) -> str:
        """ "3.1e-05" (nats)"""
        return _figure(self.logits_kl, ".2g")

    @property
    def delta_text(self) -> str:
        """ "3.2 (bound 0.5)" """
        return (
            f"{_figure(self.max_abs_logit_delta, '.3g')} "
            f"(bound {_figure(self.bound_max_abs_logit_delta, '.3g')})"
        )

    @property
    def agreement_text(self) -> str:
        """ "0.406 (bound 0.8)" """
        return (
            f"{_figure(self.top1_agreement_ratio, '.3g')} "
            f"(bound {_figure(self.bound_top1_agreement_ratio, '.3g')})"
        )

    @property
    def text(self) -> str:
        """ "max |Δ logit| 3.2 (bound 0.5), top-1 agreement 0.406 (bound 0.8)" and, where
        recorded, ", SQNR min 0.0 dB (bound 15) at <tensor>" """
        text = f"max |Δ logit| {self.delta_text}, top-1 agreement {self.agreement_text}"
        if self.sqnr_db_min is not None:
            where = f" at {self.sqnr_db_min_tensor}" if self.sqnr_db_min_tensor else ""
            text += f", SQNR min {self.sqnr_text}{where}"
        return text

    def line(self, machine_id: str) -> str:
        """The gate's line: "ACCURACY <cell> <quant>/<kv_quant>: <text> [<machine>]"."""
        return f"ACCURACY {self.cell_id} {self.mode}: {self.text} [{machine_id}]"


def _beyond(value: float | None, limit: float | None) -> bool:
    return value is not None and limit is not None and value > limit


def record_accuracy(bench: BenchmarkResult) -> Accuracy | None:
    """The accuracy one record carries, or None (a dense cell, or no accuracy recorded)."""
    extra = bench.extra
    if not any(is_accuracy_metric(key) for key in extra):
        return None
    tokens = _number(extra.get("accuracy_tokens"))
    quant, kv_quant = quant_mode(bench.params)
    tensor = extra.get("quant_sqnr_db_min_tensor")
    return Accuracy(
        cell_id=bench.cell_id,
        quant=quant,
        kv_quant=kv_quant,
        max_abs_logit_delta=_number(extra.get("accuracy_max_abs_logit_delta")),
        top1_agreement_ratio=_number(extra.get("accuracy_top1_agreement_ratio")),
        tokens=None if tokens is None else int(tokens),
        bound_max_abs_logit_delta=_number(extra.get("accuracy_bound_max_abs_logit_delta")),
        bound_top1_agreement_ratio=_number(extra.get("accuracy_bound_top1_agreement_ratio")),
        flagged=extra.get("accuracy_flag") is True,
        sqnr_db_min=_number(extra.get("quant_sqnr_db_min")),
        sqnr_db_min_tensor=tensor if isinstance(tensor, str) else None,
        sqnr_weights_db=(
            _number(extra.get("quant_sqnr_db_weights_min")),
            _number(extra.get("quant_sqnr_db_weights_bound")),
        ),
        sqnr_kv_db=(
            _number(extra.get("quant_sqnr_db_kv_min")),
            _number(extra.get("quant_sqnr_db_kv_bound")),
        ),
        logits_kl=_number(extra.get("quant_logits_kl")),
        sqnr_by_kind=_by_kind(extra.get("quant_sqnr_db")),
        left_dense=_left_dense(extra.get("weights_left_dense")),
    )


def _by_kind(raw: object) -> tuple[tuple[str, tuple[float, ...]], ...]:
    if not isinstance(raw, Mapping):
        return ()
    return tuple(
        (str(kind), tuple(v for v in (_number(x) for x in values) if v is not None))
        for kind, values in raw.items()
        if isinstance(values, list)
    )


def _left_dense(raw: object) -> tuple[tuple[str, int, str], ...]:
    if not isinstance(raw, list):
        return ()
    found = []
    for entry in raw:
        if isinstance(entry, Mapping) and isinstance(entry.get("linears"), str):
            count = _number(entry.get("count"))
            found.append((entry["linears"], int(count or 0), str(entry.get("reason", ""))))
    return tuple(found)


def cell_accuracy(benchmarks: Iterable[BenchmarkResult]) -> dict[str, Accuracy]:
    """Cell id -> its accuracy, from the first of its records that carries one (each record of
    a cell carries the same: measured once per cell); a record that flags wins, so a cell whose
    records disagree is never shown as fine."""
    out: dict[str, Accuracy] = {}
    for bench in benchmarks:
        found = record_accuracy(bench)
        if found is None:
            continue
        kept = out.get(found.cell_id)
        if kept is None or (found.flagged and not kept.flagged):
            out[found.cell_id] = found
    return out


def accuracy_flags(benchmarks: Iterable[BenchmarkResult]) -> tuple[Accuracy, ...]:
    """The flagged cells (outside their method's bound), by cell id."""
    cells = cell_accuracy(benchmarks)
    return tuple(cells[cell] for cell in sorted(cells) if cells[cell].flagged)
