"""Marks as numbers: one answers document's JSON (`marks_dict`), and for a class per-file scores,
per-stage tallies, a CSV gradebook and Gradescope's autograder `results.json`. No rich here;
`render/marks.py` and `render/summary.py` draw the tables.

A class result is a list of `(file name, marks or None, error message or None)`, where marks are
`{stage path: StageMark}` (`weights`, `heads[1].weights`, `output`). A file's score is the cells
that earn the mark (correct or carried) out of the cells marked in it: the stages it answers plus
the stages `--require` adds as missing. With required stages (`--require`, or the problem's
`ask`), every file is out of those alone: stages answered beyond them are marked and shown, but
not scored. A file that could not be marked (unreadable, or no answers at all) scores 0 out of
the required stages' cells, or without them the class's common maximum (the one most marked files
have; the larger on a tie), and keeps its note.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import PurePath

import numpy as np

from attncli.base.arrays import plain
from attncli.base.names import PROJECTED
from attncli.marking.grading import STATUSES, StageMark
from attncli.marking.marks import all_correct, missing_stages, unanswered
from attncli.marking.scoring import (
    FilePoints,
    Points,
    Score,
    earned,
    is_required,
    merged,
    points_for,
    score,
    slip_cost,
    stage_points,
    whole,
)
from attncli.problem.trace import Trace
from attncli.render.escapes import csv_text
from attncli.render.text import shown
from attncli.stages.table import names

Marks = dict[str, StageMark]
Result = tuple[str, "Marks | None", "str | None"]


def counts(mark: StageMark) -> str:
    """`3/3 right (1 carried, 2 imprecise)`: right = correct + carried, then every other status seen."""
    others = [f"{mark.count(s)} {s}" for s in STATUSES[1:] if mark.count(s)]
    return f"{mark.right}/{mark.cells.size} right" + (f" ({', '.join(others)})" if others else "")


def stage_order(name: str) -> tuple[float, int]:
    """Sort key: head by head in computation order; the final `output` after every head."""
    prefix, _, stage = name.rpartition(".")
    if prefix and not prefix.startswith("heads["):
        return -1, 0  # a case's stage (attn check --code marks `case.stage`): kept in the order marked
    head = int(prefix[len("heads["):-1]) if prefix.startswith("heads[") else (math.inf if stage == "output" else -1)
    order = PROJECTED + names()  # a projected problem's Q, K, V before the heads' stages
    return (-2 if stage in PROJECTED and not prefix else head), order.index(stage) if stage in order else len(order)


def class_max(results: list[Result], points: Points | None = None, required: tuple[str, ...] = ()) -> float:
    """What a file that could not be marked is out of: the required stages' worth; without them,
    the maximum most marked files have (the larger on a tie), else every stage marked in any file."""
    if required:
        return whole(sum(stage_points(name, size, merged(points)) for name, size in stage_sizes(results).items()
                         if is_required(name, required)))
    maxima = Counter(score(marks, 0, points_for(points, file)).max for file, marks, _ in results if marks is not None)
    if maxima:
        return max(maxima, key=lambda m: (maxima[m], m))
    return whole(sum(stage_points(name, size, merged(points)) for name, size in stage_sizes(results).items()))


def stage_sizes(results: list[Result]) -> dict[str, int]:
    """Every stage marked in any file, in order, with its number of cells."""
    sizes = {}
    for _, marks, _ in results:
        for name, mark in (marks or {}).items():
            sizes.setdefault(name, int(mark.cells.size))
    return {name: sizes[name] for name in sorted(sizes, key=stage_order)}


def tallies(results: list[Result]) -> dict[str, dict[str, int]]:
    """Per stage across the class: cells per status (`correct`, `carried`, … as in STATUSES)."""
    out = {name: dict.fromkeys(STATUSES, 0) for name in stage_sizes(results)}
    for _, marks, _ in results:
        for name, mark in (marks or {}).items():
            for status in STATUSES:
                out[name][status] += mark.count(status)
    return out


def meaning(mark: StageMark, diagnosis: str) -> str:
    """A diagnosis in words, from the mark's own note (`id: words`)."""
    for note in mark.notes:
        if note.startswith(diagnosis + ":"):
            return note[len(diagnosis) + 1:].strip()
    return ""


def diagnoses(results: list[Result]) -> list[tuple[str, str, int, str]]:
    """(stage, diagnosis, files, meaning): how many files made each mistake at each stage, most
    common first (ties in stage order, then by id)."""
    counts: Counter = Counter()
    words: dict[tuple[str, str], str] = {}
    for _, marks, _ in results:
        for name, mark in (marks or {}).items():
            for d in mark.diagnosis:
                counts[name, d] += 1
                words.setdefault((name, d), meaning(mark, d))
    ranked = sorted(counts, key=lambda k: (-counts[k], stage_order(k[0]), k[1]))
    return [(name, d, counts[name, d], words[name, d]) for name, d in ranked]


