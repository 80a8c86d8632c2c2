"""Views of `attn check --code`'s marks (attncli/code/code_marks.py): the terminal's report of one
function (a line per case, the tables of a failing case's stages, its diagnoses), the JSON, the
points per case for the gradebook and Gradescope, and the marks page. A class is drawn by the
class summary, the gradebook and Gradescope of `attn check` (render/summary.py,
render/gradebook.py), which read a function's marks as `case.stage` stages.

Every string the learner controls (the exception's text, what the function printed, the file's
name) is escaped by `shown` / `rich_text` here, and by each format's own escaping (JSON, CSV, HTML).
"""

from __future__ import annotations

import os

import numpy as np
from rich.console import Console
from rich.text import Text

from attncli.base.errors import InputError, quote
from attncli.code.code_marks import CaseMark, CodeMarks
from attncli.marking.scoring import FilePoints, points_for
from attncli.render.escapes import html_text, script_json
from attncli.render.gradebook import Grading, Points, counts, marks_dict, score
from attncli.render.marks import LEGEND, stage_tables, summary
from attncli.render.page import document, escape_lines, tabbed
from attncli.render.page_marks import stage_table
from attncli.render.page_marks import summary as class_summary
from attncli.render.text import rich_text

NOT_A_SANDBOX = "the file's code ran with your permissions: attn check --code is not a sandbox"


def points_of(results: list, given: str | None, cases: list[str]) -> FilePoints:
    """Each file's `case.stage` keys' points: each case is worth 1 point (or N, `--points case=N`),
    shared by the stages that file's function returned (never a classmate's: the last file's count
    decided every file's share); `case.stage=N` or `stage=N` sets one stage's points."""
    wanted: dict[str, float] = {}
    for item in (part.strip() for part in (given or "").split(",") if part.strip()):
        key, equals, number = (x.strip() for x in item.partition("="))
        try:
            value = float(number)
        except ValueError:
            value = -1.0
        if not equals or not 0 < value <= 1e6:
            raise InputError(f"{quote(item)} is not CASE=N, CASE.STAGE=N or STAGE=N with N above 0", "--points")
        wanted[key] = value
    points = FilePoints()
    for file, marks, _ in results:
        by_case: dict[str, list[str]] = {}
        for key in marks or {}:
            by_case.setdefault(key.partition(".")[0], []).append(key)
        own = points.setdefault(file, {})
        for case, keys in by_case.items():
            for key in keys:
                stage = key.partition(".")[2]
                own[key] = wanted.get(key, wanted.get(stage, wanted.get(case, 1.0) / len(keys)))
    returned = {key.partition(".")[2] for own in points.values() for key in own}
    unknown = [k for k in wanted if k.partition(".")[0] not in cases and k not in returned]
    if unknown:
        raise InputError(f"{quote(unknown[0])} is not a case run ({', '.join(cases)}) nor a stage returned", "--points")
    return points


def _case_line(c: CaseMark) -> str:
    symbol = "✓" if c.passed else "✗"
    right = ", ".join(f"{name} {counts(mark)}" for name, mark in c.marks.items())
    return f"{symbol} {c.case.name}: {c.case.about} ({c.case.shape_text()})" + (f": {right}" if not c.failure else "")


def _failure_lines(failure: str, frame, printed: str) -> list[str]:
    lines = [failure]
    if frame is not None:
        lines.append(f"at {frame.text()}")
    if printed:
        lines.append(f"printed: {printed}")
    return lines


def print_code(marks: CodeMarks, console: Console, precision: int = 4) -> None:
    """One function's marks: a line per case; a failing case's stage tables and diagnoses."""
    console.print(rich_text(f"attn check --code {marks.file}", style="bold"))
    if marks.failure:
        for line in _failure_lines(f"could not be marked: {marks.failure}", marks.frame, marks.printed):
            console.print(rich_text(line))
        return
    console.print(Text(LEGEND, style="dim"))
    width = None if getattr(console, "grow", False) else console.width
    for c in marks.cases:
        console.print()
        console.print(rich_text(_case_line(c), style="green" if c.passed else "bold red"))
        if c.failure:
            for line in _failure_lines(c.failure, c.frame, c.printed):
                console.print(rich_text("  " + line))
            continue
        for name, mark in c.marks.items():
            if mark.right == mark.cells.size:
                continue
            for renderable in stage_tables(c.case.traces[0], f"{c.case.name}.{name}", mark, precision, width):
                console.print(renderable)
            for line in summary(name, mark).splitlines():
                console.print(rich_text("  " + line))
        for note in c.notes:
            console.print(rich_text("  " + note))
        if c.printed and not c.passed:
            console.print(rich_text(f"  printed: {c.printed}"))
    for note in marks.notes:
        console.print(rich_text(note, style="bold red"))
    if marks.not_run:
        console.print()
        console.print(rich_text("not run: " + "; ".join(f"{name} ({why})" for name, why in marks.not_run),
                                style="dim"))
    passed = sum(c.passed for c in marks.cases)
    console.print()
    console.print(Text(f"cases: {passed}/{len(marks.cases)} pass"))
    console.print(Text("all cases pass" if marks.all_pass else "some cases fail"))


