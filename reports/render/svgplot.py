"""A small kit for the report's inline SVG charts (the page stays one offline file).

`Axes` maps values to pixels inside a plot's margins, linear or log on x; `linear_ticks` (a nice
upper end and its ticks from 0), `log_ticks` (1-2-5 within a range, finer when that gives too
few) and `spaced` (drop a tick label that would run into the one before it); `frame` (grid
lines, tick labels, the border), `axis_labels` (units in the words), `marker` (circle, square,
triangle, diamond, cross: a shape per series besides its colour, for colour-blind readers) and
`svg_open` (role="img" with an escaped aria-label and a <title>). Strings only; every text
passed in is escaped here. Imports neither torch nor benchmarks.* (DESIGN §1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

FONT = 'font-family="system-ui, sans-serif"'


@dataclass(frozen=True)
class Axes:
    """A plot's frame: pixels of the area inside the margins, and the values at its edges."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    x_log: bool = False

    def x(self, value: float) -> float:
        """The pixel column of `value`."""
        lo, hi = self.x_range
        if self.x_log:
            value, lo, hi = math.log(value), math.log(lo), math.log(hi)
        return self.left + (self.width - self.left - self.right) * (value - lo) / (hi - lo)

    def y(self, value: float) -> float:
        """The pixel row of `value` (up is more)."""
        lo, hi = self.y_range
        return (
            self.height
            - self.bottom
            - (self.height - self.top - self.bottom) * ((value - lo) / (hi - lo))
        )


def _nice_step(span: float, count: int) -> float:
    raw = span / max(count, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def linear_ticks(top: float, count: int = 5) -> tuple[float, list[float]]:
    """A nice upper end >= `top` (> 0) and the ticks from 0 to it."""
    step = _nice_step(top, count)
    end = step * math.ceil(top / step - 1e-9)
    return end, [step * i for i in range(round(end / step) + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks within [lo, hi], finer (1-1.5-2-3-5-7) when that gives fewer than three."""
    for mantissas in ((1, 2, 5), (1, 1.5, 2, 3, 5, 7)):
        ticks = [
            m * 10.0**k
            for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in mantissas
            if lo <= m * 10.0**k <= hi
        ]
        if len(ticks) >= 3:
            break
    return ticks


def spaced(ticks: Sequence[float], place: Callable[[float], float], gap_px: float) -> list[float]:
    """The ticks whose labels stay `gap_px` apart (the later of two close ones is dropped)."""
    kept: list[float] = []
    for tick in ticks:
        if not kept or abs(place(tick) - place(kept[-1])) >= gap_px:
            kept.append(tick)
    return kept


def tick_text(value: float) -> str:
    """'%g' up to 1e5, then '1e+05': a tick label stays short."""
    return f"{value:g}" if value < 1e5 else f"{value:.0e}"


def frame(axes: Axes, x_ticks: Sequence[float], y_ticks: Sequence[float]) -> list[str]:
    """Grid lines, tick labels and the plot's border."""
    x0, x1 = axes.left, axes.width - axes.right
    y0, y1 = axes.top, axes.height - axes.bottom
    parts = []
    for tick in y_ticks:
        y = axes.y(tick)
        parts.append(f'<line x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>')
        parts.append(
            f'<text x="{x0 - 5}" y="{y + 3.5:.1f}" font-size="10" text-anchor="end">'
            f"{tick_text(tick)}</text>"
        )
    for tick in x_ticks:
        x = axes.x(tick)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0}" y2="{y1}" stroke="#f3f4f6"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{y1 + 14}" font-size="10" text-anchor="middle">'
            f"{tick_text(tick)}</text>"
        )
    parts.append(
        f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" fill="none" '
        'stroke="#9ca3af"/>'
    )
    return parts


def axis_labels(axes: Axes, x_label: str, y_label: str) -> list[str]:
    """The x label under the tick labels, the y label turned up the left edge."""
    middle_x = (axes.left + axes.width - axes.right) / 2
    middle_y = (axes.top + axes.height - axes.bottom) / 2
    return [
        f'<text x="{middle_x:.1f}" y="{axes.height - axes.bottom + 32}" font-size="11" '
        f'text-anchor="middle">{escape(x_label)}</text>',
        f'<text transform="translate(13 {middle_y:.1f}) rotate(-90)" font-size="11" '
        f'text-anchor="middle">{escape(y_label)}</text>',
    ]


def marker(shape: str, x: float, y: float, color: str, *, filled: bool = True) -> str:
    """A point's mark centred on (x, y) px; hollow (white inside) unless `filled`."""
    fill = color if filled else "#fff"
    style = f'fill="{fill}" stroke="{color}" stroke-width="1.5"'
    if shape == "square":
        return f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" {style}/>'
    if shape in ("triangle", "diamond"):
        corners = (
            ((0, -5), (5, 4), (-5, 4))
            if shape == "triangle"
            else ((0, -5), (5, 0), (0, 5), (-5, 0))
        )
        points = " ".join(f"{x + dx:.1f},{y + dy:.1f}" for dx, dy in corners)
        return f'<polygon points="{points}" {style}/>'
    if shape == "cross":
        return (
            f'<path d="M{x - 4:.1f},{y - 4:.1f}L{x + 4:.1f},{y + 4:.1f}M{x - 4:.1f},{y + 4:.1f}'
            f'L{x + 4:.1f},{y - 4:.1f}" stroke="{color}" stroke-width="2.2"/>'
        )
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" {style}/>'


def svg_open(width: int, height: int, label: str) -> str:
    """The opening tag of an accessible chart: `label` is its aria-label and its title."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}" {FONT}>'
        f"<title>{escape(label)}</title>"
    )
