"""The table view: a header stating every convention, then one titled table per stage and head.

Views never compute: everything shown is read from the `Trace`.
"""

from __future__ import annotations

import os
import shutil
import sys
from functools import partial

import numpy as np
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from attncli.problem import groups
from attncli.problem.trace import Trace
from attncli.render.explain import fold
from attncli.render.heatmap import largest, print_heatmaps
from attncli.render.text import (
    EDGE_ROWS,
    MAX_COLUMNS,
    RANGES,
    elision,
    exact_scale,
    header_lines,
    kept,
    labels,
    number,
    rich_text,
    shape_text,
    shown,
)
from attncli.render.tiles import tile_parts
from attncli.stages import grads
from attncli.stages import table as stage_table

UNLIMITED = 100_000  # a pipe has no width: never let rich fall back to 80 columns and cut numbers
MIN_WIDTH = 40  # a terminal narrower than this (COLUMNS=0 to 5, say) is laid out at this width


def column_chunks(widths: list[int], label_width: int, available: int) -> list[list[int]]:
    """Split columns into runs that fit `available` characters beside the label column."""
    chunks, chunk, used = [], [], label_width + 4
    for j, width in enumerate(widths):
        if chunk and used + width + 3 > available:
            chunks.append(chunk)
            chunk, used = [], label_width + 4
        chunk.append(j)
        used += width + 3
    return chunks + [chunk]


def matrix_tables(title: str, matrix: np.ndarray, rows: list[str], columns: list[str], precision: int,
                  width: int | None, extra: tuple[tuple[str, np.ndarray], ...] = (), full: bool = False,
                  keep: tuple = ((), ())):
    """Yield a title and a table. A table wider than `width` (a terminal's) is split into column
    ranges. A big matrix (more than 2·EDGE_ROWS rows or MAX_COLUMNS columns) is elided as numpy
    prints arrays (first and last rows and columns around ⋮ and ⋯, the true shape in the title,
    and how to see the rest) unless `full`, or unless on a terminal every column fits in RANGES
    ranges: then all are shown, split. Elided columns are then split too, never elided further (a
    4×4 table on 40 columns shows every number). `extra`: (name, one value per row) columns after
    the matrix's (sum, lse). `keep`: the rows and columns never elided (picked by --query and --key,
    and the largest weights of a picked query); the title then names the ones left out. Only the
    cells shown are formatted."""
    n_rows, n_cols = matrix.shape
    row_ids = list(range(n_rows)) if full else kept(n_rows, 2 * EDGE_ROWS, keep[0])
    labels = ["⋮" if i is None else rows[i] for i in row_ids]
    label_width = max(len(label) for label in labels)

    def layout(col_ids):
        """(header names, rows of cell texts, column widths) for these columns."""
        names = ["⋯" if j is None else columns[j] for j in col_ids]
        cells = [["⋮" if i is None else "⋯" if j is None else number(matrix[i, j], precision)
                  for j in col_ids] for i in row_ids]
        for name, values in extra:
            names.append(name)
            for row, i in zip(cells, row_ids):
                row.append("⋮" if i is None else number(values[i], precision))
        return names, cells, [max(len(c), *(len(row[j]) for row in cells)) for j, c in enumerate(names)]

    col_ids = list(range(n_cols)) if full else kept(n_cols, MAX_COLUMNS, keep[1])
    names, cells, widths = layout(col_ids)
    # A column takes at least 4 characters (a digit and its border): past RANGES · width / 4
    # columns no terminal holds them all in RANGES ranges, and they are not formatted to find out.
    if None in col_ids and width is not None and n_cols <= RANGES * width // 4:
        every = layout(list(range(n_cols)))
        if len(column_chunks(every[2], label_width, width)) <= RANGES:
            col_ids, (names, cells, widths) = list(range(n_cols)), every
    title += elision(row_ids, col_ids, n_rows, n_cols, bool(keep[0] or keep[1]))
    chunks = column_chunks(widths, label_width, width) if width is not None else [list(range(len(names)))]
    for chunk in chunks:
        suffix = "" if len(chunks) == 1 else f" (column {names[chunk[0]]})" if len(chunk) == 1 else \
            f" (columns {names[chunk[0]]}–{names[chunk[-1]]})"
        table = Table(box=box.ROUNDED, header_style="bold")
        table.add_column("", style="bold", no_wrap=True)
        for j in chunk:  # Text everywhere: a label is never markup
            table.add_column(rich_text(names[j]), justify="right", no_wrap=True, min_width=widths[j])
        for label, row in zip(labels, cells):
            table.add_row(rich_text(label), *(Text(row[j]) for j in chunk))
        # The title stands on its own line: as a table title rich would wrap it to the table's width.
        yield rich_text(title + suffix, style="bold")
        yield table