ANSWERED = "answered"  # the column of stages answered, k/n, when some file left stages out


def stage_cell(name: str, mark, points: Points | None = None, required: tuple[str, ...] = ()) -> str:
    """A stage's points of its worth, as the score counts them (so a row's stages add up to its
    score), then ↪ and the cells carried; `not scored` for a stage answered beyond those required."""
    if not is_required(name, required):
        return "not scored"
    carried = mark.count("carried")
    worth = stage_points(name, int(mark.cells.size), points)
    return f"{whole(earned(mark, worth, points)):g}/{whole(worth):g}" + (f" ↪{carried}" if carried else "")


def answered(marks, stages: list[str]) -> str:
    """`k/n`: stages answered (not only missing) of the stages asked for."""
    answered = [name for name, mark in (marks or {}).items() if mark.count("missing") < mark.cells.size]
    return f"{len([name for name in answered if name in stages])}/{len(stages)}"


def stage_columns(results: list[Result], points: Points | None = None, stages: list[str] | None = None,
                  required: tuple[str, ...] = ()) -> tuple[list[str], list[list[str]]]:
    """The class table's stage columns, for the terminal and the page alike: (headers, a row of
    cells per file), each stage's `stage_cell`, after an "answered" column (k/n of `stages`, else
    of the stages marked in any file) when some file left stages out."""
    names = list(stage_sizes(results))
    stages = stages or names
    counted = [answered(m, stages) for _, m, _ in results]
    cells = [[("–" if (m or {}).get(n) is None else stage_cell(n, m[n], points_for(points, file), required))
              for n in names] for file, m, _ in results]
    # Functions marked by `attn check --code` (FilePoints) answer what they return: no "answered" count,
    # which would measure each against what its classmates returned.
    if not isinstance(points, FilePoints) and any(c != f"{len(stages)}/{len(stages)}" for c in counted):
        return [ANSWERED] + names, [[count] + row for count, row in zip(counted, cells)]
    return names, cells


def safe_cell(value):
    """A CSV cell: numbers stay numbers; text goes through `csv_text` (controls escaped, and a
    leading `'` when a spreadsheet would take it for a formula)."""
    return csv_text(value) if isinstance(value, str) else value


def csv_gradebook(results: list[Result], points: Points | None = None, required: tuple[str, ...] = ()) -> str:
    """One row per file: file, score, max, percent, per stage `<stage> points` and `<stage> max`
    in points, as the score counts them (so the scored stages add up to it; empty when the file has
    no such stage; 0 and 0 for a stage answered beyond those required, which the note names), the
    diagnoses (`stage: id`, `; `-separated), note."""
    sizes = stage_sizes(results)
    most = class_max(results, points, required)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["file", "score", "max", "percent"]
                    + [f"{name} {part}" for name in sizes for part in ("points", "max")] + ["diagnoses", "note"])
    for file, marks, error in results:
        own = points_for(points, file)
        s = score(marks, most, own, required)
        stages, extras = [], []
        for name in sizes:
            mark = (marks or {}).get(name)
            if mark is None:
                stages += ["", ""]
            elif not is_required(name, required):  # shown, not scored: as Gradescope's 0/0 test
                stages += [0, 0]
                extras.append(f"{name} {stage_output(mark, own)}")
            else:
                worth = stage_points(name, int(mark.cells.size), own)
                stages += [whole(earned(mark, worth, own)), whole(worth)]
        found = "; ".join(f"{name}: {d}" for name, mark in (marks or {}).items() for d in mark.diagnosis)
        note = "; ".join(([error] if error else []) + ([f"not required, not scored: {', '.join(extras)}"] if extras else []))
        writer.writerow([safe_cell(c) for c in [file, s.right, s.max, s.percent, *stages, found, note]])
    return buffer.getvalue()


def stage_output(mark: StageMark, points: Points | None = None) -> str:
    """A stage's result in words, as `attn check` says it (`3/3 right (1 carried)`), then its
    notes one per line, each escaped by `shown` (a note may quote the learner's text), then what its
    slip cost when a cost applied."""
    priced = slip_cost(mark, points)
    return counts(mark) + "".join(f"\n{shown(note)}" for note in mark.notes + ((priced,) if priced else ()))


@dataclass(frozen=True)
class Grading:
    """How a class is scored: --points per stage, --max-score (Gradescope's total), --visibility."""

    points: Points | None = None
    max_score: float | None = None
    visibility: str = "visible"
    required: tuple[str, ...] = ()  # --require (or the problem's ask): every file is out of these


