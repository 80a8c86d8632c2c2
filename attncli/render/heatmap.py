"""The weights as a grid of shaded cells: queries down the side, keys across the top.

Shade characters carry the picture without colour (pipes, NO_COLOR); on a colour terminal the
cell background darkens with the weight as well.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from attncli.render.tables import EDGE_ROWS, MAX_COLUMNS, _pick
from attncli.render.text import labels
from attncli.trace import Trace

SHADES = " ░▒▓█"  # weight 0 … 1 in five steps
LEGEND = "shade: ' ' < 0.125 ≤ '░' < 0.375 ≤ '▒' < 0.625 ≤ '▓' < 0.875 ≤ '█'"


def shade(weight: float) -> str:
    return SHADES[min(4, int(weight * 4 + 0.5))]


def heatmap(trace: Trace, head: int, full: bool = False) -> Text:
    """One head's weights, each cell `▓▓▓ 0.77`, headed by key labels. A big grid is elided as
    tables are (first and last rows and columns around ⋮ and ⋯) unless `full`."""
    p = trace.problem
    row_ids = list(range(p.lq)) if full else _pick(p.lq, 2 * EDGE_ROWS)
    col_ids = list(range(p.lk)) if full else _pick(p.lk, MAX_COLUMNS)
    queries, keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    rows = ["⋮" if i is None else queries[i] for i in row_ids]
    columns = ["⋯" if j is None else keys[j] for j in col_ids]
    side = max(len(r) for r in rows)
    cell = max(8, *(len(c) for c in columns))
    title = "heatmap of weights" + (f" · head {head}" if p.heads > 1 else "")
    if None in row_ids or None in col_ids:
        title += f" ({p.lq}×{p.lk}, middle elided: --full shows all)"
    text = Text(title + "\n", style="bold")
    text.append(" " * side + "".join(f" {c:>{cell}}" for c in columns) + "\n")
    for i, row in zip(row_ids, rows):
        text.append(f"{row:<{side}}")
        for j in col_ids:
            text.append(" ")
            if i is None or j is None:
                text.append(("⋮" if i is None else "⋯").rjust(cell))
                continue
            w = trace.weights[head, i, j]
            level = int(w * 23 + 0.5)  # the 24-step grey ramp, colour 232 (black) to 255 (white)
            text.append(f"{shade(w) * 3} {w:.2f}".rjust(cell), style=f"on color({232 + level})")
        text.append("\n")
    return text


def print_heatmaps(trace: Trace, console: Console, heads: list[int] | None = None, full: bool = False) -> None:
    """Every head's grid, side by side when they fit the console, then the legend."""
    grids = [heatmap(trace, h, full) for h in (heads if heads is not None else range(trace.problem.heads))]
    widest = max(len(line) for grid in grids for line in grid.plain.splitlines())
    per_row = max(1, (console.width + 4) // (widest + 4))
    for start in range(0, len(grids), per_row):
        layout = Table.grid(padding=(0, 4))
        chunk = grids[start:start + per_row]
        for _ in chunk:
            layout.add_column(no_wrap=True)
        layout.add_row(*chunk)
        console.print(layout)
    console.print(LEGEND)
    console.print()