def _numbers(values: np.ndarray) -> list:
    """Nested lists for strict JSON: a number, or "nan", "inf", "-inf"."""
    return [[float(x) if np.isfinite(x) else ("nan" if np.isnan(x) else "inf" if x > 0 else "-inf") for x in row]
            for row in values]


def _frame_dict(frame) -> dict | None:
    return None if frame is None else {"file": frame.file, "line": frame.line, "function": frame.function,
                                       "code": frame.code}


def code_dict(marks: CodeMarks, points: Points | None = None) -> dict:
    """The JSON of one function: per case passed, its stages (as `attn check --format json` writes
    them), failure, frame, printed output and notes; the cases not run; the score."""
    doc: dict = {"file": marks.file}
    if marks.failure:
        return doc | {"error": marks.failure, "frame": _frame_dict(marks.frame), "printed": marks.printed,
                      "all_pass": False}
    cases, own = {}, points_for(points, marks.file)
    for c in marks.cases:
        entry = {"about": c.case.about, "passed": c.passed}
        # each stage's points and worth as the score counts them (its share of the case), not its cells
        shares = None if own is None else {name: own[key] for name in c.marks
                                           if (key := f"{c.case.name}.{name}") in own}
        stages = marks_dict(c.marks, points=shares)["stages"]
        for name, mark in c.marks.items():  # the function's own numbers (NaN, ±∞ as the strings "nan", "inf", "-inf")
            stages[name]["given"] = _numbers(mark.given.values) if mark.count("missing") < mark.cells.size else None
            stages[name]["rows"] = list(mark.rows or ())
        entry |= {"stages": stages}
        if c.failure:
            entry |= {"failure": c.failure, "kind": c.kind, "frame": _frame_dict(c.frame)}
        entry |= {"printed": c.printed, "notes": list(c.notes), "seconds": c.seconds}
        cases[c.case.name] = entry
    s = score(marks.flat(), 0, own)
    return doc | {"cases": cases, "not_run": dict(marks.not_run), "passed": sum(c.passed for c in marks.cases),
                  "score": s.right, "max": s.max, "forbidden": list(marks.forbidden), "notes": list(marks.notes),
                  "all_pass": marks.all_pass}


def _learner(marks: CodeMarks, precision: int) -> str:
    if marks.failure:
        return f"<pre>{escape_lines(_failure_lines('could not be marked: ' + marks.failure, marks.frame, marks.printed))}</pre>"
    out = [f'<p class="note">{html_text(LEGEND)}</p>']
    for c in marks.cases:
        out.append(f"<h2>{html_text(_case_line(c))}</h2>")
        if c.failure:
            out.append(f"<pre>{escape_lines(_failure_lines(c.failure, c.frame, c.printed))}</pre>")
            continue
        out += [stage_table(c.case.traces[0], f"{c.case.name}.{name}", mark, precision)
                for name, mark in c.marks.items()]
        lines = [line for name, mark in c.marks.items() for line in summary(name, mark).splitlines()] + list(c.notes)
        out.append(f"<pre>{escape_lines(lines)}</pre>")
    if marks.not_run:
        out.append(f"<p class=\"note\">{html_text('not run: ' + '; '.join(f'{n} ({w})' for n, w in marks.not_run))}</p>")
    return "\n".join(out)


def code_page(results: list[CodeMarks], flat: list, precision: int, grading: Grading = Grading()) -> str:
    """The marks page: one function's cases, or a class's summary and a tab per function."""
    if len(results) == 1:
        parts = [("marks", _learner(results[0], precision))]
        title = f"attn check --code {results[0].file}"
    else:
        parts = [("summary", class_summary(flat, grading.points))]
        parts += [(f"file {n + 1}", f"<h2>{html_text(m.file)}</h2>" + _learner(m, precision),
                   os.path.basename(m.file) or m.file) for n, m in enumerate(results)]
        title = "attn check --code"
    data = {"rows": {}, "tiles": {}, "why": None, "heads": 1, "command": "attn check --code", "given": [],
            "keyRows": ["d_K", "d_V"]}
    return document(title, html_text(NOT_A_SANDBOX), [tabbed(parts)], script_json(data),
                    "Click a number to see its mark and the expected value.")


