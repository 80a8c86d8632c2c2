"""Views of `attn check`'s marks: given vs expected tables with ✓ ✗ ↪, summaries, JSON."""

from __future__ import annotations

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attncli.marking import StageMark
from attncli.render.text import labels, number, rich_text, shown
from attncli.trace import Trace, plain

SYMBOL = {"correct": "✓", "carried": "↪", "wrong": "✗"}
STYLE = {"correct": "green", "carried": "yellow", "wrong": "bold red"}


def summary(name: str, mark: StageMark) -> str:
    """`weights: 3/3 correct (1 carried)`, then any diagnosis."""
    carried = f" ({mark.count('carried')} carried)" if mark.count("carried") else ""
    line = f"{name}: {mark.right}/{mark.cells.size} correct{carried}"
    return line + "".join(f"\n  {note}" for note in mark.notes)


def all_correct(marks: dict[str, StageMark]) -> bool:
    return all(mark.count("wrong") == 0 for mark in marks.values())


def _written(value: float, decimals: int, precision: int) -> str:
    return number(value, decimals if decimals >= 0 else precision)


def stage_table(trace: Trace, name: str, mark: StageMark, precision: int) -> Table:
    p = trace.problem
    output = name.endswith("output")
    columns = [str(j) for j in range(mark.expected.shape[1])] if output else labels(p.key_labels, p.lk)
    table = Table(box=box.ROUNDED, header_style="bold")
    table.add_column("", style="bold", no_wrap=True)
    for column in columns:
        table.add_column(rich_text(column), justify="right", no_wrap=True)
    for i, row in enumerate(labels(p.query_labels, p.lq)):
        cells = []
        for j in range(len(columns)):
            verdict = mark.cells[i, j]
            text = Text(_written(mark.given.values[i, j], mark.given.decimals[i, j], precision) + " ")
            text.append(SYMBOL[verdict], style=STYLE[verdict])
            if verdict != "correct":
                text.append(f" {number(mark.expected[i, j], precision)}", style="dim")
            cells.append(text)
        table.add_row(rich_text(row), *cells)
    return table


def print_marks(trace: Trace, marks: dict[str, StageMark], console: Console, precision: int) -> None:
    """Per stage: a table of given values marked ✓ correct, ↪ carried, ✗ wrong (expected beside)."""
    console.print(Text("✓ correct · ↪ correct from your own earlier stage (carried) · "
                       "✗ wrong, expected value after it"))
    console.print()
    for name, mark in marks.items():
        console.print(Text(name, style="bold"))
        console.print(stage_table(trace, name, mark, precision))
        console.print()
    for name, mark in marks.items():
        console.print(Text("\n".join(shown(line) for line in summary(name, mark).splitlines())))
    console.print(Text("all correct" if all_correct(marks) else "some answers are wrong"))


def marks_dict(marks: dict[str, StageMark]) -> dict:
    """The JSON form: per stage counts, per-cell verdicts, expected values and diagnoses."""
    stages = {}
    for name, mark in marks.items():
        stages[name] = {"correct": mark.count("correct"), "carried": mark.count("carried"),
                        "wrong": mark.count("wrong"), "cells": mark.cells.tolist(),
                        "expected": plain(np.asarray(mark.expected)), "diagnosis": list(mark.diagnosis),
                        "notes": list(mark.notes)}
    return {"stages": stages, "all_correct": all_correct(marks)}


def print_class_summary(results: list[tuple[str, dict[str, StageMark] | None, str | None]],
                        console: Console) -> None:
    """One row per file: per-stage scores and diagnoses; files that could not be marked say why."""
    names = []
    for _, marks, _ in results:
        for name in marks or {}:
            if name not in names:
                names.append(name)
    table = Table(box=box.ROUNDED, header_style="bold", title="class summary", title_justify="left")
    table.add_column("file", no_wrap=True)
    for name in names:
        table.add_column(Text(name), justify="right", no_wrap=True)
    table.add_column("diagnoses")
    for file, marks, error in results:
        if marks is None:
            table.add_row(rich_text(file), *["–"] * len(names), rich_text(f"error: {error}", style="red"))
            continue
        cells = []
        for name in names:
            mark = marks.get(name)
            if mark is None:
                cells.append("–")
                continue
            carried = f" ({mark.count('carried')}↪)" if mark.count("carried") else ""
            cells.append(f"{mark.right}/{mark.cells.size}{carried}")
        diagnoses = sorted({d for mark in marks.values() for d in mark.diagnosis})
        table.add_row(rich_text(file), *cells, rich_text(", ".join(diagnoses)))
    console.print(table)
    marked = [m for _, m, _ in results if m is not None]
    perfect = sum(all_correct(m) for m in marked)
    unmarked = f"; {len(results) - len(marked)} could not be marked" if len(marked) < len(results) else ""
    console.print(Text(f"{perfect}/{len(marked)} files all correct{unmarked}"))
