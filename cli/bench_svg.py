"""Small self-contained SVG plots (no scripts, no external links) for the bench report."""

from __future__ import annotations

import math
from html import escape

import numpy as np

PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks of a log10 axis from ``lo`` to ``hi`` (log10 values), at 1, 2 and 5 times powers of ten (only powers
    of ten over a wide range): their log10 values."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    for mantissas in ((1, 2, 5), (1,)) if hi - lo <= 3 else ((1,),):
        ticks = [math.log10(m) + k for k in range(math.floor(lo), math.ceil(hi) + 1) for m in mantissas]
        ticks = [t for t in ticks if lo - 1e-9 <= t <= hi + 1e-9]
        if 2 <= len(ticks) <= 8:
            return ticks
    return nice_ticks(lo, hi)


def fmt(x: float) -> str:
    return f"{x:.4g}"


class _Frame:
    """Maps data to pixels inside a plot area with margins."""

    def __init__(self, width: int, height: int, left: int, right: int, top: int, bottom: int,
                 x: tuple[float, float], y: tuple[float, float]):
        self.width, self.height = width, height
        self.x0, self.x1 = left, width - right
        self.y0, self.y1 = top, height - bottom
        self.xlo, self.xhi = x if x[1] > x[0] else (x[0] - 0.5, x[0] + 0.5)
        self.ylo, self.yhi = y if y[1] > y[0] else (y[0] - 0.5, y[0] + 0.5)

    def px(self, x: float) -> float:
        return self.x0 + (x - self.xlo) / (self.xhi - self.xlo) * (self.x1 - self.x0)

    def py(self, y: float) -> float:
        return self.y1 - (y - self.ylo) / (self.yhi - self.ylo) * (self.y1 - self.y0)

    def open(self, title: str) -> list[str]:
        return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}" role="img"><title>{escape(title)}</title>',
                f'<rect x="0" y="0" width="{self.width}" height="{self.height}" fill="white"/>']

    def x_axis(self, label: str, label_y: float | None = None, integer: bool = False) -> list[str]:
        """The x axis; ``integer``: ticks only at whole numbers (trial numbers)."""
        out = [f'<line x1="{self.x0}" y1="{self.y1}" x2="{self.x1}" y2="{self.y1}" stroke="#333"/>']
        ticks = nice_ticks(self.xlo, self.xhi)
        if integer:
            ticks = sorted({round(t) for t in ticks if abs(t - round(t)) < 1e-9 and self.xlo <= t <= self.xhi}) or \
                [round((self.xlo + self.xhi) / 2)]
        for t in ticks:
            x = self.px(t)
            out.append(f'<line x1="{x:.1f}" y1="{self.y1}" x2="{x:.1f}" y2="{self.y1 + 4}" stroke="#333"/>'
                       f'<text x="{x:.1f}" y="{self.y1 + 16}" text-anchor="middle" {FONT}>{fmt(t)}</text>')
        out.append(f'<text x="{(self.x0 + self.x1) / 2:.1f}" y="{self.height - 4 if label_y is None else label_y}" '
                   f'text-anchor="middle" {FONT}>{escape(label)}</text>')
        return out

    def y_axis(self, label: str, log: bool = False) -> list[str]:
        """The y axis; ``log``: the values are log10 of what the ticks say."""
        out = [f'<line x1="{self.x0}" y1="{self.y0}" x2="{self.x0}" y2="{self.y1}" stroke="#333"/>']
        for t in log_ticks(self.ylo, self.yhi) if log else nice_ticks(self.ylo, self.yhi):
            y = self.py(t)
            out.append(f'<line x1="{self.x0 - 4}" y1="{y:.1f}" x2="{self.x1}" y2="{y:.1f}" stroke="#eee"/>'
                       f'<text x="{self.x0 - 6}" y="{y + 4:.1f}" text-anchor="end" {FONT}>'
                       f'{fmt(10 ** t if log else t)}</text>')
        mid = (self.y0 + self.y1) / 2
        out.append(f'<text x="12" y="{mid:.1f}" transform="rotate(-90 12 {mid:.1f})" text-anchor="middle" '
                   f'{FONT}>{escape(label)}</text>')
        return out


