"""`attn check`'s class summary on a console: three tables that never cut a cell.

1. students: file, score (points / max), percent, then per stage its points of its worth (adding
   up to the score; ↪k: k cells carried), then the stages answered. When the stage
   columns do not fit the console they continue in further tables that repeat the file column
   (wrapped on purpose, as `attn compute` splits wide matrices); long file names fold.
2. stages: per stage across the class, cells correct, carried, wrong, imprecise, missing.
3. diagnoses: one row per (stage, mistake) with the number of files, most common first, and the
   mistake in words (the only column that wraps, at spaces).
File names and error notes are user text: through `rich_text` (escaped `Text`), never markup.
"""

from __future__ import annotations

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attncli.marking.grading import STATUSES
from attncli.marking.marks import all_correct
from attncli.marking.scoring import points_for
from attncli.render.gradebook import Points, Result, class_max, diagnoses, score, stage_columns, tallies
from attncli.render.text import rich_text, shown

FILE_WIDTH = 24  # on a narrow console the file column folds longer names, not the scores
BORDER = 3  # a rounded table's "│ " + " " around each column


def _header(name: str) -> str:
    """`heads[1].weights` as two short lines, so that stage columns stay narrow."""
    prefix, _, stage = name.rpartition(".")
    return f"{prefix}\n{stage}" if prefix else name


def _chunks(widths: list[int], first: int, rest: int) -> list[list[int]]:
    """Indices of stage columns in runs: the first run fits `first` characters, later ones `rest`."""
    runs, current, room = [], [], first
    for i, w in enumerate(widths):
        if current and w + BORDER > room:
            runs.append(current)
            current, room = [], rest
        current.append(i)
        room -= w + BORDER
    return runs + [current] if current or not runs else runs


def _students(results: list[Result], console: Console, points: Points | None = None,
              stages: list[str] | None = None, required: tuple[str, ...] = ()) -> list[Table]:
    names, cells = stage_columns(results, points, stages, required)  # "answered" first: it moves on as they do
    widths = [max([len(line) for line in _header(n).splitlines()] + [len(row[i]) for row in cells])
              for i, n in enumerate(names)]
    most = class_max(results, points, required)
    scores = [score(m, most, points_for(points, f), required) for f, m, _ in results]
    score_width = max(len(f"{s.right:g}/{s.max:g}") for s in scores) + len("100.0%") + 2 * BORDER
    # File names are shown whole when the console has room (through a pipe it is unlimited);
    # on a narrow one they fold at FILE_WIDTH rather than push the scores off.
    longest = max([cell_len(shown(f)) for f, _, _ in results] + [4])
    room = console.width - 1 - BORDER - score_width - sum(w + BORDER for w in widths)
    file_width = min(longest, max(FILE_WIDTH, room))
    fixed = 1 + file_width + BORDER
    runs = _chunks(widths, console.width - fixed - score_width, console.width - fixed)
    tables = []
    for k, run in enumerate(runs):
        title = "class summary" if k == 0 else f"class summary (continued, {k + 1}/{len(runs)})"
        table = Table(box=box.ROUNDED, header_style="bold", title=title, title_justify="left")
        table.add_column("file", overflow="fold", min_width=min(file_width, 8), max_width=file_width)
        if k == 0:
            table.add_column("score", justify="right", no_wrap=True)
            table.add_column("%", justify="right", no_wrap=True)
        for i in run:
            table.add_column(_header(names[i]), justify="right", no_wrap=True)
        for (file, _, _), s, row in zip(results, scores, cells):
            head = [rich_text(file)] + ([f"{s.right:g}/{s.max:g}", f"{s.percent:g}%"] if k == 0 else [])
            table.add_row(*head, *[row[i] for i in run])
        tables.append(table)
    return tables


def _stages(results: list[Result]) -> Table:
    table = Table(box=box.ROUNDED, header_style="bold", title="cells per stage", title_justify="left")
    table.add_column("stage", no_wrap=True)
    for status in STATUSES:
        table.add_column(status, justify="right", no_wrap=True)
    for name, counts in tallies(results).items():
        table.add_row(name, *[str(counts[s]) for s in STATUSES])
    return table


def _diagnoses(results: list[Result]) -> Table | None:
    found = diagnoses(results)
    if not found:
        return None
    table = Table(box=box.ROUNDED, header_style="bold", title="diagnoses, most common first",
                  title_justify="left")
    table.add_column("stage", no_wrap=True)
    table.add_column("diagnosis", no_wrap=True)
    table.add_column("files", justify="right", no_wrap=True)
    table.add_column("meaning", overflow="fold", ratio=1)
    for stage, diagnosis, files, words in found:
        table.add_row(stage, diagnosis, str(files), rich_text(words))
    return table


def print_class_summary(results: list[Result], console: Console, points: Points | None = None,
                        stages: list[str] | None = None, required: tuple[str, ...] = ()) -> None:
    """The three tables, files that could not be marked with their note, and a closing line.
    `stages`: every stage key of the problem (else those marked in any file), for "answered k/n"."""
    for table in _students(results, console, points, stages, required):
        console.print(table)
    console.print(_stages(results))
    table = _diagnoses(results)
    if table is not None:
        console.print(table)
    for file, marks, error in results:
        if marks is None:
            line = rich_text(file, style="bold")
            line.append(f": 0 points, could not be marked: {shown(error or '')}", style="red")
            console.print(line)
    for file, marks, note in results:
        if marks is not None and note:  # metadata, keys set aside
            line = rich_text(file, style="bold")
            line.append(f": {shown(note)}", style="dim")
            console.print(line)
    marked = [m for _, m, _ in results if m is not None]
    most = class_max(results, points, required)
    scores = [score(m, most, points_for(points, f), required) for f, m, _ in results]
    mean = sum(s.percent for s in scores) / len(scores) if scores else 0.0
    console.print(f"{sum(all_correct(m) for m in marked)}/{len(results)} files all correct"
                  + (f"; {len(results) - len(marked)} could not be marked" if len(marked) < len(results) else "")
                  + f"; class mean {mean:.1f}%")
    maxima = sorted({s.max for s, m in zip(scores, (m for _, m, _ in results)) if m is not None})
    if len(maxima) > 1:  # a file answering one easy stage scores 100% like a full answer
        console.print(Text(f"files are marked out of different maxima ({maxima[0]} to {maxima[-1]} cells): each "
                           "out of the stages it answered; --require with the stages asked for marks every file "
                           "out of the same",
                           style="dim"))
