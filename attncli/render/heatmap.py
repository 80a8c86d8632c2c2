"""The weights as a grid of shaded cells: queries down the side, keys across the top.

Shade characters carry the picture without colour (pipes, NO_COLOR); on a colour terminal the
cell background greys with the weight as well, under an explicit black or white foreground, so
that the numbers read on light and dark themes alike. Big grids are elided like the tables.
"""

from __future__ import annotations

import numpy as np
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attncli.problem.groups import title as head_title
from attncli.problem.trace import Trace
from attncli.render.text import EDGE_ROWS, MAX_COLUMNS, RANGES, elision, kept, labels

SHADES = " ░▒▓█"  # weight 0 … 1 in five steps
LEGEND = "shade: ' ' < 0.125 ≤ '░' < 0.375 ≤ '▒' < 0.625 ≤ '▓' < 0.875 ≤ '█'"
MIN_CELL = 8  # "▓▓▓ 0.77"
TOP_KEPT = 3  # beside a picked query, its this many largest weights are never elided
# A key the mask hides: a mark where the number would be, not a shade, so that it differs from a
# small visible weight (0.08 shades as blank) without colour too; in colour, red on the
# terminal's own background (the weights' cells all have a grey one).
MASKED = "×"
MASKED_STYLE = "color(160)"
MASKED_LEGEND = "×: masked (the mask hides this key: weight 0, left out of the softmax)"


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


def _columns(lk: int, columns: list[str], side: int, width: int | None, full: bool, keep=()) -> tuple[list, int]:
    """(the keys shown, None for the elided middle; the cell width). All of them with `full`, or
    on a terminal (`width`) when they fit in RANGES ranges; else at most MAX_COLUMNS."""
    def cell(ids) -> int:
        return max(MIN_CELL, *(cell_len(columns[j]) for j in ids if j is not None))

    every = list(range(lk))
    if full or lk <= MAX_COLUMNS:
        return every, cell(every)
    if width is not None and len(_ranges(every, cell(every), side, width)) <= RANGES:
        return every, cell(every)
    col_ids = kept(lk, MAX_COLUMNS, keep)
    return col_ids, cell(col_ids)


def _ranges(col_ids: list, cell: int, side: int, width: int | None) -> list[list]:
    """The shown keys in runs that fit `width` beside the query labels (one run without a width)."""
    per = len(col_ids) if width is None else max(1, (width - side) // (cell + 1))
    return [col_ids[start:start + per] for start in range(0, len(col_ids), per)]


def heatmap(trace: Trace, head: int, width: int | None = None, full: bool = False, picked=((), ())) -> Text:
    """One head's weights, each cell `▓▓▓ 0.77` (`×` where the mask hides the key), headed
    by key labels. Unless `full`, at most 2·EDGE_ROWS rows and MAX_COLUMNS columns around ⋮ and
    ⋯; on a terminal narrower than the grid (`width`), its keys are split into ranges, each titled
    with its first and last key, and every key is shown when they fit in RANGES ranges. `picked`:
    the query and key positions never elided (and a picked query's largest weights)."""
    p = trace.problem
    rows, columns = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    wanted, chosen = picked
    chosen = sorted(set(chosen) | set(largest(trace.weights[head], wanted))) if wanted else chosen
    row_ids = list(range(p.lq)) if full else kept(p.lq, 2 * EDGE_ROWS, wanted)
    side = max(cell_len("⋮" if i is None else rows[i]) for i in row_ids)
    col_ids, cell = _columns(p.lk, columns, side, width, full, chosen)
    ranges = _ranges(col_ids, cell, side, width)
    hidden = masked_cells(trace, head)
    title = "heatmap of weights" + (f" · {head_title(p, head)}" if p.heads > 1 else "")
    title += elision(row_ids, col_ids, p.lq, p.lk, bool(wanted or chosen))
    text = Text()
    text.append(title + "\n", style="bold")
    for n, ids in enumerate(ranges):
        name = lambda j: "⋯" if j is None else columns[j]  # noqa: E731
        if len(ranges) > 1:  # on a line of its own: the title may fill a narrow terminal already
            text.append(("\n" if n else "") + (f"(column {name(ids[0])})" if len(ids) == 1 else
                                                 f"(columns {name(ids[0])}–{name(ids[-1])})") + "\n")
        text.append(" " * side + "".join(" " + _pad(name(j), cell) for j in ids) + "\n")
        for i in row_ids:
            text.append(_pad("⋮" if i is None else rows[i], side, right=False))
            for j in ids:
                text.append(" ")
                if i is None or j is None:
                    text.append(("⋮" if i is None else "⋯").rjust(cell))
                elif hidden is not None and hidden[i, j]:
                    text.append(MASKED.rjust(cell), style=MASKED_STYLE)
                else:
                    w = trace.weights[head, i, j]
                    text.append(f"{shade(w) * 3} {w:.2f}".rjust(cell), style=cell_style(w))
            text.append("\n")
    return text


def largest(weights: np.ndarray, rows, count: int = TOP_KEPT) -> list[int]:
    """The keys with the most weight in any of `rows` (one head's weights, Lq × Lk)."""
    return sorted({int(j) for i in rows for j in np.argsort(-weights[i], kind="stable")[:count]})


def masked_cells(trace: Trace, head: int) -> np.ndarray | None:
    """(Lq, Lk): the cells whose key the mask (or a −∞ bias) hides, weight 0; None without any.
    A row whose every key is masked and that `masked_rows: "uniform"` spreads evenly shows its
    weights: they are what the output used."""
    masked = trace.masked
    if masked is None:
        return None
    hidden = np.isneginf(masked[head]) & (trace.weights[head] == 0)
    return hidden if hidden.any() else None


def print_heatmaps(trace: Trace, console: Console, heads: list[int] | None = None, full: bool = False,
                   width: int | None = None, picked=((), ())) -> None:
    """Every head's grid, side by side when they fit the console, then the legend; `width` (a
    terminal's) narrows grids that do not fit it."""
    heads = heads if heads is not None else range(trace.problem.heads)
    grids = [heatmap(trace, h, width, full, picked) for h in heads]
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
    if any(masked_cells(trace, h) is not None for h in heads):
        console.print(Text(MASKED_LEGEND))
    console.print()
