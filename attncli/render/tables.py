"""The table view: a header stating every convention, then one titled table per stage and head.

Views never compute: everything shown is read from the `Trace`.
"""

from __future__ import annotations

import shutil
import sys

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attncli.render.text import exact_scale, header_lines, labels, number, shape_text
from attncli.trace import Trace

UNLIMITED = 100_000  # a pipe has no width: never let rich fall back to 80 columns and cut numbers
TITLES = {
    "scores": "scores = Q Kᵀ",
    "scaled": "scaled = scores · {scale}",  # e.g. "0.7071 (1/√2)"
    "masked": "masked = scaled{bias}, −∞ where the mask blocks",
    "weights": "weights = softmax({of}) over keys",
    "output": "output = weights V",
}


def _cells(matrix: np.ndarray, precision: int) -> list[list[str]]:
    return [[number(float(x), precision) for x in row] for row in matrix]


def _column_chunks(widths: list[int], label_width: int, available: int) -> list[range]:
    """Split columns into runs that fit `available` characters beside the label column."""
    chunks, start, used = [], 0, label_width + 4
    for i, width in enumerate(widths):
        if i > start and used + width + 3 > available:
            chunks.append(range(start, i))
            start, used = i, label_width + 4
        used += width + 3
    chunks.append(range(start, len(widths)))
    return chunks


def matrix_tables(title: str, matrix: np.ndarray, rows: list[str], columns: list[str],
                  precision: int, width: int | None, extra: tuple[str, np.ndarray] | None = None):
    """One table (or several, side by side in column ranges, when it is wider than `width`)."""
    cells = _cells(matrix, precision)
    if extra is not None:
        columns = columns + [extra[0]]
        for row, value in zip(cells, extra[1]):
            row.append(number(float(value), precision))
    widths = [max(len(c), *(len(row[j]) for row in cells)) for j, c in enumerate(columns)]
    label_width = max(len(r) for r in rows)
    chunks = [range(len(columns))] if width is None else _column_chunks(widths, label_width, width)
    for chunk in chunks:
        suffix = "" if len(chunks) == 1 else f" (columns {columns[chunk[0]]}–{columns[chunk[-1]]})"
        table = Table(box=box.ROUNDED, header_style="bold")
        table.add_column("", style="bold", no_wrap=True)
        for j in chunk:
            table.add_column(columns[j], justify="right", no_wrap=True, min_width=widths[j])
        for label, row in zip(rows, cells):
            table.add_row(label, *(row[j] for j in chunk))
        # The title stands on its own line: as a table title rich would wrap it to the table's width.
        yield Text(title + suffix, style="bold")
        yield table


def render(trace: Trace, console: Console, stages, precision: int = 4, width: int | None = None,
           explanation: list[str] | None = None, heads: list[int] | None = None) -> None:
    """Print the header, then the explanation if there is one, else every selected stage;
    `width` splits tables wider than it."""
    p = trace.problem
    queries, keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)

    def show(title, matrix, rows, columns=None, extra=None):
        columns = columns or [str(j) for j in range(matrix.shape[1])]
        for renderable in matrix_tables(title, matrix, rows, columns, precision, width, extra):
            console.print(renderable)
        console.print()

    console.print(Text("\n".join(header_lines(trace, precision))))
    console.print()
    if explanation is not None:
        console.print(Text("\n".join(explanation)))
        console.print()
        stages = [name for name in stages if name == "heatmap"]
    if "inputs" in stages and p.projected:
        for name, array in p.inputs.items():
            rows = {"X": queries, "X_kv": keys}.get(name) or [str(i) for i in range(array.shape[0])]
            show(f"{name} {shape_text(array.shape)}", array.reshape(len(rows), -1), rows)
    for h in range(p.heads):
        head = f" · head {h}" if p.heads > 1 else ""
        if "inputs" in stages:
            for name, rows in (("Q", queries), ("K", keys), ("V", keys)):
                show(f"{name}{head}", trace.stage(name)[h], rows)
        for name in ("scores", "scaled", "masked", "weights", "output"):
            matrix = trace.stage(name)
            if name not in stages or matrix is None:
                continue
            exact = exact_scale(trace)
            scale = number(trace.scale, precision) + (f" ({exact})" if exact else "")
            title = TITLES[name].format(scale=scale,
                                        bias=" + bias" if p.bias is not None else "",
                                        of="scaled" if trace.masked is None else "masked")
            columns = keys if name != "output" else None
            extra = ("sum", matrix[h].sum(axis=1)) if name == "weights" else None
            show(title + head, matrix[h], queries, columns, extra)
    if "output" in stages and (p.heads > 1 or "W_O" in p.inputs):
        if "W_O" in p.inputs:
            show("concat = heads side by side", trace.concat, queries)
        bias = " + b_O" if "b_O" in p.inputs else ""
        title = f"output = concat W_O{bias}" if "W_O" in p.inputs else "output = heads side by side"
        show(title + " (final)", trace.final, queries)
    if "heatmap" in stages:
        from attncli.render.heatmap import print_heatmaps

        print_heatmaps(trace, console, heads)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        raise BrokenPipeError  # the CLI edge treats a closed pipe as a normal end, exit 0


def make_console() -> Console:
    """stdout as a rich console: the terminal's width, or unlimited through a pipe."""
    if sys.stdout.isatty():
        return _Console(highlight=False)
    return _Console(highlight=False, width=UNLIMITED)


def print_tables(trace: Trace, stages, precision: int = 4, explanation: list[str] | None = None,
                 heads: list[int] | None = None) -> None:
    """To stdout. On a terminal, tables wider than it are split into column ranges; through a pipe
    the console is made as wide as the widest table, so that no number is ever cut."""
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    render(trace, make_console(), stages, precision, width, explanation, heads)