def distribution_plot(series: dict[str, list[float]], unit: str = "ms", scale: float = 1e3,
                      width: int = 760, seed: int = 0) -> str:
    """One row per runtime: every sample as a jittered dot, the p10–p90 box and the median line."""
    rows = {k: np.asarray(v, dtype=np.float64) * scale for k, v in series.items() if len(v)}
    if not rows:
        return ""
    allv = np.concatenate(list(rows.values()))
    lo, hi = float(np.min(allv)), float(np.percentile(allv, 99.5))
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    row_h = 46
    f = _Frame(width, 40 + row_h * len(rows), 130, 20, 10, 30, (max(0.0, lo - pad), hi + pad), (0, len(rows)))
    out = f.open("latency distribution")
    rng = np.random.default_rng(seed)
    for i, (name, v) in enumerate(rows.items()):
        color = PALETTE[i % len(PALETTE)]
        yc = f.y0 + row_h * (i + 0.5)
        out.append(f'<text x="{f.x0 - 8}" y="{yc + 4:.1f}" text-anchor="end" {FONT}>{escape(name)}</text>')
        shown = v if v.size <= 2000 else rng.choice(v, 2000, replace=False)
        jitter = rng.uniform(-row_h * 0.3, row_h * 0.3, shown.size)
        for x, j in zip(np.minimum(shown, f.xhi), jitter):
            out.append(f'<circle cx="{f.px(x):.1f}" cy="{yc + j:.1f}" r="1.6" fill="{color}" fill-opacity="0.35"/>')
        p10, med, p90 = np.percentile(v, [10, 50, 90])
        x10, xm, x90 = f.px(min(p10, f.xhi)), f.px(min(med, f.xhi)), f.px(min(p90, f.xhi))
        out.append(f'<rect x="{x10:.1f}" y="{yc - row_h * 0.35:.1f}" width="{max(1.0, x90 - x10):.1f}" '
                   f'height="{row_h * 0.7:.1f}" fill="none" stroke="{color}" stroke-width="1.5"/>'
                   f'<line x1="{xm:.1f}" y1="{yc - row_h * 0.4:.1f}" x2="{xm:.1f}" y2="{yc + row_h * 0.4:.1f}" '
                   f'stroke="#000" stroke-width="2"><title>median {fmt(med)} {escape(unit)}</title></line>')
    out += f.x_axis(f"latency ({unit}); box p10–p90, bar median")
    out.append("</svg>")
    return "\n".join(out)


LEGEND_CHAR_PX = 6.2  # width of a legend character at FONT's size, about
LEGEND_MAX_CHARS = 64


def line_plot(series: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str, width: int = 760,
              height: int = 260, log_y: bool = False, integer_x: bool = False) -> str:
    """Lines with a legend below the axis, in as many columns as its longest name leaves room for; ``log_y``: a
    log scale whose ticks read in the values' own unit; ``integer_x``: ticks at whole numbers only."""
    clean = {}
    for k, pts in series.items():
        pts = [(float(x), float(y)) for x, y in pts if math.isfinite(y) and (y > 0 or not log_y)]
        if pts:
            clean[k] = [(x, math.log10(y) if log_y else y) for x, y in pts]
    if not clean:
        return ""
    xs = [x for pts in clean.values() for x, _ in pts]
    ys = [y for pts in clean.values() for _, y in pts]
    ypad = (max(ys) - min(ys)) * 0.05
    names = {k: k if len(k) <= LEGEND_MAX_CHARS else k[:LEGEND_MAX_CHARS - 1] + "…" for k in clean}
    left, right = 70, 20
    column = 24 + LEGEND_CHAR_PX * max(len(n) for n in names.values())
    cols = max(1, min(len(clean), int((width - left - right) // column)))
    rows = -(-len(clean) // cols)
    f = _Frame(width, height + 18 * rows, left, right, 10, 34 + 18 * rows, (min(xs), max(xs)),
               (min(ys) - ypad, max(ys) + ypad))
    out = f.open(ylabel)
    out += f.y_axis(ylabel, log=log_y)
    for i, (name, pts) in enumerate(clean.items()):
        color = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{f.px(x):.1f},{f.py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        if len(pts) == 1:
            out.append(f'<circle cx="{f.px(pts[0][0]):.1f}" cy="{f.py(pts[0][1]):.1f}" r="3" fill="{color}"/>')
        lx = f.x0 + (i % cols) * column
        ly = f.y1 + 44 + 18 * (i // cols)
        out.append(f'<rect x="{lx:.1f}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{lx + 14:.1f}" y="{ly}" {FONT}><title>{escape(name)}</title>'
                   f'{escape(names[name])}</text>')
    out += f.x_axis(xlabel, label_y=f.y1 + 28, integer=integer_x)  # above the legend
    out.append("</svg>")
    return "\n".join(out)


def bar_plot(items: list[tuple[str, float]], unit: str = "ms", scale: float = 1e3, width: int = 760,
             limit: int = 30) -> str:
    """Horizontal bars, largest first; the rest beyond ``limit`` summed into one bar."""
    items = sorted(((str(k), float(v) * scale) for k, v in items), key=lambda kv: -kv[1])
    if not items:
        return ""
    if len(items) > limit:
        rest = sum(v for _, v in items[limit - 1:])
        items = [*items[:limit - 1], (f"{len(items) - limit + 1} others", rest)]
    total = sum(v for _, v in items) or 1.0
    bar_h = 18
    f = _Frame(width, 40 + bar_h * len(items), 340, 90, 8, 30, (0, max(v for _, v in items)), (0, len(items)))
    out = f.open("time per kernel")
    for i, (name, v) in enumerate(items):
        y = f.y0 + i * bar_h
        label = name if len(name) <= 50 else name[:49] + "…"
        out.append(f'<text x="{f.x0 - 6}" y="{y + 13}" text-anchor="end" {FONT}>{escape(label)}</text>'
                   f'<rect x="{f.x0}" y="{y + 3}" width="{max(0.5, f.px(v) - f.x0):.1f}" height="{bar_h - 5}" '
                   f'fill="{PALETTE[0]}"><title>{escape(name)}</title></rect>'
                   f'<text x="{f.px(v) + 4:.1f}" y="{y + 13}" {FONT}>{fmt(v)} ({v / total:.0%})</text>')
    out += f.x_axis(f"time ({unit})")
    out.append("</svg>")
    return "\n".join(out)