def gradescope(marks: Marks | None, error: str | None = None, class_max: float = 0, grading: Grading = Grading(),
               file: str | None = None) -> dict:
    """Gradescope's autograder results.json: the total `score`, and one test per stage with its
    `score`, `max_score`, `status` and a readable `output` (see
    https://gradescope-autograders.readthedocs.io/en/latest/specs/). With `max_score`, every score
    is scaled so that a full answer scores it. Students read it: the submission's `file` appears in
    the output by its name (answers.json), never the autograder's directories."""
    if file and error:
        error = error.replace(file, PurePath(file).name)
    # Students read `output`: the note (a student's metadata, a file name) is user text, escaped
    # by `shown` as the CSV gradebook escapes it, so its controls and line breaks stay visible text.
    error = shown(error) if error else error
    own = points_for(grading.points, file)
    s = score(marks, class_max, own, grading.required)
    factor = grading.max_score / s.max if grading.max_score is not None and s.max else 1

    def scaled(x: float) -> float:
        return whole(x * factor)

    visibility = grading.visibility
    if marks is None:
        return {"score": 0, "output": f"could not be marked: {error}", "visibility": visibility, "tests": []}
    tests = []
    for name, mark in sorted(marks.items(), key=lambda item: stage_order(item[0])):
        worth = stage_points(name, int(mark.cells.size), own)
        got = earned(mark, worth, own)
        extra = not is_required(name, grading.required)  # answered beyond what is required: feedback only
        tests.append({"name": name, "score": 0 if extra else scaled(got), "max_score": 0 if extra else scaled(worth),
                      "status": "passed" if mark.right == mark.cells.size else "failed",
                      "output": ("not required, not scored: " if extra else "") + stage_output(mark, own),
                      "visibility": visibility})
    note = f"\n{error}" if error else ""  # a marked file's note: its metadata, keys set aside
    return {"score": scaled(s.right), "output": f"{score_text(marks, s, grading, scaled)}{note}", "visibility": visibility,
            "tests": tests}


def score_text(marks: Marks, s: Score, grading: Grading, scaled=lambda x: x) -> str:
    """`10/12 cells right (83.3%)`, or in points (`8/10 points (80%)`) when --points, --max-score
    or a slip's cost makes the score differ from the cells: the numbers the score says."""
    cells = sum(m.right for n, m in marks.items() if is_required(n, grading.required))
    if grading.points or grading.max_score is not None or cells != s.right:
        return f"{scaled(s.right):g}/{scaled(s.max):g} points ({s.percent:g}%)"
    return f"{s.right:g}/{s.max:g} cells right ({s.percent:g}%)"


def gradescope_class(results: list[Result], grading: Grading = Grading()) -> dict:
    """Several files: `{"files": [{"file": …, "results": <results.json>}, …]}`; Gradescope itself
    grades one submission at a time, so a single file gives the bare results.json."""
    most = class_max(results, grading.points, grading.required)
    return {"files": [{"file": file, "results": gradescope(marks, error, most, grading, file)}
                      for file, marks, error in results]}


def marks_dict(marks: dict[str, StageMark], trace: Trace | None = None, points: Points | None = None) -> dict:
    """The JSON form: per stage `right` (correct + carried), `max` and a count per status, its
    `points` and `worth` (scoring.py: a slip's cost), per-cell statuses, expected values, what the
    learner's own earlier stage gives (`followed`, where a cell is carried) and diagnoses; totals;
    required stages missing; with the trace, the stages not answered."""
    stages = {}
    for name, mark in marks.items():
        worth = stage_points(name, int(mark.cells.size), points)
        followed = {} if mark.followed is None else {"followed": plain(np.asarray(mark.followed))}
        stages[name] = ({"right": mark.right, "max": int(mark.cells.size)}
                        | {status: mark.count(status) for status in STATUSES}
                        | {"points": whole(earned(mark, worth, points)), "worth": whole(worth)}
                        | {"cells": mark.cells.tolist(), "expected": plain(np.asarray(mark.expected))} | followed
                        | {"diagnosis": list(mark.diagnosis), "notes": list(mark.notes)})
    total = score(marks, 0, points)
    doc = {"stages": stages, "right": sum(m.right for m in marks.values()),
           "max": sum(int(m.cells.size) for m in marks.values()), "points": total.right, "worth": total.max,
           "missing": missing_stages(marks)}
    if trace is not None:
        doc["not_answered"] = unanswered(trace, marks)
    return doc | {"all_correct": all_correct(marks)}