def render(trace: Trace, console: Console, stages, precision: int = 4, width: int | None = None,
           explanation: list[str] | None = None, heads: list[int] | None = None, full: bool = False,
           tiled=None, picked: tuple = ((), ())) -> None:
    """Print the header, then the explanation if there is one, else the tiles (`tiled`, from
    `attn compute --tiles`) and every selected stage of the `heads` chosen (None: all); `width`
    splits tables wider than it; `picked`: the query and key positions never elided."""
    show = partial(_show, console, precision, width, full)
    console.print(Text("\n".join(header_lines(trace, precision))))
    console.print()
    if explanation is not None:
        console.print(Text("\n".join(part for line in explanation for part in fold(shown(line), width))))
        console.print()
        stages = [name for name in stages if name == "heatmap"]
    elif tiled is not None:
        for part in tile_parts(tiled, trace, precision, heads):
            if isinstance(part, str):  # labels in it are escaped already; Text: never markup
                console.print(Text(part))
                console.print()
            else:
                show(*part)
    each_table(trace, stages, show, precision, heads, picked)
    if "heatmap" in stages:
        print_heatmaps(trace, console, heads, full, width, picked)


def each_table(trace: Trace, stages, show, precision: int = 4, heads: list[int] | None = None,
               picked: tuple = ((), ())) -> None:
    """Call `show(title, matrix, rows, columns, extra, what=(name, head), keep=(rows, columns))`
    for every table the tables view prints, in its order (the projected inputs, each head's of
    `heads` (None: all), the final ones); `what` names the table (a stage, gradient or input name;
    "concat", "final", "grads/NAME") and its head (None for tables of every head); `keep` the rows
    and columns never elided (`picked`: query and key positions; beside a picked query, its
    largest weights). The page (render/page.py) draws the same tables."""
    p = trace.problem
    queries, keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    if "inputs" in stages and p.projected:
        for name, array in p.inputs.items():
            rows = {"X": queries, "X_kv": keys}.get(name) or [str(i) for i in range(array.shape[0])]
            show(f"{name} {shape_text(array.shape)}", array.reshape(len(rows), -1), rows, what=(name, None))
    exact = exact_scale(trace)
    scale = number(trace.scale, precision) + (f" ({exact})" if exact else "")  # e.g. "0.7071 (1/√2)"
    for h in range(p.heads) if heads is None else heads:
        _head_tables(trace, h, stages, show, queries, keys, scale, picked)
    _final_tables(trace, stages, show, queries, keys, picked[0])


def _show(console: Console, precision: int, width: int | None, full: bool, title: str, matrix: np.ndarray,
          rows: list[str], columns: list[str] | None = None, extra=(), what=None, keep=((), ())) -> None:
    """One titled matrix (rows, columns: labels escaped by `labels`; columns numbered when None)."""
    columns = columns or [str(j) for j in range(matrix.shape[1])]
    for renderable in matrix_tables(title, matrix, rows, columns, precision, width, extra, full, keep):
        console.print(renderable)
    console.print()


def _head_tables(trace: Trace, h: int, stages, show, queries: list[str], keys: list[str], scale: str,
                 picked: tuple = ((), ())) -> None:
    """Head h's inputs, the stage table's stages it has and the backward pass's, as `stages` selects;
    the picked queries and keys (and a picked query's largest weights) never elided."""
    p = trace.problem
    head = f" · {groups.title(p, h)}" if p.heads > 1 else ""
    wanted, chosen = picked
    if wanted and trace.weights is not None:
        chosen = sorted(set(chosen) | set(largest(trace.weights[h], wanted)))
    by = {"queries": wanted, "keys": chosen}
    if "inputs" in stages:
        for name, rows in (("Q", queries), ("K", keys), ("V", keys)):
            show(f"{name}{head}", trace.stage(name)[h], rows, what=(name, h),
                 keep=(by["queries" if name == "Q" else "keys"], ()))
    for stage in stage_table.present(p):
        if stage.name not in stages or trace.stage(stage.name) is None:
            continue
        matrix = trace.stage(stage.name)[h]
        extra = ()
        if stage.sum_column:  # the row sums (1, or less with sinks), and ln Σ e^logit beside them
            extra = (("sum", matrix.sum(axis=1)),) + ((("lse", trace.lse[h]),) if trace.lse is not None else ())
        title = stage_table.fill(stage.title, p, stage.name, scale=scale)
        rows = keys if stage.rows == "keys" else queries  # K_rope: one row per key
        keep = (by[stage.rows], chosen if stage.columns == "keys" else ())
        show(title + head, matrix, rows, keys if stage.columns == "keys" else None, extra, what=(stage.name, h),
             keep=keep)
        lab = trace.precision
        if "errors" in stages and lab is not None and stage.name in lab.errors:  # --error
            error = lab.errors[stage.name]
            worst = [float(np.nanmax(error[kind][h])) if np.isfinite(error[kind][h]).any() else float("nan")
                     for kind in ("abs", "rel")]
            show(f"{stage.name}: error against float64 in ulps of {p.dtype}{head} (largest: {worst[0]:.3g} "
                 f"absolute, {worst[1]:.3g} relative)", error["ulps"][h], rows,
                 keys if stage.columns == "keys" else None, what=(f"{stage.name}.error", h), keep=keep)
    if trace.gradients is not None:
        for gradient in grads.GRADIENTS:
            if gradient.name in stages:
                matrix = trace.gradients.heads[gradient.name][h]
                columns = keys if gradient.columns == "keys" else [gradient.name] if matrix.ndim == 1 else None
                show(grads.title(gradient, p) + head, matrix.reshape(matrix.shape[0], -1),
                     queries if gradient.rows == "queries" else keys, columns, what=(gradient.name, h),
                     keep=(by[gradient.rows], chosen if gradient.columns == "keys" else ()))


