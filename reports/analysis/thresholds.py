"""`--threshold` values as the gate, the A/B judge and the simulation read them: '5%' or 0.05,
optionally per metric (`decode_step_s=3%`)."""

from __future__ import annotations

from collections.abc import Sequence

from reports.errors import ReportError


def parse_fraction(text: str) -> float:
    """'5%' or '0.05' -> 0.05; ReportError when not a non-negative number."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ReportError(f"--threshold value {text!r} is not a number: write 5% or 0.05") from None
    if not 0.0 <= value < 10.0:
        raise ReportError(f"--threshold value {text!r} is out of range: use 0 <= threshold < 10")
    return value


def parse_thresholds(items: Sequence[str]) -> tuple[float | None, dict[str, float]]:
    """`--threshold` items -> (default or None, per-metric thresholds)."""
    default: float | None = None
    per_metric: dict[str, float] = {}
    for item in items:
        if "=" in item:
            metric, value = item.split("=", 1)
            if not metric.strip():
                raise ReportError(f"--threshold {item!r} names no metric: write decode_step_s=3%")
            per_metric[metric.strip()] = parse_fraction(value)
        else:
            default = parse_fraction(item)
    return default, per_metric
