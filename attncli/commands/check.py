"""`attn check`: mark a learner's answers (or a class's) against the computed stages."""

import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from attncli.errors import AttnError, InputError, one_line

ANSWER_OPTIONS = ("scores", "scaled", "masked", "weights", "output")
EXIT_DIFFER = 1


class CheckFormat(str, Enum):
    auto = "auto"
    table = "table"
    json = "json"


def _answer(stage: str):
    return typer.Option(f"--{stage}", help=f"The learner's {stage} (path or inline text).",
                        rich_help_panel="Answers given inline")


def check(
    files: Annotated[Optional[list[str]], typer.Argument(
        help="ANSWERS [PROBLEM], one file holding both, or many answer files with --problem.",
        show_default=False)] = None,
    problem: Annotated[Optional[str], typer.Option(
        "--problem", "-p", help="The problem (compute input); every FILE is then an answers file.")] = None,
    scores: Annotated[Optional[str], _answer("scores")] = None,
    scaled: Annotated[Optional[str], _answer("scaled")] = None,
    masked: Annotated[Optional[str], _answer("masked")] = None,
    weights: Annotated[Optional[str], _answer("weights")] = None,
    output: Annotated[Optional[str], _answer("output")] = None,
    tol: Annotated[Optional[float], typer.Option(
        min=0.0, help="Accept cells within this absolute tolerance, instead of at the decimals written.")] = None,
    format: Annotated[CheckFormat, typer.Option("--format", "-f", help="auto: tables on a terminal, JSON "
                                                "when piped.")] = CheckFormat.auto,
    precision: Annotated[int, typer.Option(min=0, max=17, help="Decimals for expected values.")] = 4,
) -> None:
    """Mark a learner's answers: each cell ✓ correct, ↪ carried, or ✗ wrong, with diagnoses.

    attn check answers.json problem.json

    attn check samples/scooter.json --weights "0.0454, 0.7679, 0.1867"

    attn check answers/*.json --problem problem.json

    A cell is correct when it equals the exact value rounded to the decimals the learner wrote
    (±1 in the last place; whole numbers must round exactly), or is within --tol.

    A stage that is wrong but right when recomputed from the learner's own earlier stage is
    carried (error carried forward) and counts as correct.

    Exit codes: 0 every given cell correct, 1 some wrong, 2 trouble.
    """
    from attncli.attention import attend
    from attncli.limits import answers_cap
    from attncli.loading import OneMatrixError, load_matrix, read_document
    from attncli.problem import build_problem

    files = list(files or [])
    inline = {stage: value for stage, value in zip(ANSWER_OPTIONS, (scores, scaled, masked, weights, output))
              if value is not None}
    if problem is None:
        if len(files) > 2:
            raise InputError(f"{len(files)} files given: to mark several answer files, name the problem "
                             "with --problem")
        if not files:
            files = ["-"]
        problem = files.pop() if len(files) == 2 or inline else files[0]
    if not files and not inline:
        raise InputError("no answers: give an answers file, or --scores/--scaled/--weights/--output")
    try:
        doc, source = read_document(problem, keep_decimals=True)
    except OneMatrixError as error:
        error.message += "; give a learner's matrix as an option, e.g. --weights FILE"
        raise
    built = build_problem(doc, source=source)
    try:
        trace = attend(built)
    except AttnError as error:
        raise error.at(source)
    cap = answers_cap(built)  # answers bigger than this problem's every stage are refused unread

    given = {stage: load_matrix(value, f"--{stage}", "bias" if stage == "masked" else "number", cap)[0]
             for stage, value in inline.items()}  # read once, laid over every answers file

    def answers_of(name: str | None) -> dict:
        if name is None or name == problem:
            answers = dict(doc)
        else:
            answers = read_document(name, keep_decimals=True, cap=cap)[0]
        return answers | given if isinstance(answers, dict) else answers  # read_answers names a wrong type

    names = files or [None]
    origin = {stage: f"--{stage}" for stage in inline}
    results = [_mark_one(trace, name or problem, lambda n=name: answers_of(n), tol, len(names) > 1, origin)
               for name in names]
    _report(trace, results, format, precision)


def _mark_one(trace, name: str, answers, tol: float | None, many: bool, origin: dict[str, str]):
    """(file, marks or None, error or None). With several files a bad one is reported and skipped.
    An error about a stage given inline names its option (`--weights`) instead of the file."""
    from attncli.answers import read_answers
    from attncli.marking import mark_all

    try:
        given, final = read_answers(answers(), trace)
        return name, mark_all(trace, given, final, tol), None
    except AttnError as error:
        error.at(origin.get(error.message.split(" ", 1)[0], name))
        if not many:
            raise
        sys.stderr.write(f"error: {one_line(str(error))}\n")
        return name, None, error.message


def _report(trace, results, format: CheckFormat, precision: int) -> None:
    from attncli.render.marks import all_correct, marks_dict

    as_json = format == CheckFormat.json or (format == CheckFormat.auto and not sys.stdout.isatty())
    if as_json:
        from attncli.render.json import dumps

        if len(results) == 1:
            doc = marks_dict(results[0][1])
        else:
            doc = {"files": [{"file": f} | (marks_dict(m) if m is not None else {"error": e})
                             for f, m, e in results],
                   "all_correct": all(m is not None and all_correct(m) for _, m, _ in results)}
        sys.stdout.write(dumps(doc) + "\n")
    else:
        from attncli.render.marks import print_class_summary, print_marks
        from attncli.render.tables import make_console

        console = make_console()
        if len(results) == 1:
            print_marks(trace, results[0][1], console, precision)
        else:
            print_class_summary(results, console)
    if any(m is None for _, m, _ in results):
        sys.exit(2)
    if not all(all_correct(m) for _, m, _ in results):
        sys.exit(EXIT_DIFFER)
