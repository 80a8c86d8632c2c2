"""The weights as a grid of shaded cells: queries down the side, keys across the top.

Shade characters carry the picture without colour (pipes, NO_COLOR); on a colour terminal the
cell background greys with the weight as well, under an explicit black or white foreground, so
that the numbers read on light and dark themes alike. Big grids are elided like the tables.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attncli.render.text import EDGE_ROWS, MAX_COLUMNS, kept, labels
from attncli.groups import title as head_title
from attncli.trace import Trace

SHADES = " ░▒▓█"  # weight 0 … 1 in five steps
LEGEND = "shade: ' ' < 0.125 ≤ '░' < 0.375 ≤ '▒' < 0.625 ≤ '▓' < 0.875 ≤ '█'"
MIN_CELL = 8  # "▓▓▓ 0.77"


def shade(weight: float) -> str:
    return SHADES[min(4, int(weight * 4 + 0.5))]


def cell_style(weight: float) -> str:
    """The 24-step grey ramp, colour 232 (black) to 255 (white), with white text on the dark half
    and black text on the light half."""
    level = int(weight * 23 + 0.5)
    return f"{'color(255)' if level < 12 else 'color(232)'} on color({232 + level})"


def _pad(text: str, width: int, right: bool = True) -> str:
    """Pad to `width` terminal cells (a CJK label takes two per character)."""
    space = " " * max(0, width - cell_len(text))
    return space + text if right else text + space


def heatmap(trace: Trace, head: int, width: int | None = None, full: bool = False) -> Text:
    """One head's weights, each cell `▓▓▓ 0.77`, headed by key labels. Unless `full`, at most
    2·EDGE_ROWS rows and MAX_COLUMNS columns (fewer when `width` is narrow) around ⋮ and ⋯."""
    p = trace.problem
    rows, columns = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    row_ids = list(range(p.lq)) if full else kept(p.lq, 2 * EDGE_ROWS)
    side = max(cell_len("⋮" if i is None else rows[i]) for i in row_ids)
    keep = p.lk if full else min(p.lk, MAX_COLUMNS)
    while True:
        col_ids = kept(p.lk, keep)
        cell = max(MIN_CELL, *(cell_len(columns[j]) for j in col_ids if j is not None))
        if full or width is None or keep <= 2 or side + len(col_ids) * (cell + 1) <= width:
            break
        keep -= 2  # drop keys from the middle until the grid fits
    title = "heatmap of weights" + (f" · {head_title(p, head)}" if p.heads > 1 else "")
    if None in row_ids or None in col_ids:
        title += f" ({p.lq}×{p.lk}, middle elided: --full shows all)"
    text = Text()
    text.append(title + "\n", style="bold")
    header = "".join(" " + _pad("⋯" if j is None else columns[j], cell) for j in col_ids)
    text.append(" " * side + header + "\n")
    for i in row_ids:
        text.append(_pad("⋮" if i is None else rows[i], side, right=False))
        for j in col_ids:
            text.append(" ")
            if i is None or j is None:
                text.append(("⋮" if i is None else "⋯").rjust(cell))
                continue
            w = trace.weights[head, i, j]
            text.append(f"{shade(w) * 3} {w:.2f}".rjust(cell), style=cell_style(w))
        text.append("\n")
    return text


def print_heatmaps(trace: Trace, console: Console, heads: list[int] | None = None, full: bool = False,
                   width: int | None = None) -> None:
    """Every head's grid, side by side when they fit the console, then the legend; `width` (a
    terminal's) narrows grids that do not fit it."""
    heads = heads if heads is not None else range(trace.problem.heads)
    grids = [heatmap(trace, h, width, full) for h in heads]
    widest = max(cell_len(line) for grid in grids for line in grid.plain.splitlines())
    per_row = max(1, (console.width + 4) // (widest + 4))
    for start in range(0, len(grids), per_row):
        layout = Table.grid(padding=(0, 4))
        chunk = grids[start:start + per_row]
        for _ in chunk:
            layout.add_column(no_wrap=True)
        layout.add_row(*chunk)
        console.print(layout)
    console.print(Text(LEGEND))
    console.print()
