"""A per-query delta histogram as a self-contained SVG (no plotting dependency).

A report must show the distribution, not only the mean: a +0.02 mean made of a few
big wins reads differently from many small ones. SVG is text, diffs well and opens
in any browser or Markdown viewer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 640, 320
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 36, 48


def histogram_counts(values: Sequence[float], *, bins: int) -> tuple[list[int], float]:
    """Counts over ``bins`` equal bins on a symmetric range [-span, span]; returns (counts, span)."""
    span = max((abs(v) for v in values), default=0.0)
    span = span if span > 0 else 1.0
    counts = [0] * bins
    for v in values:
        i = int((v + span) / (2 * span) * bins)
        counts[min(max(i, 0), bins - 1)] += 1
    return counts, span


def delta_histogram_svg(deltas: Sequence[float], *, title: str, xlabel: str, bins: int = 21) -> str:
    """Histogram of per-query deltas, zero marked; bars right of zero favour B."""
    counts, span = histogram_counts(deltas, bins=bins)
    top = max(counts, default=0) or 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bar_w = plot_w / bins
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    for i, count in enumerate(counts):
        if count == 0:
            continue
        h = count / top * plot_h
        x = LEFT + i * bar_w
        centre = -span + (i + 0.5) * 2 * span / bins
        colour = "#2a7ab0" if centre > 0 else "#c0504d" if centre < 0 else "#888888"
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{TOP + plot_h - h:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" '
            f'fill="{colour}"><title>{count} queries, delta ≈ {centre:+.3f}</title></rect>'
        )
    zero_x = LEFT + plot_w / 2
    parts.append(
        f'<line x1="{zero_x}" y1="{TOP}" x2="{zero_x}" y2="{TOP + plot_h}" '
        'stroke="black" stroke-dasharray="4 3"/>'
    )
    parts.append(
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="black"/>'
    )
    parts.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="black"/>')
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = LEFT + frac * plot_w
        parts.append(
            f'<text x="{x:.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">'
            f"{-span + frac * 2 * span:+.2f}</text>"
        )
    step = max(1, math.ceil(top / 5))
    for c in range(0, top + 1, step):
        y = TOP + plot_h - c / top * plot_h
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{c}</text>')
    parts.append(
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">{escape(xlabel)}</text>'
    )
    parts.append(
        f'<text x="14" y="{TOP + plot_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2})">queries</text>'
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
