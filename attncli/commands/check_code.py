"""`attn check --code`'s work, once commands/check.py has read its options: find the submissions,
choose the cases, run and mark each function (attncli/code/), and report as `attn check` does:
tables, JSON, the gradebook CSV, Gradescope's results.json, the marks page; exit 0 when every case
of every function passes, 1 when some case fails, 2 on trouble (a submission that cannot be
loaded, bad options). Loaded only when --code is given."""

from __future__ import annotations

import glob
import os
import sys

from attncli.base.errors import InputError, ReaderGone, comma_items, one_line, quote
from attncli.code.calling import parse_signature
from attncli.code.cases import battery
from attncli.code.code_marks import CodeMarks, mark_function
from attncli.code.runner import Runner
from attncli.commands.edge import auto_is_table
from attncli.marking.answer_files import special
from attncli.render import out
from attncli.render.code_view import code_dict, code_page, points_of, print_code
from attncli.render.files import Interrupted, write_output
from attncli.render.gradebook import Grading, class_max, csv_gradebook, gradescope, gradescope_class
from attncli.render.json import dumps
from attncli.render.target import OutputError, check_target

NOT_WITH_CODE = ("problem", "require", "decimals", "lenient_json")
GLOB = set("*?[")


def run_code(o, answer_options: list[str]) -> None:
    """Mark the functions `o.code` names; exits with the verdict."""
    for name in NOT_WITH_CODE + tuple(answer_options):
        if getattr(o, name) not in (None, False):
            raise InputError(f"--{name.replace('_', '-')} marks answers, not code; drop it", "--code")
    if o.files:
        raise InputError(f"{quote(o.files[0])}: with --code, give no answers files (cases come from --cases)",
                         "--code")
    signature = _at(lambda: parse_signature(o.signature), "--signature")
    # '' would be every case, no module forbidden, no points, no page: each refused by name
    chosen = None if o.cases is None else comma_items(o.cases, "case names or problem files, comma-separated (e.g. "
                                                      "scooter,random)", "--cases")
    forbid = () if o.forbid is None else tuple(comma_items(o.forbid, "module names, comma-separated (e.g. "
                                                            "attncli,torch.nn.functional)", "--forbid"))
    if o.points is not None:
        comma_items(o.points, "CASE=N, CASE.STAGE=N or STAGE=N, comma-separated", "--points")
    cases, skipped = _at(lambda: battery(signature, o.layout, chosen), "--cases")
    if not cases:
        why = "; ".join(f"{name}: {reason}" for name, reason in skipped)
        raise InputError(f"no case can call this function ({why})", "--cases")
    targets = _targets(o.code)
    output = _page_target(o.report, o.format, targets) if o.report is not None else None
    format = "html" if output else o.format
    results: list[CodeMarks] = []
    with Runner(o.array, o.timeout, o.memory, forbid) as runner:
        for label, target in targets:
            if target is None:
                what = special(label.rpartition(":")[0])  # a named pipe would be opened by no one: said, not run
                failure = f"is {what}, not a regular file; a submission is read from a regular file" if what \
                    else "no such file"
                results.append(CodeMarks(label, (), tuple(skipped), failure=failure))
                continue
            results.append(mark_function(target, signature, o.layout, o.mask_convention, cases, runner, o.tol,
                                         label, skipped))
    for marks in results:
        if marks.failure and len(results) > 1:
            sys.stderr.write(f"error: {one_line(marks.file)}: could not be marked: {one_line(marks.failure)}\n")
    if len(results) == 1 and targets[0][1] is None:
        raise InputError(results[0].failure, results[0].file.rpartition(":")[0])
    _report(results, format, o, output, [c.name for c in cases])


def _at(make, flag: str):
    try:
        return make()
    except InputError as error:
        raise error.at(error.source or flag)


def _targets(given: list[str]) -> list[tuple[str, str | None]]:
    """(label, spec) per submission: globs expanded (sorted), a missing .py file kept as (label, None)."""
    found = []
    for item in given:
        where, colon, name = item.rpartition(":")
        if not colon or not where or not name.replace(".", "").replace("_", "").isalnum():
            raise InputError(f"{quote(item)} is not FILE.py:FUNCTION (or module:FUNCTION)", "--code")
        if GLOB & set(where):
            files = sorted(glob.glob(where))
            if not files:
                raise InputError(f"{quote(where)} matches no file", "--code")
            found += [(f"{path}:{name}", None if special(path) else f"{path}:{name}") for path in files]
        elif where.endswith(".py"):
            found.append((item, item if os.path.isfile(where) else None))
        else:
            found.append((item, item))
    return found


def _page_target(path: str, format: str, targets) -> str:
    try:
        suffix = check_target(path, [spec.rpartition(":")[0] for _, spec in targets if spec], (".html",))
    except OutputError as error:
        raise error.at("--report")
    if suffix != ".html":
        raise InputError(f"{quote(path)}: --report writes the marks page (.html)", "--report")
    if format not in ("auto", "html"):
        raise InputError(f"{quote(path)} is written as html, but --format is {format}; drop --format", "--report")
    return path


def _report(results: list[CodeMarks], format: str, o, output: str | None, case_names: list[str]) -> None:
    code = 0
    if any(m.failure for m in results):
        code = 2
    elif not all(m.all_pass for m in results):
        code = 1
    flat = [(m.file, None if m.failure else m.flat(), m.failure if m.failure else m.note()) for m in results]
    points = _at(lambda: points_of(flat, o.points, case_names), "--points")
    grading = Grading(points=points, max_score=o.max_score, visibility=o.visibility)
    try:
        if format == "html":
            text = code_page(results, flat, o.precision, grading)
            if output is None:
                out.write_all(text)
            else:
                _write(output, text)
        elif format == "csv":
            sys.stdout.write(csv_gradebook(flat, points))
        elif format == "gradescope":
            doc = gradescope(flat[0][1], flat[0][2], class_max(flat, points), grading, flat[0][0]) \
                if len(flat) == 1 else gradescope_class(flat, grading)
            sys.stdout.write(dumps(doc) + "\n")
        elif format == "json" or (format == "auto" and not auto_is_table()):
            doc = code_dict(results[0], points) if len(results) == 1 else \
                {"files": [code_dict(m, points) for m in results], "all_pass": all(m.all_pass for m in results)}
            sys.stdout.write(dumps(doc) + "\n")
        else:
            # Imported here, for start-up: only the tables need rich.
            from attncli.render.summary import print_class_summary
            from attncli.render.tables import make_console

            console = make_console()
            if len(results) == 1:
                print_code(results[0], console, o.precision)
            else:
                print_class_summary(flat, console, points)
        sys.stdout.flush()
    except BrokenPipeError:
        raise ReaderGone(code) from None
    sys.exit(code)


def _write(path: str, text: str) -> None:
    try:
        write_output(path, ".html", text)
    except OutputError as error:
        raise error.at("--report")
    except Interrupted as stop:
        stop.die()
