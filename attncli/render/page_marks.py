"""`attn check … --format html` (or `-o report.html`): the marks as an explorer page. One learner:
each stage's table of the values given, each cell coloured by its mark (correct, carried,
imprecise, wrong, missing); clicking one shows the mark, the learner's value, the expected value,
the stage's diagnoses and the expected value's hand calculation (render/page_derive.py). A class:
the summary tables, then one section (a tab) per file.

Views never compute: the marks, scores, tallies and diagnoses are `attn check`'s own
(render/gradebook.py); the labels are render/marks.py's. User text (file names, labels, notes)
is escaped as on the compute page.
"""

from __future__ import annotations

import math
import os
import re

from attncli.marking.grading import STATUSES, SYMBOLS, Rule
from attncli.marking.marks import all_correct, stage_keys, unanswered
from attncli.marking.scoring import points_for
from attncli.problem.trace import Trace
from attncli.render.escapes import html_text, script_json
from attncli.render.gradebook import class_max, counts, diagnoses, score, stage_columns, tallies
from attncli.render.marks import LEGEND, MEANING, mark_labels, score_line, shown_decimals, shown_value
from attncli.render.marks import summary as summary_lines
from attncli.render.page import document, escape_lines, tabbed
from attncli.render.page_assets import CSS
from attncli.render.page_derive import derivations
from attncli.render.text import header_lines, number

HEAD = re.compile(r"^heads\[(\d+)\]\.")
WORDS = ' class="words"'  # a cell of words (a note, a meaning): it wraps
STAGE = ' class="stage"'  # a class table's stage cell: it may break before its ↪


def _cell(mark, i: int, j: int, precision: int) -> tuple[str, str, str]:
    """(text, the value shown beside a cell not correct, what a click shows) of one marked cell."""
    verdict = mark.cells[i, j]
    value, decimals = mark.given.values[i, j], mark.given.decimals[i, j]
    answer = "—" if math.isnan(value) else number(value, decimals if decimals >= 0 else precision)
    if verdict == "carried" and mark.followed is not None:
        expected = f"{number(shown_value(mark, i, j), shown_decimals(mark, i, j, precision))} from your own earlier " \
                   f"numbers (exact {number(mark.expected[i, j], precision)})"
    else:
        expected = number(mark.expected[i, j], shown_decimals(mark, i, j, precision))
    said = f"{MEANING[verdict]}: yours {answer}, expected {expected}"
    beside = "" if verdict == "correct" else number(shown_value(mark, i, j), shown_decimals(mark, i, j, precision))
    return f"{answer} {SYMBOLS[verdict]}", beside, said + "".join(f"\n{note}" for note in mark.notes)


def stage_table(trace: Trace, name: str, mark, precision: int) -> str:
    """One marked stage as a table: cells `mk-STATUS`, pinned as the compute page's are."""
    rows, columns = mark_labels(trace, name, mark)
    head = HEAD.match(name)
    h, stage = (head[1] if head else "0"), name.rsplit(".", 1)[-1]
    out = [f"<h2>{html_text(name)}</h2>\n<p class=\"note\">{html_text(counts(mark))}</p>\n"
           f'<table data-title="{html_text(name)}"><thead><tr><th></th>']
    out += [f'<th data-col="{j}">{html_text(c)}</th>' for j, c in enumerate(columns)]
    out.append("</tr></thead><tbody>\n")
    for i, label in enumerate(rows):
        out.append(f'<tr><th data-row="{i}">{html_text(label)}</th>')
        for j in range(len(columns)):
            text, beside, said = _cell(mark, i, j, precision)
            out.append(f'<td class="mk-{mark.cells[i, j]}" data-stage="{html_text(stage)}" data-head="{h}" '
                       f'data-row="{i}" data-col="{j}" data-mark="{escape_lines(said.split(chr(10)))}"{" tabindex=0" if i == j == 0 else ""}>'
                       f"{html_text(text)}{f' <span class=exp>{html_text(beside)}</span>' if beside else ''}</td>")
        out.append("</tr>\n")
    return "".join(out) + "</tbody></table>\n"


