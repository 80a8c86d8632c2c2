"""The weights as an SVG picture (`attn compute FILE -o heat.svg`, `--format svg`): one heatmap per
head in a grid, queries down the side and keys across the top, a colour scale, masked cells crossed.
Vector shapes and text (fonts named, not embedded: the labels stay text a reader can search and
copy), for a paper. Views never compute: every number is the trace's.

Labels reach it through `labels` (read as text and escaped for a terminal by render/text.py), then
render/escapes.py's `html_text` (XML's five escapes are HTML's; the svg format's record names it): no
label can close an element or open one. Past MOST cells a side, a
grid is elided as the terminal heatmap is (the picked queries and keys, and a picked query's
largest weights, kept); --full draws every cell.
"""

from __future__ import annotations

import numpy as np

from attncli.problem.groups import title as head_title
from attncli.problem.trace import Trace
from attncli.render.escapes import html_text
from attncli.render.heatmap import largest, masked_cells
from attncli.render.text import elision, kept, labels

CELL = 28  # a cell's side, px
FONT = 11  # px
MOST = 64  # rows or columns a grid draws unless --full
PER_ROW = 4  # heads side by side
SCALE_STEPS = 10  # the colour scale's boxes
FONTS = "DejaVu Sans, Helvetica, Arial, sans-serif"


def colour(weight: float) -> str:
    """White (0) to a dark blue (1), through light blues: readable in print and in grey."""
    w = min(1.0, max(0.0, float(weight)))
    start, end = np.array([255, 255, 255]), np.array([8, 48, 107])
    r, g, b = (start + (end - start) * w).round().astype(int)
    return f"#{r:02x}{g:02x}{b:02x}"


def _grid(trace: Trace, h: int, full: bool, picked) -> tuple[list, list, str]:
    p = trace.problem
    wanted, chosen = picked
    chosen = sorted(set(chosen) | set(largest(trace.weights[h], wanted))) if wanted else chosen
    rows = list(range(p.lq)) if full else kept(p.lq, MOST, wanted)
    cols = list(range(p.lk)) if full else kept(p.lk, MOST, chosen)
    title = "weights" + (f" · {head_title(p, h)}" if p.heads > 1 else "")
    return rows, cols, title + elision(rows, cols, p.lq, p.lk, bool(wanted or chosen)).replace("--full shows all",
                                                                                            "--full draws all")


def heatmap_svg(trace: Trace, heads: list[int] | None = None, full: bool = False, picked=((), ()),
                precision: int = 2) -> str:
    """The SVG document: each head's grid (`heads`, None: all), PER_ROW to a row, then the scale."""
    p = trace.problem
    heads = list(range(p.heads)) if heads is None else heads
    queries, keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    grids = [(h, *_grid(trace, h, full, picked)) for h in heads]
    side = FONT * 0.62 * max(len(queries[i]) if i is not None else 1 for _, rows, _, _ in grids for i in rows) + 8
    top = FONT * 0.62 * max(len(keys[j]) if j is not None else 1 for _, _, cols, _ in grids for j in cols) + 30
    width = max(len(cols) for _, _, cols, _ in grids) * CELL + side + 24
    height = max(len(rows) for _, rows, _, _ in grids) * CELL + top + 16
    per_row = min(PER_ROW, len(grids))
    masked = any(masked_cells(trace, h) is not None for h in heads)
    total_w = max(per_row * width + 16, 600 if masked else 320)  # the scale (and the masked mark's words) fit
    total_h = -(-len(grids) // per_row) * height + 70
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{total_h:.0f}" '
           f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" font-family="{FONTS}" font-size="{FONT}">',
           f"<title>{html_text(p.title or 'attention weights')}</title>",
           '<rect width="100%" height="100%" fill="#ffffff"/>']
    for n, (h, rows, cols, title) in enumerate(grids):
        x0, y0 = 8 + (n % per_row) * width, 8 + (n // per_row) * height
        hidden = masked_cells(trace, h)
        out.append(f'<g class="head" data-head="{h}" transform="translate({x0:.1f},{y0:.1f})">')
        out.append(f'<text x="0" y="12" font-weight="bold">{html_text(title)}</text>')
        for c, j in enumerate(cols):
            x = side + c * CELL + CELL / 2
            label = "⋯" if j is None else keys[j]
            out.append(f'<text transform="translate({x:.1f},{top - 4:.1f}) rotate(-60)" class="key">'
                       f"{html_text(label)}</text>")
        for r, i in enumerate(rows):
            y = top + r * CELL
            label = "⋮" if i is None else queries[i]
            out.append(f'<text x="{side - 4:.1f}" y="{y + CELL / 2 + FONT / 3:.1f}" text-anchor="end" class="query">'
                       f"{html_text(label)}</text>")
            for c, j in enumerate(cols):
                x = side + c * CELL
                if i is None or j is None:
                    continue
                if hidden is not None and hidden[i, j]:
                    out.append(f'<rect x="{x}" y="{y:.1f}" width="{CELL}" height="{CELL}" fill="#ffffff" '
                               f'stroke="#dddddd"/><path d="M{x + 6} {y + 6:.1f}l{CELL - 12} {CELL - 12}m0 '
                               f'-{CELL - 12}l-{CELL - 12} {CELL - 12}" stroke="#c0392b" class="masked"/>')
                    continue
                w = float(trace.weights[h, i, j])
                ink = "#ffffff" if w > 0.5 else "#000000"
                out.append(f'<rect x="{x}" y="{y:.1f}" width="{CELL}" height="{CELL}" fill="{colour(w)}" '
                           f'stroke="#ffffff"><title>{html_text(queries[i])} → {html_text(keys[j])}: {w:.6f}</title>'
                           f'</rect><text x="{x + CELL / 2}" y="{y + CELL / 2 + FONT / 3:.1f}" text-anchor="middle" '
                           f'font-size="{FONT - 3}" fill="{ink}">{f"{w:.{precision}f}".removeprefix("0")}</text>')
        out.append("</g>")
    y = total_h - 50
    out.append(f'<g class="scale" transform="translate(8,{y:.0f})"><text x="0" y="10">weight</text>')
    for s in range(SCALE_STEPS + 1):
        w = s / SCALE_STEPS
        out.append(f'<rect x="{50 + s * 22}" y="0" width="22" height="14" fill="{colour(w)}" stroke="#999999"/>')
        if s % 5 == 0:
            out.append(f'<text x="{61 + s * 22}" y="28" text-anchor="middle">{w:.1f}</text>')
    if masked:
        out.append(f'<path d="M{330} 2l10 10m0 -10l-10 10" stroke="#c0392b"/><text x="346" y="11">masked (weight 0, '
                   "left out of the softmax)</text>")
    out.append("</g></svg>\n")
    return "\n".join(out)