def _final_tables(trace: Trace, stages, show, queries: list[str], keys: list[str], wanted=()) -> None:
    """The heads side by side and the final output (with W_O or several heads), and one gradient per input."""
    p = trace.problem
    if "output" in stages and (p.heads > 1 or "W_O" in p.inputs):
        if "W_O" in p.inputs:
            show("concat = heads side by side", trace.concat, queries, what=("concat", None), keep=(wanted, ()))
        bias = " + b_O" if "b_O" in p.inputs else ""
        title = f"output = concat W_O{bias}" if "W_O" in p.inputs else "output = heads side by side"
        show(title + " (final)", trace.final, queries, what=("final", None), keep=(wanted, ()))
    if trace.gradients is not None and grads.GRADS in stages:
        for name, array in trace.gradients.grads.items():
            show(f"grads: d{name} {shape_text(array.shape)}", array.reshape(-1, array.shape[-1]),
                 _input_rows(name, array, queries, keys), what=(f"{grads.GRADS}/{name}", None))


def _input_rows(name: str, array: np.ndarray, queries: list[str], keys: list[str]) -> list[str]:
    """Row labels of an input's gradient: queries for Q and X, keys for K, V and X_kv, numbers for
    weights, biases and 3-D (per-head) inputs, whose rows are shown one head after another."""
    if array.ndim == 2 and name in ("Q", "X"):
        return queries
    if array.ndim == 2 and name in ("K", "V", "X_kv"):
        return keys
    return [str(i) for i in range(int(np.prod(array.shape[:-1])))]


class _Console(Console):
    """stdout, never cutting what it prints. Through a pipe (`grow`) it widens itself to every
    table and text: rich cuts a table (and wraps a text) at the console's width, and a pipe has
    no width. On a terminal, a table that cannot fit even with its columns at their narrowest
    (rich would squeeze its cells to nothing) is printed at its natural width, and the terminal
    wraps its lines."""

    def __init__(self, *args, grow: bool = False, **kwargs):
        # rich takes a given width only with a height too: under TERM=dumb it would use 80 columns.
        kwargs.setdefault("height", shutil.get_terminal_size().lines)
        super().__init__(*args, **kwargs)
        self.grow = grow

    def print(self, *objects, **kwargs) -> None:
        wide = 0
        for item in (o for o in objects if isinstance(o, (Table, Text) if self.grow else Table)):
            # Measured with room to spare, so the measure is the item's natural width.
            measure = Measurement.get(self, self.options.update(max_width=2**62), item)
            if self.grow:
                self.width = max(self.width, measure.maximum)
            elif self._narrowest(item) > self.width:
                wide = max(wide, measure.maximum)
        if not wide:
            return super().print(*objects, **kwargs)
        width, self.width = self.width, wide
        try:
            super().print(*objects, **kwargs)
        finally:
            self.width = width

    def _narrowest(self, table: Table) -> int:
        """About the narrowest `table` can be without cutting a cell: wrapping columns at their
        longest word, no_wrap columns whole (rich would end those in `…`)."""
        options = self.options.update(max_width=2**62)
        width = (len(table.columns) + 1) if table.box else 0  # the vertical borders
        for column in table.columns:
            cells = [Measurement.get(self, options, c) for c in (column.header, *column.cells)]
            width += max(m.maximum if column.no_wrap else m.minimum for m in cells)
            width += table.padding[1] + table.padding[3]
        return width

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError  # the CLI edge treats a closed pipe as a normal end, exit 0


def terminal_width() -> int:
    """The terminal's columns, never fewer than MIN_WIDTH: with COLUMNS=0 rich prints nothing
    at all, and a handful of columns cannot hold a table's label and one number."""
    return max(MIN_WIDTH, shutil.get_terminal_size().columns)


def make_console() -> Console:
    """stdout as a rich console: the terminal's width (at least MIN_WIDTH), or as wide as each
    table through a pipe. NO_COLOR (set and not empty) drops every style, bold and dim included
    (rich alone keeps those)."""
    plain = os.environ.get("NO_COLOR", "") != ""
    if sys.stdout.isatty():
        return _Console(highlight=False, width=terminal_width(), color_system=None if plain else "auto")
    return _Console(highlight=False, width=UNLIMITED, grow=True, color_system=None if plain else "auto")


def print_tables(trace: Trace, stages, precision: int = 4, explanation: list[str] | None = None,
                 heads: list[int] | None = None, full: bool = False, tiled=None, picked: tuple = ((), ())) -> None:
    """To stdout. On a terminal, tables wider than it are split into column ranges; through a pipe
    the console is made as wide as the widest table, so that no number is ever cut."""
    console = make_console()
    render(trace, console, stages, precision, console.width if sys.stdout.isatty() else None,
           explanation, heads, full, tiled, picked)