def learner(trace: Trace | None, marks: dict, precision: int, rule: Rule, points=None) -> str:
    """One file's marks: every answered stage's table, then the summary lines `attn check` prints.
    Without the trace (a class whose files each hold their own problem) the lines alone."""
    out = [f'<p class="note">{html_text(LEGEND)}</p>']
    out += [stage_table(trace, name, mark, precision) for name, mark in marks.items()
            if trace is not None and mark.count("missing") < mark.cells.size]
    lines = [summary_lines(name, mark, points) for name, mark in marks.items()]
    skipped = unanswered(trace, marks) if trace is not None else []
    lines += [f"not answered: {', '.join(skipped)}"] if skipped else []
    lines += [score_line(marks, points), rule.text(), "all correct" if all_correct(marks) else "some answers are not right"]
    out.append(f"<pre>{escape_lines(chr(10).join(lines).split(chr(10)))}</pre>")
    return "\n".join(out)


def marks_notebook(trace: Trace, marks: dict, precision: int, rule: Rule, points=None) -> str:
    """A learner's marks for Jupyter: the page's tables (HTML cells, no drawn borders to go ragged
    in a notebook's font), the style and the summary lines, no script."""
    return f'<div class="attn"><style>{CSS}</style>{learner(trace, marks, precision, rule, points)}</div>'


def _rows_table(title: str, header: list[str], rows: list[list[str]], words: tuple[str, ...] = (),
               stages: tuple[str, ...] = ()) -> str:
    """A table of rows in a box that scrolls sideways when it is wider than the page beside the
    derivation panel; the `words` columns (notes, meanings) wrap instead of running on, and the
    `stages` columns' cells may break before their ↪ (`9/9 ↪5` on two lines when the page is narrow)."""
    out = [f'<h2>{html_text(title)}</h2><div class="wide"><table><thead><tr>']
    out += [f"<th>{html_text(h)}</th>" for h in header]
    out.append("</tr></thead><tbody>")
    for row in rows:
        narrow = WORDS.replace('"words"', '"words short"') if stages else WORDS  # beside stage columns
        cells = (f"<td{narrow if h in words else STAGE if h in stages else ''}>{html_text(str(c))}</td>"
                 for h, c in zip(header, row))
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(out) + "</tbody></table></div>"


def summary(results: list, points=None, required: tuple[str, ...] = (), stages: list[str] | None = None) -> str:
    """The class summary, as the terminal's: a row per file (score, stages answered when some file
    left stages out, per stage its points with ↪ and the cells carried), cells per stage by mark,
    and the diagnoses, most common first."""
    names, rows = stage_columns(results, points, stages, required)
    most = class_max(results, points, required)
    students = []
    for (file, marks, error), cells in zip(results, rows):
        s = score(marks, most, points_for(points, file), required)
        students.append([file, f"{s.right:g}/{s.max:g}", f"{s.percent:g}%", *cells, error or ""])
    out = [_rows_table("class summary", ["file", "score", "%", *names, "note"], students, ("note",), tuple(names))]
    out.append(_rows_table("cells per stage", ["stage", *STATUSES],
                           [[name, *(c[s] for s in STATUSES)] for name, c in tallies(results).items()]))
    found = diagnoses(results)
    if found:
        out.append(_rows_table("diagnoses, most common first", ["stage", "diagnosis", "files", "meaning"],
                               [list(row) for row in found], ("meaning",)))
    return "\n".join(out)


def marks_page(trace: Trace | None, results: list, precision: int, rule: Rule, points=None,
               required: tuple[str, ...] = ()) -> str:
    """The report as one page: a learner's marks, or a class's summary and a section per file.
    `trace` (None when each file held its own problem) gives the header and the derivations."""
    parts, title = [], "attn check"
    if len(results) == 1:
        file, marks, error = results[0]
        title = f"attn check: {file}"
        parts.append(("marks", learner(trace, marks, precision, rule, points) if marks is not None
                      else f'<p>{html_text(error or "")}</p>'))
    else:
        parts.append(("summary", summary(results, points, required, stage_keys(trace) if trace is not None else None)))
        for n, (file, marks, error) in enumerate(results):
            body = f"<h2>{html_text(file)}</h2>" + (learner(trace, marks, precision, rule, points) if marks is not None
                                                  else f'<p>{html_text(error or "")}</p>')
            parts.append((f"file {n + 1}", body, os.path.basename(file) or file))  # the tab: the file's name
    found = derivations(trace, list(range(trace.problem.lq)), precision) if trace is not None else {"rows": {}}
    data = {"rows": found["rows"], "tiles": {}, "why": found.get("why"), "heads": trace.problem.heads if trace else 1,
            "command": "attn compute PROBLEM", "given": [], "keyRows": ["K_rope", "d_K", "d_V"]}
    header = escape_lines(header_lines(trace, precision)) if trace is not None else ""
    return document(title, header, [tabbed(parts)], script_json(data),
                    "Click a number to see its mark, the expected value and how it is calculated.")
