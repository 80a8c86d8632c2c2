"""Views of `attn check`'s marks: given vs expected tables with ✓ ✗ ↪, summaries, JSON."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attncli.marking.grading import SYMBOLS, TYPED_DECIMALS, Rule, StageMark
from attncli.marking.marks import all_correct, unanswered
from attncli.marking.scoring import Points, score, slip_cost
from attncli.problem.trace import Trace
from attncli.render.gradebook import counts
from attncli.render.tables import column_chunks
from attncli.render.text import labels, number, rich_text, shown
from attncli.stages import grads
from attncli.stages.table import get


def score_line(marks: dict[str, StageMark], points: Points | None = None) -> str:
    """`score: 7/9 right`; in points beside the cells when --points or a slip's cost makes them differ."""
    right, cells = sum(m.right for m in marks.values()), sum(m.cells.size for m in marks.values())
    total = score(marks, 0, points)
    if points or total.right != right:
        return f"score: {total.right:g}/{total.max:g} points ({right}/{cells} cells right)"
    return f"score: {right}/{cells} right"


STYLE = {"correct": "green", "carried": "yellow", "wrong": "bold red", "imprecise": "magenta", "missing": "red"}
MEANING = {"correct": "correct", "carried": "correct from your own earlier stage (carried)",
           "imprecise": "imprecise (too few decimals)", "wrong": "wrong", "missing": "missing"}
LEGEND = " · ".join(f"{SYMBOLS[s]} {MEANING[s]}" for s in MEANING) + \
    "; the expected value follows (beside ↪: what your own earlier numbers give)"


def summary(name: str, mark: StageMark, points: Points | None = None) -> str:
    """`weights: 3/3 right (1 carried)`, then any diagnosis or note, then what a slip cost."""
    priced = slip_cost(mark, points)
    return f"{name}: {counts(mark)}" + "".join(f"\n  {note}" for note in mark.notes + ((priced,) if priced else ()))


def _typed(value: float, decimals: int, precision: int) -> str:
    return number(value, decimals if decimals >= 0 else precision)


def mark_labels(trace: Trace, name: str, mark: StageMark) -> tuple[list[str], list[str]]:
    """(row labels, column labels) of a marked stage's table, escaped by `labels`/`shown`: queries
    or keys, keys or numbered columns, or a tile's own labels. The page (render/page_marks.py)
    reads the same."""
    p = trace.problem
    gradient = grads.get(name.rsplit(".", 1)[-1])
    if gradient is not None:  # the backward pass: rows are queries or keys; D's one column is D
        numbered = [str(j) for j in range(mark.expected.shape[1])]
        columns = labels(p.key_labels, p.lk) if gradient.columns == "keys" else ["D"] if gradient.name == "D" \
            else numbered
        keyed = gradient.rows == "keys"
    else:
        stage = get(name.rsplit(".", 1)[-1])
        by_key = stage is not None and stage.columns == "keys"
        columns = labels(p.key_labels, p.lk) if by_key else [str(j) for j in range(mark.expected.shape[1])]
        keyed = stage is not None and stage.rows == "keys"  # K_rope: one row per key
    rows = labels(p.key_labels if keyed else p.query_labels, p.lk if keyed else p.lq)
    columns = [shown(c) for c in mark.columns] if mark.columns is not None else columns  # a tile's own labels
    rows = [shown(row) for row in mark.rows] if mark.rows is not None else rows
    return rows, columns


def stage_tables(trace: Trace, name: str, mark: StageMark, precision: int, width: int | None):
    """Yield a title and a table of the given values marked (expected beside); a table wider than
    `width` (a terminal's; None: a pipe, as wide as it needs) is split into column ranges, each
    cell shown whole."""
    rows, columns = mark_labels(trace, name, mark)
    rows = [rich_text(row) for row in rows]
    cells = []
    for i in range(len(rows)):
        cells.append([])
        for j in range(len(columns)):
            verdict = mark.cells[i, j]
            text = Text(_typed(mark.given.values[i, j], mark.given.decimals[i, j], precision) + " ")
            text.append(SYMBOLS[verdict], style=STYLE[verdict])
            if verdict != "correct":
                text.append(f" {number(shown_value(mark, i, j), shown_decimals(mark, i, j, precision))}", style="dim")
            cells[i].append(text)
    headers = [rich_text(column) for column in columns]
    widths = [max(h.cell_len, *(row[j].cell_len for row in cells)) for j, h in enumerate(headers)]
    chunks = column_chunks(widths, max(row.cell_len for row in rows), width) if width else [list(range(len(columns)))]
    for chunk in chunks:
        suffix = "" if len(chunks) == 1 else f" (columns {columns[chunk[0]]}–{columns[chunk[-1]]})"
        table = Table(box=box.ROUNDED, header_style="bold")
        table.add_column("", style="bold", no_wrap=True)
        for j in chunk:
            table.add_column(headers[j], justify="right", no_wrap=True, min_width=widths[j])
        for label, row in zip(rows, cells):
            table.add_row(label, *(row[j] for j in chunk))
        yield rich_text(name + suffix, style="bold")
        yield table


def shown_value(mark: StageMark, i: int, j: int) -> float:
    """The value shown beside a cell not correct: for a carried one, what the learner's own earlier
    stage gives (what they were right to write); otherwise the exact value."""
    if mark.cells[i, j] == "carried" and mark.followed is not None:
        return mark.followed[i, j]
    return mark.expected[i, j]


def shown_decimals(mark: StageMark, i: int, j: int, precision: int) -> int:
    """The expected value's decimals: --precision, or the learner's own when they wrote more by hand
    (`1.66082 ✗ 1.66050`, not 1.6605; a computed number's sixteen are not copied)."""
    written = int(mark.given.decimals[i, j])
    return max(precision, written) if written <= TYPED_DECIMALS else precision


def print_marks(trace: Trace, marks: dict[str, StageMark], console: Console, precision: int,
                rule: Rule = Rule(), points: Points | None = None) -> None:
    """Per stage: a table of given values marked by status (expected beside); then one summary
    line per stage, the stages not answered, the total and the marking rule."""
    console.print(Text(LEGEND))
    console.print()
    for name, mark in marks.items():
        if mark.count("missing") == mark.cells.size:
            continue  # nothing to show: the summary says it is missing
        width = None if getattr(console, "grow", False) else console.width  # a pipe grows to fit
        for renderable in stage_tables(trace, name, mark, precision, width):
            console.print(renderable)
        console.print()
    for name, mark in marks.items():
        console.print(Text("\n".join(shown(line) for line in summary(name, mark, points).splitlines())))
    skipped = unanswered(trace, marks)
    if skipped:
        console.print(Text(f"not answered: {', '.join(skipped)}"))
    console.print(Text(score_line(marks, points)))
    console.print(Text(rule.text(), style="dim"))
    console.print(Text("all correct" if all_correct(marks) else "some answers are not right"))
